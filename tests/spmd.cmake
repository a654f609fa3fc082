# Idempotency keys and SPMD collectives. The sequencer's key table is
# unit-tested in tests/unit/test_sequencer.c (daemon.cmake); this runs the end-to-end test
# against 3 real daemons with the Python client, the CLI and raw requests (about 15 s).
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  add_test(NAME test_python_spmd_collective
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_spmd_collective.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_spmd_collective PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
# The C library's group (tshard_set_group) on 3 daemons: skewed, missing and misused clients.
if(COMMAND tshard_e2e_test AND TARGET tshardd)
  tshard_e2e_test(test_e2e_spmd)
  add_test(NAME test_e2e_spmd COMMAND test_e2e_spmd)
  set_tests_properties(test_e2e_spmd PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()
