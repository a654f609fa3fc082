# Hugging Face safetensors files as untrusted input, through real daemons (2 ranks) and the
# Python client: an 8 MiB __metadata__ kept by 100 tensors held once and counted in the memory
# account (the daemons' RSS and stats), a metadata over --memory-limit refused with LIMIT, 10k to
# 40k entries (renamed, named, over an index) imported in seconds, an export request of 160,000
# metadata keys answered while pings are, a tensor named __metadata__ refused by an export and a
# __metadata__ that is not text to text refused by an import, the kept metadata gone with the
# tensor (program outputs with overwrite, drops, copies), and shapes no tensor may have refused
# up front naming the tensor. The format's checks alone: test_safetensors_format (interop.cmake).
# A sanitizer build gets budgets ten times larger and no check of the memory given back when idle
# (its allocator keeps freed memory).
if(TARGET tshard-python AND TARGET tshardd)
  if(TSHARD_SANITIZE)
    set(TS_ST_SANITIZED 1)
  else()
    set(TS_ST_SANITIZED 0)
  endif()
  add_test(NAME test_python_safetensors_untrusted
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_safetensors_untrusted.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_safetensors_untrusted PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT
                       "${TS_MPI_TEST_ENV};TSHARD_TEST_SANITIZED=${TS_ST_SANITIZED};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
