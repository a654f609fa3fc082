# The einsum engine: unit tests (parsing and errors, random equations against the naive reference,
# gradients, the transpose cache) and the benchmark program.
set(TS_EINSUM_TESTS ${CMAKE_CURRENT_LIST_DIR})
tshard_unit_test(test_einsum_parse ${TS_EINSUM_TESTS}/unit/test_einsum_parse.c)
tshard_unit_test(test_einsum_forward ${TS_EINSUM_TESTS}/unit/test_einsum_forward.c
                 ${TS_EINSUM_TESTS}/unit/test_einsum_util.c)
tshard_unit_test(test_einsum_backward ${TS_EINSUM_TESTS}/unit/test_einsum_backward.c
                 ${TS_EINSUM_TESTS}/unit/test_einsum_util.c)

add_executable(tshard-bench-einsum ${TS_EINSUM_TESTS}/bench/bench_einsum.c)
target_link_libraries(tshard-bench-einsum PRIVATE tskernels)
