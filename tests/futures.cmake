# Futures keep the fast data paths: futures mixed with synchronous puts and gets on one
# connection through the direct path and the shared segment, against numpy and the connection's
# bytes by path; misuse (a future never awaited, a refusal among many). 2 real daemons.
if(TARGET tshard-python AND TARGET tshardd)
  tshard_python_test(test_python_futures test_futures.py)
endif()
