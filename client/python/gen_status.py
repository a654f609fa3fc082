#!/usr/bin/python3
"""Generates tshard/_status.py from include/tshard_errors.h, the one list of status codes, so the
Python client's exceptions carry the same codes, names and messages as the daemon: STATUS
{code: (name, message)} and one constant per status, named as in C without the TS_ prefix
(NOT_FOUND = 14), which the package compares and raises instead of bare numbers.

usage: gen_status.py tshard_errors.h OUT.py"""
import re
import sys

text = open(sys.argv[1]).read()
entries = re.findall(r'X\((\w+),\s*(\d+),\s*"([^"]*)"\)', text)
if not entries:
    sys.exit("gen_status.py: no X(name, value, message) entries found in " + sys.argv[1])
with open(sys.argv[2], "w") as f:
    f.write('"""Status codes of tshard, generated from include/tshard_errors.h: do not edit."""\n')
    f.write("STATUS = {\n")
    for name, value, msg in entries:
        f.write(f"    {int(value)}: ({name!r}, {msg!r}),\n")
    f.write("}\n\n")
    for name, value, _ in entries:
        f.write(f"{name} = {int(value)}\n")
