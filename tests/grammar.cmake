# One attribute grammar in C and Python. The shared corpus
# (tests/grammar/attr_corpus.jsonl) is checked against shard/plan/attr_text.c by a Check test and
# against client/python/tshard/attr.py by a Python test that also compares the two parsers on
# random texts (through attr_echo, the C parser as a filter), and a libFuzzer run of the C parser.
set(TS_ATTR_CORPUS ${CMAKE_CURRENT_LIST_DIR}/grammar/attr_corpus.jsonl)
tshard_unit_test(test_attr_corpus ${CMAKE_CURRENT_LIST_DIR}/unit/test_attr_corpus.c)
target_link_libraries(test_attr_corpus PRIVATE tsplan PkgConfig::JANSSON)
target_compile_definitions(test_attr_corpus PRIVATE TS_ATTR_CORPUS="${TS_ATTR_CORPUS}")

add_executable(tshard-attr-echo ${CMAKE_CURRENT_LIST_DIR}/grammar/attr_echo.c)
target_link_libraries(tshard-attr-echo PRIVATE tsplan PkgConfig::JANSSON)

if(TARGET tshard-python)
  add_test(NAME test_python_attr_corpus
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_attr_corpus.py
                   ${TS_ATTR_CORPUS} $<TARGET_FILE:tshard-attr-echo>)
  set_tests_properties(test_python_attr_corpus PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
endif()

# The attribute parser under libFuzzer (clang, ASan/UBSan, leaks), seeded with the corpus: 8 s.
find_program(TS_CLANG_ATTR NAMES clang clang-18 clang-17 clang-16 clang-15 clang-14)
if(TS_CLANG_ATTR)
  add_test(NAME test_fuzz_attr
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/grammar/run_fuzz_attr.sh ${TS_CLANG_ATTR}
                   ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/fuzz_attr 8)
  set_tests_properties(test_fuzz_attr PROPERTIES TIMEOUT 300 ENVIRONMENT "${TS_TEST_ENV}")
endif()

# One grammar of attribute rules (load, load_safetensors, --resume-attr, state dicts) in C and
# Python: proto/rules.c through tshard-rule-echo against client/python/tshard/attr_rules.py.
add_executable(tshard-rule-echo ${CMAKE_CURRENT_LIST_DIR}/grammar/rule_echo.c)
target_link_libraries(tshard-rule-echo PRIVATE tsproto PkgConfig::JANSSON)
if(TARGET tshard-python)
  add_test(NAME test_python_attr_rules
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/python/test_attr_rules.py
                   $<TARGET_FILE:tshard-rule-echo>)
  set_tests_properties(test_python_attr_rules PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_LIST_DIR}/python")
endif()
