# Deploy: the launcher with its fault handling, and the cluster smoke test across network
# namespaces (root only; it says SKIPPED with the reason elsewhere).
if(TARGET tshardd AND TARGET tshard-cli AND TARGET tshard-python)
  set(TS_BIN ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  add_test(NAME test_launch COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_launch.sh ${TS_BIN})
  set_tests_properties(test_launch PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()
