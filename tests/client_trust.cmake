# The clients trust only their own daemon: a socket directory another user made (the default
# /tmp/tshard-<uid> taken first, one given explicitly), one with group or other bits, a link, a
# daemon of another uid (SO_PEERCRED), and status files that are FIFOs or another user's, against
# the C library (through the CLI), the Python package, its launch helpers and the launcher; the
# CLI's rates file beside real daemons. As root (other users are made); skipped (77) otherwise.
if(TARGET tshard-python AND TARGET tshard-cli AND TARGET tshardd)
  add_test(NAME test_socket_trust
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_socket_trust.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${CMAKE_SOURCE_DIR}/deploy/tshard-launch)
  set_tests_properties(test_socket_trust PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python")
endif()

# The Python client's puts and gets take only arrays that match exactly: out= of the tensor's
# or slice's own shape, a 0-d array never taken for a (1,) tensor, non-native byte order refused
# or (convert=True) swapped; through each data path, against real daemons.
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_client_input
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_client_input.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set(TS_INPUT_ENV ${TS_MPI_TEST_ENV}
      "PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
  set_tests_properties(test_python_client_input PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_INPUT_ENV}")
endif()
