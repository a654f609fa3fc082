# Deploy: the launcher with its fault handling, and the cluster smoke test and the lost-host
# resume test across network namespaces (root only; it says SKIPPED with the reason elsewhere).
if(TARGET tshardd AND TARGET tshard-cli AND TARGET tshard-python)
  set(TS_BIN ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  add_test(NAME test_launch COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_launch.sh ${TS_BIN})
  set_tests_properties(test_launch PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
  # a rank killed during reshards and saves: every client (C, CLI, Python) names it
  add_executable(rank_lost_client ${CMAKE_CURRENT_SOURCE_DIR}/deploy/rank_lost_client.c)
  target_link_libraries(rank_lost_client PRIVATE tshard)
  add_test(NAME test_rank_lost COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_rank_lost.sh ${TS_BIN})
  set_tests_properties(test_rank_lost PROPERTIES TIMEOUT 180 ENVIRONMENT "${TS_MPI_TEST_ENV}")
  add_test(NAME test_cluster COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_cluster.sh ${TS_BIN})
  # the simulated hosts (network namespaces): one such test at a time (RESOURCE_LOCK)
  set_tests_properties(test_cluster PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} SKIP_RETURN_CODE 77
                       RESOURCE_LOCK tshard_netns_hosts
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python")
  # a lost host, then back: snapshots, kill -9 of everything on one host (or of its daemons
  # only), resume on the others
  foreach(mode host daemons)
    set(name test_cluster_resume)
    if(mode STREQUAL daemons)
      set(name test_cluster_resume_daemons)
    endif()
    add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_cluster_resume.sh ${TS_BIN} ${mode})
    set_tests_properties(${name} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                         RESOURCE_LOCK tshard_netns_hosts
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python")
  endforeach()
endif()
