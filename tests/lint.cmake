# Lint: rules of the source tree that tests keep true.
# No function outside tests/ over 150 lines, as universal-ctags measures it (skipped where
# universal-ctags is not installed).
add_test(NAME test_function_length
         COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/lint/check_function_length.sh
                 ${CMAKE_SOURCE_DIR} 150)
set_tests_properties(test_function_length PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${TS_TEST_ENV}")
# Every non-static symbol of the libraries and programs (outside tests/) carries its library's
# prefix; the list of prefixes is in the script.
add_test(NAME test_symbol_prefixes
         COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/lint/check_symbol_prefixes.sh
                 ${CMAKE_BINARY_DIR})
set_tests_properties(test_symbol_prefixes PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${TS_TEST_ENV}")
# Every C source and header follows .clang-format (skipped without clang-format 14).
add_test(NAME test_format
         COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/lint/check_format.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(test_format PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${TS_TEST_ENV}")
