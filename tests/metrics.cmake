# The Prometheus endpoint (tshardd --metrics, daemon/metrics/): its text format and published
# numbers (unit), and end to end against real daemons at 3 ranks: the series parsed by the test's
# own reader of the exposition format and checked against a known sequence of operations and
# stats, bad HTTP input (unknown paths, other methods, huge headers, a slow client, many
# connections) with the daemon serving throughout, refused --metrics flags, and tshard-launch
# --metrics-port's service-discovery file. The live page on rank 0's port (/, /api/ranks,
# /api/tensors) against describe and every rank's stats at 4 ranks, and drawn in headless Chromium.
if(TARGET tsdmetrics)
  tshard_unit_test(test_exposition ${CMAKE_CURRENT_LIST_DIR}/unit/test_exposition.c)
  target_link_libraries(test_exposition PRIVATE tsdmetrics tsdbase m)
endif()
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  add_test(NAME test_python_metrics
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_metrics.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_metrics PROPERTIES TIMEOUT 300 ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_live_page
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_live_page.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_live_page PROPERTIES TIMEOUT 300 ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
