# Where the ranks run: host names and NUMA nodes (comm/place.c) without MPI against sysfs trees
# made by the test, the world's exchange under mpirun, and the job's layout end to end through
# tshard describe, tshard stats and the Python client on 3 daemons.
tshard_unit_test(test_place ${CMAKE_CURRENT_LIST_DIR}/unit/test_place.c)
target_link_libraries(test_place PRIVATE tscomm)

add_executable(test_place_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/test_place.c)
target_link_libraries(test_place_mpi PRIVATE tscomm)
tshard_mpi_test(test_place test_place_mpi 1 2 3)

if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  add_test(NAME test_job_layout
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_job_layout.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  set_tests_properties(test_job_layout PROPERTIES TIMEOUT 180 ENVIRONMENT
                       "${TS_MPI_TEST_ENV};PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
endif()
