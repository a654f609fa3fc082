# The benchmark of tensor moves across simulated hosts (network namespaces joined by links shaped
# with tc) against the link's bound (a program, not a test): tests/bench/bench_hosts.py copied
# into the runtime output directory as tshard-bench-hosts (it finds tshardd beside it and the
# Python package in ../python), and the test that its --quick run prints every key with a sane
# value and leaves no namespace behind (root only; skipped with the reason elsewhere).
if(TARGET tshardd AND TARGET tshard-python)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/bench/bench_hosts.py
                 ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/tshard-bench-hosts COPYONLY)
  # `--target tshard-bench-hosts` builds what the program runs
  add_custom_target(tshard-bench-hosts ALL)
  add_dependencies(tshard-bench-hosts tshardd tshard-python)

  add_test(NAME tshard-bench-hosts_help COMMAND ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/tshard-bench-hosts --help)
  set_tests_properties(tshard-bench-hosts_help PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                       "usage: .*--hosts LIST.*--ranks-per-host P.*--rate RATE.*--quick")
  add_test(NAME test_bench_hosts_keys
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/bench/test_bench_hosts_keys.sh
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  # alone: it verifies the shaped links' rate, which another test's load would lower
  set_tests_properties(test_bench_hosts_keys PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                       RUN_SERIAL TRUE ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()
