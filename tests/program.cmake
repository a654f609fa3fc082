# Compiled programs (program/): the compiler's unit tests against naive references, and the
# benchmark program.
set(TS_PROGRAM_TESTS ${CMAKE_CURRENT_LIST_DIR}/program)
tshard_unit_test(test_program ${TS_PROGRAM_TESTS}/test_program.c ${TS_PROGRAM_TESTS}/ref.c)
target_link_libraries(test_program PRIVATE tsprogram m)
target_include_directories(test_program PRIVATE ${CMAKE_CURRENT_LIST_DIR}/unit)
target_compile_definitions(test_program PRIVATE TSP_GOLDEN="${TS_PROGRAM_TESTS}/golden_small.c")
set_tests_properties(test_program PROPERTIES TIMEOUT 300)
