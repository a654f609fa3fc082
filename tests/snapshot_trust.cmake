# Snapshot and resume directories trusted only when they are the daemons' own, one order (the
# sequence each snapshot records) for pruning and resume, and background saves that survive
# SIGTERM (named to sort after daemon.cmake and ckpt.cmake).
# The sequence in the index alone (no MPI).
tshard_unit_test(test_ckpt_sequence ${CMAKE_CURRENT_LIST_DIR}/unit/test_ckpt_sequence.c)
target_link_libraries(test_ckpt_sequence PRIVATE tsckptidx)

if(TARGET tshard-python AND TARGET tshardd)
  # Real daemons (2 ranks): foreign, group- or other-writable and symlinked directories refused
  # at start; a planted snapshot and a symlink neither restored nor pruned; a snapshot named in
  # the future pruned first, the resume taking the highest sequence; --snapshot-keep a count.
  add_test(NAME test_python_snapshot_trust
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_snapshot_trust.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_snapshot_trust PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
  # Real daemons (3 ranks) signalled while a background save writes, held by the fault registry:
  # completed within --shutdown-save-wait, or abandoned on every rank with nothing left, and
  # the log says which.
  add_test(NAME test_python_snapshot_sigterm
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_snapshot_sigterm.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_snapshot_sigterm PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
