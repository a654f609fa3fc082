# Whole state dicts: load's attribute rules (per name, globs, a default; onto another rank
# count), loads into existing tensors, and the Python state-dict calls, through real daemons.
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  tshard_python_test(test_python_load_rules test_load_rules.py)
  tshard_python_test(test_python_load_in_place test_load_in_place.py)
  tshard_python_test(test_python_state_dict test_state_dict.py)
endif()
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  tshard_python_test(test_python_readme_state_dict test_readme_state_dict.py
                     ${CMAKE_SOURCE_DIR}/docs/checkpoints.md)
endif()

# The benchmark of state dicts and checkpoints (a program, not a test): tests/bench/
# bench_statedict.py configured into the runtime output directory as tshard-bench-statedict (it
# starts tshardd from beside it, uses the Python package in ../python and the benchmark helpers
# of the source tree), the test that its --help runs and the one that runs it as the README does
# (every key printed, the ratios consistent with their figures).
if(TARGET tshardd AND TARGET tshard-python)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/bench/bench_statedict.py
                 ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/tshard-bench-statedict @ONLY)
  add_custom_target(tshard-bench-statedict ALL)
  add_dependencies(tshard-bench-statedict tshardd tshard-python)
  add_test(NAME tshard-bench-statedict_help
           COMMAND ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/tshard-bench-statedict --help)
  set_tests_properties(tshard-bench-statedict_help PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
                       "usage: .*--np NP.*--runs RUNS")
  add_test(NAME test_bench_statedict_keys
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/bench/test_bench_statedict_keys.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_bench_statedict_keys PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_MPI_TEST_ENV}")
endif()
