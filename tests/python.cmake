# Tests of the Python package against the C formatter and against real daemons (single-driver
# and SPMD styles, the example script), with the package assembled in build/python.
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  set(TS_PY_ENV ${TS_MPI_TEST_ENV}
      "PYTHONPATH=${CMAKE_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python")
  set(TS_BIN ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
  add_test(NAME test_python_attr
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_attr.py ${TS_BIN})
  set_tests_properties(test_python_attr PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT "${TS_PY_ENV}")
  # Ranks never disagree (regressions of each item), and the randomized differential
  # reshard test (fixed seeds; about 10 s on a quiet box, bounded by its own budget of 150 s).
  add_test(NAME test_python_agreement
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_agreement.py ${TS_BIN})
  set_tests_properties(test_python_agreement PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_PY_ENV}")
  foreach(np 4 6)
    add_test(NAME test_python_reshard_random_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_reshard_random.py
                     ${TS_BIN} ${np} 11 12 13)
    set_tests_properties(test_python_reshard_random_np${np} PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                         ENVIRONMENT "${TS_PY_ENV}")
  endforeach()
  # Casts in transit: randomized reshards (and reshard_many items) that change the dtype, bit for
  # bit against numpy's conversion of the whole tensor; partial sources; refusals change nothing.
  foreach(np 2 4)
    add_test(NAME test_python_reshard_cast_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_reshard_cast.py
                     ${TS_BIN} ${np} 5 6)
    set_tests_properties(test_python_reshard_cast_np${np} PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                         ENVIRONMENT "${TS_PY_ENV}")
  endforeach()
  # Rank relabeling: random reshards with relabel=True against numpy and a brute force over every
  # permutation of the target's ranks; permuted layouts move nothing; the CLI's --relabel.
  foreach(np 2 4 6)
    add_test(NAME test_python_relabel_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_relabel.py
                     ${TS_BIN} ${np} 1 2)
    set_tests_properties(test_python_relabel_np${np} PROPERTIES TIMEOUT 300
                         ENVIRONMENT "${TS_PY_ENV}")
  endforeach()
  # Block-cyclic placements: NUMROC, ScaLAPACK descriptors and local arrays against numpy models,
  # offline plans against per-element counts, and the daemons refusing block-cyclic storage.
  foreach(np 2 4)
    add_test(NAME test_python_cyclic_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_cyclic.py
                     ${TS_BIN} ${np} ${CMAKE_SOURCE_DIR}/docs/layouts.md)
    set_tests_properties(test_python_cyclic_np${np} PROPERTIES TIMEOUT 300
                         ENVIRONMENT "${TS_PY_ENV}")
  endforeach()
  # Traces: `tshard trace` gathers every rank's ring after a script's operations; the Chrome
  # trace file read back against what ran (spans in order, one seq per operation on every rank,
  # the ranks' clocks aligned), --last, --since, small and disabled rings, the summary, misuse.
  foreach(np 2 4)
    add_test(NAME test_python_trace_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_trace.py
                     ${TS_BIN} ${np})
    set_tests_properties(test_python_trace_np${np} PROPERTIES TIMEOUT 300
                         ENVIRONMENT "${TS_PY_ENV}")
  endforeach()
  # The partial ops avg and prod (and sum, max) through every strategy that applies, against
  # numpy, at 2, 3, 4 and 6 ranks (a few seconds each); avg of integers refused.
  foreach(np 2 3 4 6)
    add_test(NAME test_python_partial_ops_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_partial_ops.py
                     ${TS_BIN} ${np} 1 2 3)
    set_tests_properties(test_python_partial_ops_np${np} PROPERTIES TIMEOUT 300
                         ENVIRONMENT "${TS_PY_ENV}")
  endforeach()
  # Split rules (balanced, chunk as torch.chunk) and negative dims: random layouts, reshards,
  # checkpoints and safetensors between the rules against a model of every slice, at 2, 3 and 4
  # ranks (about 15 s each); misuse refused.
  foreach(np 2 3 4)
    add_test(NAME test_python_split_rules_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_split_rules.py
                     ${TS_BIN} ${np} 1 2)
    set_tests_properties(test_python_split_rules_np${np} PROPERTIES TIMEOUT 300
                         ENVIRONMENT "${TS_PY_ENV}")
  endforeach()
  # The complex dtypes c64 and c128 end to end against numpy at 2 and 4 ranks: put/get, partial
  # sum, avg and prod through every strategy that applies, casts, refusals (max and min, casts to
  # a real dtype, safetensors export, einsum), checkpoints, tshard show, torch (a few seconds).
  foreach(np 2 4)
    add_test(NAME test_python_complex_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_complex.py
                     ${TS_BIN} ${np} 1 2)
    set_tests_properties(test_python_complex_np${np} PROPERTIES TIMEOUT 300
                         ENVIRONMENT "${TS_PY_ENV}")
  endforeach()
  # Batched operations: a randomized differential test of reshard_many against numpy, bad input,
  # a keyed SPMD batch, a fault on one rank mid-batch.
  add_test(NAME test_python_batch
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_batch.py ${TS_BIN} 4)
  set_tests_properties(test_python_batch PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_PY_ENV}")
  # Shared buffers between the daemons of one node (forced on): model-like tensors and random
  # targets moved batched and singly against numpy, the log line, a fault on one rank mid-batch.
  add_test(NAME test_python_shared_buffers
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_shared_buffers.py
                   ${TS_BIN} 4)
  set_tests_properties(test_python_shared_buffers PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_PY_ENV}")
  # put_many and get_many: a randomized differential test against numpy through each data path,
  # bad input through every rank (nothing changed), keyed SPMD use, futures.
  add_test(NAME test_python_batch_io
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_batch_io.py ${TS_BIN} 4)
  set_tests_properties(test_python_batch_io PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_PY_ENV}")
  # The default memory limit (auto) against an einsum outer product, a huge create and a program's
  # output; --memory-limit 0 means none.
  add_test(NAME test_python_memory_default
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_memory_default.py
                   ${TS_BIN})
  set_tests_properties(test_python_memory_default PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_PY_ENV}")
  # Puts never reinterpret data: every source numpy dtype against every tensor dtype, with and
  # without convert, against numpy's astype; the package's public surface (hints, docstrings,
  # exception classes) and its pythonic behaviours against real daemons.
  add_test(NAME test_python_dtypes
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_dtypes.py ${TS_BIN})
  add_test(NAME test_python_api_surface
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_api_surface.py)
  add_test(NAME test_python_pythonic
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_pythonic.py ${TS_BIN})
  # the package's modules import one another without a cycle and without torch, name statuses
  add_test(NAME test_python_package_imports
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_package_imports.py)
  set_tests_properties(test_python_dtypes test_python_api_surface test_python_pythonic
                       test_python_package_imports
                       PROPERTIES TIMEOUT 120 ENVIRONMENT "${TS_PY_ENV}")
  # tshard.launch through the launcher: serves, lists, stops on exit (also after a raise), names
  # a lost rank
  add_test(NAME test_python_launch
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_launch.py ${TS_BIN})
  set_tests_properties(test_python_launch PROPERTIES TIMEOUT 180 ENVIRONMENT "${TS_PY_ENV}")
  add_test(NAME test_python_direct
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_direct.py ${TS_BIN})
  set_tests_properties(test_python_direct PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT}
                       ENVIRONMENT "${TS_PY_ENV}")
  add_test(NAME test_python_shm
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_shm.py ${TS_BIN})
  set_tests_properties(test_python_shm PROPERTIES TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT "${TS_PY_ENV}")
  foreach(np 2 4)
    add_test(NAME test_python_client_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_client.py ${TS_BIN} ${np})
    add_test(NAME test_python_spmd_example_np${np}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_spmd_example.py ${TS_BIN}
                     ${np} ${CMAKE_SOURCE_DIR}/deploy/examples/spmd_reshard.py)
    set_tests_properties(test_python_client_np${np} test_python_spmd_example_np${np} PROPERTIES
                         TIMEOUT ${TS_TEST_TIMEOUT} ENVIRONMENT "${TS_PY_ENV}")
  endforeach()
endif()

# docs/reference/ (flags, status codes, the CLI's --help, the Python package's docstrings) is
# generated from its sources: stale when they changed without it (regenerate with
# `PYTHONPATH=build/python /usr/bin/python3 docs/reference/generate.py build/bin`).
if(TARGET tshard-python AND TARGET tshardd AND TARGET tshard-cli)
  add_test(NAME test_docs_reference
           COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/docs/reference/generate.py
                   ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} --check)
  set_tests_properties(test_docs_reference PROPERTIES TIMEOUT 120 ENVIRONMENT
                       "PYTHONPATH=${CMAKE_BINARY_DIR}/python")
endif()
