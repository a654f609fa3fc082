# Unit tests of dtypes, layouts, the strided-copy kernel and the buffer pool; the copy benchmark.
tshard_unit_test(test_dtype ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dtype.c)
tshard_unit_test(test_copy ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_copy.c)
tshard_unit_test(test_pool ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_pool.c)
add_executable(tshard-bench-copy ${CMAKE_CURRENT_SOURCE_DIR}/bench/bench_copy.c)
target_link_libraries(tshard-bench-copy PRIVATE tskernels)
