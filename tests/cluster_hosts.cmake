# The host-aware plans end to end on simulated hosts of two ranks each (network namespaces with
# a UTS namespace each, Open MPI's shared memory inside a host and TCP between), driven by the
# Python package: every move of tests/deploy/test_cluster_hosts.py auto and forced by each
# applicable strategy, bit-exact against numpy on every rank, the strategy checked against
# `tshard plan --topology hosts=Hx2`, forced hierarchical refused where it cannot apply. 2 x 2
# ranks, 3 x 2 ranks, 2 x 2 with a 64 KiB staging chunk (every move in many rounds), and a run
# sent SIGTERM in the middle that must leave nothing behind. Root only (SKIPPED with the reason
# elsewhere); one at a time (they share the machine's cores), each tearing down before its
# --timeout, below CTest's.
if(TARGET tshardd AND TARGET tshard-cli AND TARGET tshard-python)
  set(TS_CH_SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_cluster_hosts.py)
  set(TS_CH_BIN ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  add_test(NAME test_cluster_hosts_2x2
           COMMAND /usr/bin/python3 ${TS_CH_SCRIPT} ${TS_CH_BIN} --hosts 2 --seed 1 --timeout 150)
  add_test(NAME test_cluster_hosts_3x2
           COMMAND /usr/bin/python3 ${TS_CH_SCRIPT} ${TS_CH_BIN} --hosts 3 --seed 2 --timeout 150)
  add_test(NAME test_cluster_hosts_2x2_rounds
           COMMAND /usr/bin/python3 ${TS_CH_SCRIPT} ${TS_CH_BIN} --hosts 2 --seed 3
                   --staging 65536 --timeout 150)
  add_test(NAME test_cluster_hosts_signal
           COMMAND /usr/bin/python3 ${TS_CH_SCRIPT} ${TS_CH_BIN} --hosts 2 --seed 4 --signal-test
                   --timeout 150)
  set_tests_properties(test_cluster_hosts_2x2 test_cluster_hosts_3x2 test_cluster_hosts_2x2_rounds
                       test_cluster_hosts_signal
                       PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 RESOURCE_LOCK tshard_netns_hosts
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()
