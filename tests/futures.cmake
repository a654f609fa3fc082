# Futures keep the fast data paths: futures mixed with synchronous puts and gets on one
# connection through the direct path and the shared segment, against numpy and the connection's
# bytes by path; misuse (a future never awaited, a refusal among many). 2 real daemons.
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_futures
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_futures.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_futures PROPERTIES TIMEOUT 300
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
