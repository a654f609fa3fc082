# `cmake --install` into a temporary prefix; a program built against the
# installed tree with pkg-config and with find_package(tshard), the installed launcher and
# daemons, and the Python package installed offline by pip (tests/install/test_install.sh).
if(TARGET tshard_shared AND TARGET tshardd AND TARGET tshard-cli AND TARGET tshard-python)
  add_test(NAME test_install
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/test_install.sh ${CMAKE_BINARY_DIR}
                   ${CMAKE_SOURCE_DIR} ${PROJECT_VERSION} ${TSHARD_SANITIZE})
  set_tests_properties(test_install PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()
