# Interoperability with what ML engineers use, through real daemons (4 ranks) and the real
# clients: Hugging Face safetensors files written and read by the test's own struct + json
# reference, imported under row, column, replicated and ragged attributes (every dtype), an HF
# index of three shards, exports (one file, shards, metadata, modes, parts written through shared
# mappings or pwrite, an unwritable directory), each malformed file refused
# alike on every rank with nothing created, and the CLI's import-safetensors/export-safetensors.
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_safetensors
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_safetensors.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_safetensors PROPERTIES TIMEOUT 120 ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
  # the same with the imports' short reads by pread instead of io_uring, and the exports' writes
  # by pwrite instead of shared mappings (single copies off, as for ranks on several nodes)
  add_test(NAME test_python_safetensors_preadv
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_safetensors.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_safetensors_preadv PROPERTIES TIMEOUT 120 ENVIRONMENT
                       "${TS_MPI_TEST_ENV};TSHARD_IO_URING=0;TSHARD_CMA=0;PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()

# torch tensors and DLPack objects through the Python client (4 ranks): every dtype round trip
# (bf16 as torch.bfloat16) through put/get and put_slice/get_slice, zero copy checked by address,
# non-CPU tensors refused, and the package working with torch blocked from importing.
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_torch
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_torch.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_torch PROPERTIES TIMEOUT 120 ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()

# The "From PyTorch" section of docs/pytorch.md, run as written (its python and sh blocks in order, against
# 4 daemons of job "demo"), its results checked against independent readers.
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_readme_torch
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_readme_torch.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${CMAKE_SOURCE_DIR}/docs/pytorch.md)
  set_tests_properties(test_python_readme_torch PROPERTIES TIMEOUT 120 ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()

# The safetensors reader alone (no MPI): every dtype, an HF index, and each malformed file refused
# with a message naming the file and the tensor.
tshard_unit_test(test_safetensors_format ${CMAKE_CURRENT_LIST_DIR}/unit/test_safetensors_format.c)
target_link_libraries(test_safetensors_format PRIVATE tsckpt)
