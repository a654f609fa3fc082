# (Named to sort after daemon.cmake, which defines tshard_e2e_test.)
# Operations in flight on one connection (the Python client's futures, the daemon's
# --max-inflight and submission order per connection) against 3 real daemons (about 20 s).
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_async
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_async.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_async PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
# The C library's submit calls and tshard_wait on 3 real daemons.
if(COMMAND tshard_e2e_test AND TARGET tshardd)
  tshard_e2e_test(test_e2e_async)
  add_test(NAME test_e2e_async COMMAND test_e2e_async)
  set_tests_properties(test_e2e_async PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()
