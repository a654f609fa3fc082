# install.cmake - what `cmake --install build --prefix P` puts in P:
#   lib/libtshard.so.0 (soname; .so.X.Y.Z and the libtshard.so link): the C client as one shared
#     library - client/ plus the internal static libraries it needs (wire schema, protocol
#     rules) folded in as PIC, only the tshard_* API exported (cmake/libtshard.map), protobuf-c
#     a dependency (DT_NEEDED);
#   include/tshard/tshard.h, include/tshard/tshard_errors.h (internal headers stay private);
#   lib/cmake/tshard/ (find_package(tshard) -> tshard::tshard), lib/pkgconfig/tshard.pc;
#   bin/tshard (CLI), bin/tshardd (daemon), bin/tshard-launch (launcher).
# The in-tree build keeps using the static `tshard` target; this adds `tshard_shared` beside it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The one version: CMake's project version, for tshard_version() and Python's __version__.
target_sources(tshard PRIVATE ${CMAKE_SOURCE_DIR}/client/version.c)
target_compile_definitions(tshard PRIVATE TSHARD_VERSION="${PROJECT_VERSION}")

# Every internal static library the client links (today tsproto, already PIC) goes
# into the shared library, so it must be position independent: mark the whole closure.
function(tshard_pic_closure target)
  get_property(seen GLOBAL PROPERTY TS_PIC_SEEN)
  if(target IN_LIST seen)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY TS_PIC_SEEN ${target})
  get_target_property(libs ${target} LINK_LIBRARIES)
  get_target_property(ilibs ${target} INTERFACE_LINK_LIBRARIES)
  foreach(lib IN LISTS libs ilibs)
    if(TARGET ${lib})
      get_target_property(type ${lib} TYPE)
      get_target_property(imported ${lib} IMPORTED)
      if(type STREQUAL "STATIC_LIBRARY" AND NOT imported)
        set_target_properties(${lib} PROPERTIES POSITION_INDEPENDENT_CODE ON)
        tshard_pic_closure(${lib})
      endif()
    endif()
  endforeach()
endfunction()
tshard_pic_closure(tshard)

if(CMAKE_VERSION VERSION_LESS 3.24)
  message(WARNING "CMake ${CMAKE_VERSION}: the shared libtshard needs CMake 3.24 (whole-archive "
                  "linking); `cmake --install` installs the executables only")
  set(TS_SHARED_LIB OFF)
else()
  set(TS_SHARED_LIB ON)
  # The source is a placeholder: every object comes from the whole static archive of the client.
  set(TS_SHARED_STUB ${CMAKE_BINARY_DIR}/cmake/tshard_shared.c)
  file(WRITE ${TS_SHARED_STUB} "/* generated: the objects of libtshard.so come from libtshard.a */\n"
                               "typedef int tshard_shared_placeholder;\n")
  add_library(tshard_shared SHARED ${TS_SHARED_STUB})
  target_link_libraries(tshard_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,tshard>"
                        PkgConfig::PROTOBUFC)
  target_link_options(tshard_shared PRIVATE
                      "-Wl,--version-script=${CMAKE_SOURCE_DIR}/cmake/libtshard.map"
                      "-Wl,--no-undefined")
  set_target_properties(tshard_shared PROPERTIES
                        OUTPUT_NAME tshard EXPORT_NAME tshard
                        VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
                        LINK_DEPENDS ${CMAKE_SOURCE_DIR}/cmake/libtshard.map
                        PUBLIC_HEADER "${CMAKE_SOURCE_DIR}/include/tshard.h;${CMAKE_SOURCE_DIR}/include/tshard_errors.h")
  target_include_directories(tshard_shared INTERFACE
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  install(TARGETS tshard_shared EXPORT tshardTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tshard)
  install(EXPORT tshardTargets NAMESPACE tshard:: FILE tshardTargets.cmake
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tshard)
  configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/tshardConfig.cmake.in
                                ${CMAKE_BINARY_DIR}/cmake/tshardConfig.cmake
                                INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tshard)
  write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/tshardConfigVersion.cmake
                                   VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
  install(FILES ${CMAKE_BINARY_DIR}/cmake/tshardConfig.cmake
                ${CMAKE_BINARY_DIR}/cmake/tshardConfigVersion.cmake
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tshard)
  file(RELATIVE_PATH TS_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" TS_PC_TO_PREFIX "${TS_PC_TO_PREFIX}")
  configure_file(${CMAKE_SOURCE_DIR}/cmake/tshard.pc.in ${CMAKE_BINARY_DIR}/cmake/tshard.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/cmake/tshard.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

install(TARGETS tshard-cli tshardd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS ${CMAKE_SOURCE_DIR}/deploy/tshard-launch DESTINATION ${CMAKE_INSTALL_BINDIR})
