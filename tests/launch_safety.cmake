# The launcher signals only its own processes (a pid file naming a reused pid, another boot's
# process, or not a regular file of the user's is refused), survives a TERM to its process group
# while a background save writes (the save completes), and shows a daemon's own error when it
# refuses its flags; through the script and through tshard.launch. slow_fsync is the slow disk
# the save tests preload into the daemons.
if(TARGET tshardd AND TARGET tshard-cli AND TARGET tshard-python)
  set(TS_BIN ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  add_library(ts_slow_fsync MODULE ${CMAKE_CURRENT_LIST_DIR}/deploy/slow_fsync.c)
  target_link_libraries(ts_slow_fsync PRIVATE ${CMAKE_DL_LIBS})
  target_compile_options(ts_slow_fsync PRIVATE -fno-sanitize=all)
  target_link_options(ts_slow_fsync PRIVATE -fno-sanitize=all)
  add_test(NAME test_launch_safety
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/deploy/test_launch_safety.sh ${TS_BIN}
                   $<TARGET_FILE:ts_slow_fsync>)
  set_tests_properties(test_launch_safety PROPERTIES TIMEOUT 300 ENVIRONMENT "${TS_MPI_TEST_ENV}")
  add_test(NAME test_python_launch_safety
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_launch_safety.py ${TS_BIN}
                   $<TARGET_FILE:ts_slow_fsync>)
  set_tests_properties(test_python_launch_safety PROPERTIES TIMEOUT 300 ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
endif()
