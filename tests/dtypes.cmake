# The dtypes beyond the first eight (bool, i16, u16, u32, u64, f8_e4m3, f8_e5m2) end to end, 4
# real daemons: a Hugging Face file of each written by the test's own struct + json writer,
# imported (a C64 entry beside them checked but not asked for), resharded and exported
# byte-exact; partial reductions of the integers and bool against numpy, partial f8 refused;
# checkpoints saved, loaded and read offline; a randomized differential test against numpy and
# the 8-bit floats' formats written out.
if(TARGET tshard-python AND TARGET tshardd)
  tshard_python_test(test_python_hf_dtypes test_hf_dtypes.py)
endif()

# The "Checked puts" example of docs/clients.md (u16 ids, bf16 bits, f8 codes) run as written, its output
# against numpy and the f8 format written out.
if(TARGET tshard-python AND TARGET tshardd)
  tshard_python_test(test_python_readme_dtypes test_readme_dtypes.py ${CMAKE_SOURCE_DIR}/docs/clients.md)
endif()

# The "Complex dtypes" example of docs/pytorch.md (a P(prod) of c64 factors, a cast to c128, a refused cast
# to f32) run as written, its output against numpy.
if(TARGET tshard-python AND TARGET tshardd)
  tshard_python_test(test_python_readme_complex test_readme_complex.py
                     ${CMAKE_SOURCE_DIR}/docs/pytorch.md)
endif()
