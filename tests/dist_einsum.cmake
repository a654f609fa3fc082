# Distributed einsum: the planner and the execution over the store under mpirun with
# 1 to 8 ranks (randomized against the naive einsum reference), and the benchmark program.
add_executable(test_dist_einsum_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/test_dist_einsum.c)
target_link_libraries(test_dist_einsum_mpi PRIVATE tsdein m)
tshard_mpi_test(test_dist_einsum test_dist_einsum_mpi 1 2 3 4 8)

add_executable(tshard-bench-einsum-dist ${CMAKE_CURRENT_LIST_DIR}/bench/bench_dist_einsum.c)
target_link_libraries(tshard-bench-einsum-dist PRIVATE tsdein)

# End to end: real daemons, the Python client and the CLI against numpy.
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  foreach(np 3 4)
    add_test(NAME test_python_einsum_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_einsum.py
                     ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${np} ${np})
    set_tests_properties(test_python_einsum_np${np} PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                         ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
  endforeach()
endif()

# The planner alone (no MPI): known cases, forced plans, errors, 4096 ranks offline.
tshard_unit_test(test_dist_einsum_plan ${CMAKE_CURRENT_LIST_DIR}/unit/test_dist_einsum_plan.c)
target_link_libraries(test_dist_einsum_plan PRIVATE tsdeinplan)
