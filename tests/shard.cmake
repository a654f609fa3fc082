# Tests of the sharding layer: attributes, planner and reductions (Check, no MPI), the executor,
# store and comm layer under mpirun with 1, 2, 3, 4, 6 and 8 ranks, and the reshard benchmark.
tshard_unit_test(test_attr ${CMAKE_CURRENT_LIST_DIR}/unit/test_attr.c)
target_link_libraries(test_attr PRIVATE tsplan)
# Split rules (balanced, chunk against a model of torch.chunk) and negative dims.
tshard_unit_test(test_attr_chunk ${CMAKE_CURRENT_LIST_DIR}/unit/test_attr_chunk.c)
target_link_libraries(test_attr_chunk PRIVATE tsplan)
tshard_unit_test(test_plan ${CMAKE_CURRENT_LIST_DIR}/unit/test_plan.c)
target_link_libraries(test_plan PRIVATE tsplan)
# Block-cyclic placements: text form, NUMROC, overlays and plans against per-element references.
tshard_unit_test(test_cyclic ${CMAKE_CURRENT_LIST_DIR}/unit/test_cyclic.c)
target_link_libraries(test_cyclic PRIVATE tsplan)
tshard_unit_test(test_topology ${CMAKE_CURRENT_LIST_DIR}/unit/test_topology.c)
target_link_libraries(test_topology PRIVATE tsplan)
tshard_unit_test(test_relabel ${CMAKE_CURRENT_LIST_DIR}/unit/test_relabel.c)
target_link_libraries(test_relabel PRIVATE tsplan)
# The name index of the store and the catalog, against a linear search.
tshard_unit_test(test_names ${CMAKE_CURRENT_LIST_DIR}/unit/test_names.c)
target_link_libraries(test_names PRIVATE tsshard)
tshard_unit_test(test_plans ${CMAKE_CURRENT_LIST_DIR}/unit/test_plans.c)
target_link_libraries(test_plans PRIVATE tsshard)
tshard_unit_test(test_reduce ${CMAKE_CURRENT_LIST_DIR}/unit/test_reduce.c)

add_executable(test_reshard_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/test_reshard.c)
target_link_libraries(test_reshard_mpi PRIVATE tsshard)
tshard_mpi_test(test_reshard test_reshard_mpi 1 2 3 4 6 8)

# Block-cyclic reshards run by the executor, against a model of every rank's local array.
add_executable(test_cyclic_exec_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/test_cyclic_exec.c)
target_link_libraries(test_cyclic_exec_mpi PRIVATE tsshard)
tshard_mpi_test(test_cyclic_exec test_cyclic_exec_mpi 1 2 3 4 6)

# The wait policy: schedules, deadlines, and where a wait yield-spins before it blocks.
tshard_unit_test(test_wait ${CMAKE_CURRENT_LIST_DIR}/unit/test_wait.c)
target_link_libraries(test_wait PRIVATE tswait)

# The daemons' control channel: streams of messages of every size between every pair of ranks.
add_executable(test_control_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/test_control.c)
target_link_libraries(test_control_mpi PRIVATE tscontrol)
tshard_mpi_test(test_control test_control_mpi 2 3 4)

add_executable(test_comm_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/test_comm.c)
target_link_libraries(test_comm_mpi PRIVATE tsshard)
tshard_mpi_test(test_comm test_comm_mpi 1 2 3 4)
add_executable(test_ring_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/test_ring.c)
target_link_libraries(test_ring_mpi PRIVATE tsshard)
tshard_mpi_test(test_ring test_ring_mpi 1 2 3 4)
# The same with the single-copy path of one node off: every region through MPI.
tshard_mpi_test_env(test_comm_mpi_only_np4 test_comm_mpi 4 TSHARD_CMA=0)
# With shared buffers (the receivers copy out of the senders' pool buffers), whatever the
# machine's shared memory pages: the regions, the executor and the batches.
tshard_mpi_test_env(test_comm_shared_np4 test_comm_mpi 4 TSHARD_SHARED_BUFFERS=1)
tshard_mpi_test_env(test_comm_shared_np2 test_comm_mpi 2 TSHARD_SHARED_BUFFERS=1)
tshard_mpi_test_env(test_reshard_shared_np4 test_reshard_mpi 4 TSHARD_SHARED_BUFFERS=1)
tshard_mpi_test_env(test_reshard_shared_np3 test_reshard_mpi 3 TSHARD_SHARED_BUFFERS=1)
# Without doorbells (no shared window): every wait naps, as across nodes.
tshard_mpi_test_env(test_comm_no_doorbells_np3 test_comm_mpi 3 TSHARD_DOORBELLS=0)
tshard_mpi_test_env(test_reshard_no_doorbells_np4 test_reshard_mpi 4 TSHARD_DOORBELLS=0)

add_executable(tshard-bench-reshard ${CMAKE_CURRENT_LIST_DIR}/bench/bench_reshard.c)
target_link_libraries(tshard-bench-reshard PRIVATE tsshard)
# --help (on any rank count) says what the benchmark measures and exits 0 without running it.
add_test(NAME tshard-bench-reshard_help
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 $<TARGET_FILE:tshard-bench-reshard>
                 --help)
set_tests_properties(tshard-bench-reshard_help PROPERTIES TIMEOUT 60 ENVIRONMENT
                     "${TS_MPI_TEST_ENV}" PASS_REGULAR_EXPRESSION
                     "usage: mpirun -np 4 tshard-bench-reshard.*cyclic_vs_raw")
