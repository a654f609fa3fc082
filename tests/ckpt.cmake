# Checkpoints: the end-to-end test with real daemons (4, then 3 and 6 ranks), the
# randomized differential test against numpy (fixed seeds, 4 then 3 ranks), the engine-level MPI
# test (faults injected on one rank) and the checkpoint benchmark.
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  add_test(NAME test_python_ckpt
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_ckpt.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_ckpt PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
  add_test(NAME test_python_ckpt_random
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_ckpt_random.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} 21 22 23 24)
  set_tests_properties(test_python_ckpt_random PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()

# Saves that cannot lose a checkpoint by accident: what to save must be asked, an existing
# checkpoint is replaced only with overwrite, what interrupted saves left is cleaned; the --json
# of show, import-safetensors and export-safetensors (real daemons, Python, the CLI).
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  tshard_python_test(test_python_ckpt_safe test_ckpt_safe.py)
endif()

add_executable(test_ckpt_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/test_ckpt.c)
target_link_libraries(test_ckpt_mpi PRIVATE tsckpt)
tshard_mpi_test(test_ckpt test_ckpt_mpi 1 3 4)

# The load's two read paths (direct, read once then move) on 1, 3, 4 and 6 ranks, and with the
# single-copy transfers off (the all-to-all rounds).
add_executable(test_ckpt_move_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/test_ckpt_move.c)
target_include_directories(test_ckpt_move_mpi PRIVATE ${CMAKE_CURRENT_LIST_DIR}/mpi)
target_link_libraries(test_ckpt_move_mpi PRIVATE tsckpt)
tshard_mpi_test(test_ckpt_move test_ckpt_move_mpi 1 3 4 6)
tshard_mpi_test_env(test_ckpt_move_np4_mpi_rounds test_ckpt_move_mpi 4 TSHARD_CMA=0)

add_executable(tshard-bench-ckpt ${CMAKE_CURRENT_LIST_DIR}/bench/bench_ckpt.c)
target_link_libraries(tshard-bench-ckpt PRIVATE tsckpt)

# The index and file headers alone (no MPI): round trips and misuse.
tshard_unit_test(test_ckpt_index ${CMAKE_CURRENT_LIST_DIR}/unit/test_ckpt_index.c)
target_link_libraries(test_ckpt_index PRIVATE tsckptidx)
# The ranged read through block checksum tables against a naive copy, its faults and its cost
# (files built by hand, no MPI).
tshard_unit_test(test_ckpt_blocks ${CMAKE_CURRENT_LIST_DIR}/unit/test_ckpt_blocks.c)
target_link_libraries(test_ckpt_blocks PRIVATE tsckpt)
# The same ranged reads without io_uring (one preadv per group, as where the kernel or a sandbox
# refuses io_uring).
add_test(NAME test_ckpt_blocks_preadv COMMAND test_ckpt_blocks)
set_tests_properties(test_ckpt_blocks_preadv PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                     ENVIRONMENT "${TS_TEST_ENV};TSHARD_IO_URING=0")
tshard_mpi_test_env(test_ckpt_move_np3_mpi_preadv test_ckpt_move_mpi 3 TSHARD_IO_URING=0)

# Checkpoints on untrusted ground, through real daemons (3 ranks) and the real clients: a save
# refuses a directory that is not a checkpoint (untouched) and writes 0700 / 0600; loads refuse
# FIFOs, symbolic links and directories as checkpoint files, index names the requests' rule
# refuses, overflowing data_offsets and a 2^50-element shape (CORRUPT, fast), and the daemons
# keep serving.
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_ckpt_untrusted
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_ckpt_untrusted.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_ckpt_untrusted PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()

# Asynchronous saves and snapshots through real daemons (4, 3 and 2 ranks): operations racing a
# background save, a failing background write, the copy against --memory-limit, periodic
# snapshots kept by --snapshot-keep, and bad input.
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_ckpt_async
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_ckpt_async.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_ckpt_async PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
