# Unit tests of dtypes, layouts, the strided-copy kernel and the buffer pool; the copy benchmark.
tshard_unit_test(test_dtype ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dtype.c)
tshard_unit_test(test_copy ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_copy.c)
tshard_unit_test(test_pool ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_pool.c)
add_executable(tshard-bench-copy ${CMAKE_CURRENT_SOURCE_DIR}/bench/bench_copy.c)
target_link_libraries(tshard-bench-copy PRIVATE tskernels)
# --help says what the benchmark measures and exits 0 without running it; an unknown argument
# is refused with exit status 2.
add_test(NAME tshard-bench-copy_help COMMAND tshard-bench-copy --help)
set_tests_properties(tshard-bench-copy_help PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                     "usage: tshard-bench-copy.*_vs_memcpy")
add_test(NAME tshard-bench-copy_bad_arg COMMAND tshard-bench-copy --hlep)
set_tests_properties(tshard-bench-copy_bad_arg PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                     "unknown argument '--hlep' \\(it takes none\\)")
