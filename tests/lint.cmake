# Lint: rules of the source tree that a test keeps true. No function outside tests/ over 150
# lines (as universal-ctags measures it); skipped where universal-ctags is not installed.
add_test(NAME test_function_length
         COMMAND /bin/sh ${CMAKE_CURRENT_SOURCE_DIR}/lint/check_function_length.sh
                 ${CMAKE_SOURCE_DIR} 150)
set_tests_properties(test_function_length PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${TS_TEST_ENV}")
