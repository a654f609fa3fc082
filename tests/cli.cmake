# Tests of the tshard CLI that need no daemon: golden drawings, the planner's EXPLAIN, .npy files
# against numpy.
add_executable(tshard-npy-roundtrip ${CMAKE_CURRENT_SOURCE_DIR}/cli/npy_roundtrip.c
                                    ${CMAKE_SOURCE_DIR}/client/cli/npy.c)
target_include_directories(tshard-npy-roundtrip PRIVATE ${CMAKE_SOURCE_DIR}/client/cli)
target_link_libraries(tshard-npy-roundtrip PRIVATE tskernels)

set(TS_BIN ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
add_test(NAME test_cli_show_golden
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_show_golden.sh ${TS_BIN})
add_test(NAME test_cli_plan COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli.py ${TS_BIN})
add_test(NAME test_cli_npy COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_npy.py ${TS_BIN})
set_tests_properties(test_cli_show_golden test_cli_plan test_cli_npy PROPERTIES
                     TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT "${TS_TEST_ENV}")

# The CLI against real daemons (needs the daemon, the client library and the Python package for
# the harness).
if(TARGET tshardd AND TARGET tshard-python)
  foreach(np 2 4)
    add_test(NAME test_cli_daemon_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_daemon.py ${TS_BIN} ${np})
    set_tests_properties(test_cli_daemon_np${np} PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                         ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python")
  endforeach()
  # reshard --dtype (casts in transit), plan --to-dtype, and docs/pytorch.md's examples of them
  add_test(NAME test_cli_cast
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_cast.py ${TS_BIN}
                   ${CMAKE_SOURCE_DIR}/docs/pytorch.md)
  set_tests_properties(test_cli_cast PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python")
  # reshard's progress line: asked, waiting (with and without an estimate), on a terminal
  add_test(NAME test_cli_reshard_progress
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_reshard_progress.py ${TS_BIN})
  set_tests_properties(test_cli_reshard_progress PROPERTIES TIMEOUT 180
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python")
  # synchronous save's and load's estimated progress line: asked, estimated, on a terminal
  add_test(NAME test_cli_ckpt_progress
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_ckpt_progress.py ${TS_BIN})
  set_tests_properties(test_cli_ckpt_progress PROPERTIES TIMEOUT 120
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python")
endif()
