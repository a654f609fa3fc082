# Whole state dicts: load's attribute rules (per name, globs, a default; onto another rank
# count), loads into existing tensors, and the Python state-dict calls, through real daemons.
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  tshard_python_test(test_python_load_rules test_load_rules.py)
  tshard_python_test(test_python_load_in_place test_load_in_place.py)
  tshard_python_test(test_python_state_dict test_state_dict.py)
endif()
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  tshard_python_test(test_python_readme_state_dict test_readme_state_dict.py
                     ${CMAKE_SOURCE_DIR}/README.md)
endif()
