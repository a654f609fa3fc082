# A tensor's store entry counted in the memory account: empty tensors raise memory in use and
# give it back when dropped; a small limit refuses more of them with LIMIT, through real daemons.
if(TARGET tshard-python AND TARGET tshardd)
  tshard_python_test(test_python_entry_memory test_entry_memory.py)
endif()
