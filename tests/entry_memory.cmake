# A tensor's store entry counted in the memory account: empty tensors raise memory in use and
# give it back when dropped; a small limit refuses more of them with LIMIT, through real daemons.
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_entry_memory
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_entry_memory.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_entry_memory PROPERTIES TIMEOUT 300
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
