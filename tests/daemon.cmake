# The daemon, its wire protocol and the C client: end-to-end tests that start real daemons under
# mpirun (2 and 4 ranks), the bad-input suite, 64 concurrent clients, the fuzz target (clang,
# bounded time), the RPC and service benchmarks (programs, not tests) and the test that they leave
# no daemons behind.
if(TARGET tshardd AND TARGET tshard)
  add_library(tse_harness STATIC ${CMAKE_CURRENT_LIST_DIR}/e2e/harness.c)
  target_link_libraries(tse_harness PUBLIC tshard Threads::Threads)
  target_include_directories(tse_harness PUBLIC ${CMAKE_CURRENT_LIST_DIR}/e2e)
  target_compile_definitions(tse_harness PRIVATE TSE_MPIEXEC="${MPIEXEC_EXECUTABLE}"
                             TSE_DAEMON="$<TARGET_FILE:tshardd>")

  function(tshard_e2e_test name)
    add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/e2e/${name}.c)
    target_link_libraries(${name} PRIVATE tse_harness)
    add_dependencies(${name} tshardd)
  endfunction()

  # The flag table: --help documents every flag; a bad value is refused before MPI starts.
  add_test(NAME tshardd_help COMMAND tshardd --help)
  set_tests_properties(tshardd_help PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                       "--socket-dir.*--job.*--listen.*--token-file.*--max-frame.*--memory-limit.*--staging.*--log-level")
  add_test(NAME tshardd_bad_flag COMMAND tshardd --max-frame 12)
  set_tests_properties(tshardd_bad_flag PROPERTIES TIMEOUT 60 WILL_FAIL TRUE)
  # --ckpt-chunk: 0 (whole pieces) or at least one 4 KiB checksum block; the message says so
  add_test(NAME tshardd_bad_ckpt_chunk COMMAND tshardd --ckpt-chunk 100)
  set_tests_properties(tshardd_bad_ckpt_chunk PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                       "--ckpt-chunk 100: expected 0 \\(whole pieces\\) or a size of at least 4096 bytes")
  add_test(NAME tshardd_bad_ckpt_chunk_text COMMAND tshardd --ckpt-chunk=16x)
  set_tests_properties(tshardd_bad_ckpt_chunk_text PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                       "--ckpt-chunk 16x: expected a size from 0 to")
  add_test(NAME tshardd_listen_needs_token COMMAND tshardd --listen tcp://127.0.0.1:7000)
  set_tests_properties(tshardd_listen_needs_token PROPERTIES TIMEOUT 60 WILL_FAIL TRUE)

  tshard_e2e_test(test_e2e)
  foreach(np 2 4)
    add_test(NAME test_e2e_np${np} COMMAND test_e2e ${np})
    set_tests_properties(test_e2e_np${np} PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                         ENVIRONMENT "${TS_MPI_TEST_ENV}")
  endforeach()

  # Error paths that must answer, with faults injected through TSHARD_FAULT: an answer that
  # cannot be queued, an ORDER one rank cannot decode, a rank silent in an agreement.
  tshard_e2e_test(test_e2e_faults)
  foreach(part reply order silent)
    add_test(NAME test_e2e_faults_${part} COMMAND test_e2e_faults ${part})
    set_tests_properties(test_e2e_faults_${part} PROPERTIES TIMEOUT 300
                         ENVIRONMENT "${TS_MPI_TEST_ENV}")
  endforeach()

  tshard_e2e_test(test_e2e_badinput)
  target_link_libraries(test_e2e_badinput PRIVATE tsproto)
  add_test(NAME test_e2e_badinput COMMAND test_e2e_badinput)
  set_tests_properties(test_e2e_badinput PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")

  # The benchmarks that start their own daemons (programs, not tests), with the guard that stops
  # those daemons when a benchmark is interrupted, times out or is killed; the test of that guard.
  add_library(tsb_guard STATIC ${CMAKE_CURRENT_LIST_DIR}/bench/bench_guard.c)
  target_link_libraries(tsb_guard PUBLIC tse_harness)
  target_include_directories(tsb_guard PUBLIC ${CMAKE_CURRENT_LIST_DIR}/bench)
  add_executable(tshard-bench-rpc ${CMAKE_CURRENT_LIST_DIR}/bench/bench_rpc.c)
  target_link_libraries(tshard-bench-rpc PRIVATE tsb_guard tsshard)
  add_dependencies(tshard-bench-rpc tshardd)
  # The benchmarks that drive the daemons with the Python package (SCRIPT, beside the program).
  function(tsb_python_bench target source script)
    add_executable(${target} ${CMAKE_CURRENT_LIST_DIR}/bench/${source})
    target_link_libraries(${target} PRIVATE tsb_guard MPI::MPI_C)
    target_compile_definitions(${target} PRIVATE
                               TSB_PY_SCRIPT="${CMAKE_CURRENT_LIST_DIR}/bench/${script}"
                               TSB_PYTHONPATH="${CMAKE_BINARY_DIR}/python")
    add_dependencies(${target} tshardd)
    if(TARGET tshard-python)
      add_dependencies(${target} tshard-python)
    endif()
  endfunction()
  tsb_python_bench(tshard-bench-service bench_service.c bench_service_py.py)
  # Many tensors and small tensors, beside raw MPI of the same bytes.
  tsb_python_bench(tshard-bench-many bench_many.c bench_many_py.py)
  foreach(bench tshard-bench-rpc tshard-bench-service tshard-bench-many)
    add_test(NAME ${bench}_help COMMAND ${bench} --help)
    set_tests_properties(${bench}_help PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                         "usage: .*--timeout SEC.*--wait-stdin.*--help")
  endforeach()
  add_test(NAME test_bench_cleanup
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench/test_bench_cleanup.sh
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_bench_cleanup PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
  add_test(NAME test_bench_service_keys
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench/test_bench_service_keys.sh
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_bench_service_keys PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
  add_test(NAME test_bench_many_keys
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench/test_bench_many_keys.sh
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_bench_many_keys PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")

  # Startup refusals (token files, --staging) and list/describe during a long reshard.
  tshard_e2e_test(test_e2e_harden)
  target_link_libraries(test_e2e_harden PRIVATE tsproto)
  target_compile_definitions(test_e2e_harden PRIVATE TSE_DAEMON_PATH="$<TARGET_FILE:tshardd>")
  add_test(NAME test_e2e_harden COMMAND test_e2e_harden)
  set_tests_properties(test_e2e_harden PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")

  tshard_e2e_test(test_e2e_shm)
  add_test(NAME test_e2e_shm COMMAND test_e2e_shm)
  set_tests_properties(test_e2e_shm PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")

  # Whole puts and gets naming the client's own memory (3 ranks), its faults and its refusal.
  tshard_e2e_test(test_e2e_direct)
  add_test(NAME test_e2e_direct COMMAND test_e2e_direct)
  set_tests_properties(test_e2e_direct PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")

  # put_many, get_many (each data path, bad input, limits) and reshard_many's per-tensor results.
  tshard_e2e_test(test_e2e_batch_io)
  add_test(NAME test_e2e_batch_io COMMAND test_e2e_batch_io)
  set_tests_properties(test_e2e_batch_io PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")

  # A Unix connection belongs to the process that opened it: libtshard after fork(), a frame of
  # two writers, pid reuse, and the check of the process before every copy into a client.
  tshard_e2e_test(test_e2e_owner)
  target_link_libraries(test_e2e_owner PRIVATE tsproto tscomm)
  add_test(NAME test_e2e_owner COMMAND test_e2e_owner)
  set_tests_properties(test_e2e_owner PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")

  # The memory limit under puts in progress, creates and reshards, step by step and concurrently.
  tshard_e2e_test(test_e2e_memlimit)
  target_link_libraries(test_e2e_memlimit PRIVATE tsproto)
  add_test(NAME test_e2e_memlimit COMMAND test_e2e_memlimit)
  set_tests_properties(test_e2e_memlimit PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")

  # Collectives waiting for participants cannot fill the key table: the per-connection bound, the
  # timeout bound, and a flood from connections closed at once (--key-max 16).
  tshard_e2e_test(test_e2e_keyflood)
  target_link_libraries(test_e2e_keyflood PRIVATE tsproto)
  add_test(NAME test_e2e_keyflood COMMAND test_e2e_keyflood)
  set_tests_properties(test_e2e_keyflood PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")

  tshard_e2e_test(test_e2e_concurrency)
  add_test(NAME test_e2e_concurrency COMMAND test_e2e_concurrency)
  set_tests_properties(test_e2e_concurrency PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()

# The sequencer (order of collective operations, idempotency keys, REFUSE, shutdown) without MPI:
# simulated ranks in one process.
if(TARGET tsdwire)
  tshard_unit_test(test_sequencer ${CMAKE_CURRENT_LIST_DIR}/unit/test_sequencer.c
                   ${CMAKE_SOURCE_DIR}/daemon/engine/sequencer.c ${CMAKE_SOURCE_DIR}/daemon/engine/keys.c)
  target_include_directories(test_sequencer PRIVATE ${CMAKE_SOURCE_DIR}/daemon/engine)
  target_link_libraries(test_sequencer PRIVATE tsdwire tsdbase PkgConfig::XXHASH)
  # The table of operations (its wire, front and engine halves) against the protocol's own
  # descriptor of Request.
  tshard_unit_test(test_optable ${CMAKE_CURRENT_LIST_DIR}/unit/test_optable.c)
  target_link_libraries(test_optable PRIVATE tsdops tsdfront tsdengine tsdwire tsdbase)
endif()

# The daemon's log lines: client text quoted in them cannot end a line or forge another.
if(TARGET tsdwire)
  tshard_unit_test(test_log ${CMAKE_CURRENT_LIST_DIR}/unit/test_log.c)
  target_link_libraries(test_log PRIVATE tsdbase)
endif()

# What the protocol allows in strings (names, UTF-8, the walk of encoded strings, token files).
tshard_unit_test(test_rules ${CMAKE_CURRENT_LIST_DIR}/unit/test_rules.c)
target_link_libraries(test_rules PRIVATE tsproto)

# The libFuzzer target for frame decoding and request validation: built with clang by the test
# itself (from the sources it drives), run for 20 s on a copy of tests/fuzz/corpus.
find_program(TS_CLANG NAMES clang clang-18 clang-17 clang-16 clang-15 clang-14)
if(TS_CLANG AND TARGET tsproto)
  add_test(NAME test_fuzz_frame
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/fuzz/run_fuzz.sh ${TS_CLANG} ${CMAKE_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR}/proto/gen ${CMAKE_CURRENT_BINARY_DIR}/fuzz 20)
  set_tests_properties(test_fuzz_frame PROPERTIES TIMEOUT 300 ENVIRONMENT "${TS_TEST_ENV}")
else()
  message(STATUS "clang not found: the fuzz test of tshardd's frame decoding is not built")
endif()
