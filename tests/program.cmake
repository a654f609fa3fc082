# Compiled programs (program/): the compiler's unit tests against naive references, and the
# benchmark program.
set(TS_PROGRAM_TESTS ${CMAKE_CURRENT_LIST_DIR}/program)
tshard_unit_test(test_program ${TS_PROGRAM_TESTS}/test_program.c ${TS_PROGRAM_TESTS}/ref.c
                 ${TS_PROGRAM_TESTS}/program_fixture.c)
target_link_libraries(test_program PRIVATE tsprogram m)
target_include_directories(test_program PRIVATE ${CMAKE_CURRENT_LIST_DIR}/unit)
target_compile_definitions(test_program PRIVATE TSP_GOLDEN="${TS_PROGRAM_TESTS}/golden_small.c")
set_tests_properties(test_program PROPERTIES TIMEOUT 300)
tshard_unit_test(test_program_slice ${TS_PROGRAM_TESTS}/test_program_slice.c
                 ${TS_PROGRAM_TESTS}/program_fixture.c)
target_link_libraries(test_program_slice PRIVATE tsprogram m)
target_include_directories(test_program_slice PRIVATE ${CMAKE_CURRENT_LIST_DIR}/unit)
set_tests_properties(test_program_slice PROPERTIES TIMEOUT 300)

# f16 and bf16 against the kernels' conversions bit for bit, and the AdamW bf16 example.
tshard_unit_test(test_program_half ${TS_PROGRAM_TESTS}/test_program_half.c
                 ${TS_PROGRAM_TESTS}/program_fixture.c)
target_link_libraries(test_program_half PRIVATE tsprogram m)
target_include_directories(test_program_half PRIVATE ${CMAKE_CURRENT_LIST_DIR}/unit)
target_compile_definitions(test_program_half PRIVATE
                           TSP_EXAMPLES="${CMAKE_SOURCE_DIR}/deploy/examples/programs")
set_tests_properties(test_program_half PROPERTIES TIMEOUT 120)

tshard_unit_test(test_program_cache ${TS_PROGRAM_TESTS}/test_program_cache.c
                 ${TS_PROGRAM_TESTS}/program_fixture.c)
target_link_libraries(test_program_cache PRIVATE tsprogram m)
target_include_directories(test_program_cache PRIVATE ${CMAKE_CURRENT_LIST_DIR}/unit)
set_tests_properties(test_program_cache PROPERTIES TIMEOUT 300)
tshard_unit_test(test_program_names ${TS_PROGRAM_TESTS}/test_program_names.c
                 ${TS_PROGRAM_TESTS}/program_fixture.c)
target_link_libraries(test_program_names PRIVATE tsprogram m)
target_include_directories(test_program_names PRIVATE ${CMAKE_CURRENT_LIST_DIR}/unit)
set_tests_properties(test_program_names PROPERTIES TIMEOUT 300)

add_executable(tshard-bench-program ${TS_PROGRAM_TESTS}/bench/bench_program.c)
target_link_libraries(tshard-bench-program PRIVATE tsprogram)
target_compile_definitions(tshard-bench-program PRIVATE
                           TSP_NUMPY_SCRIPT="${TS_PROGRAM_TESTS}/bench/bench_adam_numpy.py"
                           TSP_EXAMPLES="${CMAKE_SOURCE_DIR}/deploy/examples/programs")

# Through real daemons and the Python client (a private program cache per run).
if(TARGET tshard-python AND TARGET tshardd)
  foreach(np 2 3)
    add_test(NAME test_python_program_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_program.py
                     ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${np})
    set_tests_properties(test_python_program_np${np} PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                         ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
  endforeach()
endif()

# Slices against numpy, and the message form of programs (ProgramGraph), through real daemons,
# the Python client and the CLI.
if(TARGET tshard-python AND TARGET tshardd)
  add_test(NAME test_python_program_slice_np2
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_program_slice.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} 2)
  set_tests_properties(test_python_program_slice_np2 PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
  add_test(NAME test_python_program_graph_np2
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_program_graph.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} 2)
  set_tests_properties(test_python_program_graph_np2 PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
endif()

# The shipped example programs, run as docs/programs.md and deploy/examples/programs/README.md show
# them (CLI and Python), against numpy on tensors sharded over 4 ranks.
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard)
  add_test(NAME test_python_program_examples_np4
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_program_examples.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_python_program_examples_np4 PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
endif()

# Mixed precision (randomized, against numpy's rounding bit for bit) and the run errors by their
# messages, through real daemons, the Python client and the CLI.
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard)
  add_test(NAME test_python_program_mixed_np3
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_program_mixed.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_python_program_mixed_np3 PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
endif()

# The program name rule and the private program cache, through real daemons, the Python client
# and the CLI (injection attempts in every string field; planted, foreign and group-writable
# cache entries; unsafe cache directories; the default directory without HOME).
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard)
  foreach(t names cache)
    add_test(NAME test_python_program_${t}_np2
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_program_${t}.py
                     ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} 2)
    set_tests_properties(test_python_program_${t}_np2 PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                         ENVIRONMENT "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
  endforeach()
endif()

# The C library's program calls (text, packed message, rule overrides) through real daemons.
if(TARGET tshardd AND TARGET tshard)
  tshard_e2e_test(test_e2e_program)
  target_link_libraries(test_e2e_program PRIVATE tsproto)
  add_test(NAME test_e2e_program COMMAND test_e2e_program)
  set_tests_properties(test_e2e_program PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()
