# Operations in flight on one connection (the Python client's futures, the daemon's
# --max-inflight and submission order per connection) against 3 real daemons (about 20 s).
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_async
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_async.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_async PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
