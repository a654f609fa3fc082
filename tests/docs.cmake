# The documentation's tools: docs/plot_benchmarks.py draws the benchmark figures of
# docs/benchmarks.md from the outputs saved in docs/bench-results (one PNG per output, one bar per
# ratio key), checked on those outputs and on made-up ones, with its refusals.
add_test(NAME test_plot_benchmarks
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_plot_benchmarks.py
                 ${CMAKE_SOURCE_DIR}/docs)
set_tests_properties(test_plot_benchmarks PROPERTIES TIMEOUT 300 LABELS normal_only
                     ENVIRONMENT "${TS_TEST_ENV}")
