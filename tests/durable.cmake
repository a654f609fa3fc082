# (Named to sort after daemon.cmake, which defines tshard_e2e_test.)
# Background saves through the C library on 3 real daemons (about 5 s); the Python end-to-end
# test of background saves, snapshots and resume is in ckpt.cmake.
if(COMMAND tshard_e2e_test AND TARGET tshardd)
  tshard_e2e_test(test_e2e_bgsave)
  add_test(NAME test_e2e_bgsave COMMAND test_e2e_bgsave)
  set_tests_properties(test_e2e_bgsave PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()
