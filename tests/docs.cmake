# The documentation's tools: docs/plot_benchmarks.py draws the benchmark figures of
# docs/benchmarks.md from the outputs saved in docs/bench-results (one PNG per output, one bar per
# ratio key), checked on those outputs and on made-up ones, with its refusals.
add_test(NAME test_plot_benchmarks
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_plot_benchmarks.py
                 ${CMAKE_SOURCE_DIR}/docs)
set_tests_properties(test_plot_benchmarks PROPERTIES TIMEOUT 300 LABELS normal_only
                     ENVIRONMENT "${TS_TEST_ENV}")

# Every fenced code block of README.md and docs/*.md run as written, by its fence's language
# (python in one interpreter per page, sh and console transcripts in a shell, C compiled against
# libtshard), in a scratch copy of the repository's root against one job of 4 daemons; blocks not
# to run say so in their fence (the markers: tests/python/test_docs_blocks.py).
add_test(NAME test_docs_blocks
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_docs_blocks.py
                 ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(test_docs_blocks PROPERTIES TIMEOUT 400 LABELS normal_only
                     ENVIRONMENT "${TS_TEST_ENV}")
