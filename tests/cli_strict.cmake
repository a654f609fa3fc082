# A strict command line, checked puts, size-0 dims, errors that say how to
# fix them, progress and the daemon's operation log; the CLI and the Python client, without and
# with real daemons.
set(TS_BIN ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
add_test(NAME test_cli_strict
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_strict.py ${TS_BIN}
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(test_cli_strict PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT "${TS_TEST_ENV}")

# Against real daemons (2 and 3 ranks: the ragged loop's empty part, ping beyond the world).
if(TARGET tshardd AND TARGET tshard-python)
  foreach(np 2 3)
    add_test(NAME test_cli_trust_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_trust.py ${TS_BIN} ${np})
    set_tests_properties(test_cli_trust_np${np} PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                         ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python")
  endforeach()
endif()

# The CLI's dtypes and conversions against the Python package's (every source .npy dtype and
# tensor dtype, with and without --convert, --bf16-bits, the dtype spellings).
if(TARGET tshardd AND TARGET tshard-python)
  add_test(NAME test_cli_dtypes
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_dtypes.py ${TS_BIN})
  set_tests_properties(test_cli_dtypes PROPERTIES TIMEOUT 180
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python")
endif()

# The strict parser itself (edit distance against a naive reference, usage texts, misuse).
tshard_unit_test(test_cli_args ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_cli_args.c
                 ${CMAKE_SOURCE_DIR}/client/cli/usage_check.c ${CMAKE_SOURCE_DIR}/client/cli/args.c)
target_include_directories(test_cli_args PRIVATE ${CMAKE_SOURCE_DIR}/client/cli)
