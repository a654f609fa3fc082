"""Offline planning and drawing: ``tshard.plan`` (the planner's EXPLAIN of a reshard
for a shape and two attributes, simulating any number of ranks) and ``tshard.show`` (where the
slices of a tensor live, like jax.debug.visualize_array_sharding), without daemons.

Both run the ``tshard`` command-line tool (``tshard plan --json``, ``tshard show``) rather than
a second planner and drawer in Python: the C planner is the one the daemons run, so the answer
is the daemons' own, and the drawing is the CLI's byte for byte. The tool is found as
$TSHARD_CLI, else next to this package in a build tree (build/python/tshard -> build/bin/tshard),
else on $PATH, else in this Python's prefix (a venv's bin/); otherwise the error says how to
install it. ``Client.show(name)`` draws a tensor of the daemons the same way."""
import json
import os
import re
from typing import Any, Dict, Optional, Sequence
import shutil
import subprocess
import sys

from ._status import STATUS, UNSUPPORTED
from .attr import Attr
from .errors import error_for

_NAMES = {name: code for code, (name, _) in STATUS.items()}


def find_tool(name, env_var, in_prefix=False):
    """(path, None) of one of tshard's programs: $env_var, the build tree's bin/ next to this
    package, $PATH, and with in_prefix the Python's prefix (a venv's bin/); else (None, the build
    tree's path and the prefix's, for the caller's message)."""
    env = os.environ.get(env_var)
    if env:
        return env, None
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.normpath(os.path.join(here, "..", "..", "bin", name))
    if os.access(built, os.X_OK):
        return built, None
    found = shutil.which(name)
    if found:
        return found, None
    venv = os.path.join(sys.prefix, "bin", name)  # installed into this environment's prefix
    if in_prefix and os.access(venv, os.X_OK):
        return venv, None
    return None, (built, venv)


def cli_path():
    """The tshard command-line tool this package uses for plan and show."""
    path, looked = find_tool("tshard", "TSHARD_CLI", in_prefix=True)
    if path:
        return path
    built, venv = looked
    raise error_for(UNSUPPORTED, "the tshard command-line tool was not found (tshard.plan, "
                                 "tshard.show and Client.show run it: the planner and drawer the "
                                 f"daemons use); looked at $TSHARD_CLI (not set), {built}, $PATH "
                                 f"and {venv}. Install it from a tshard build with `cmake "
                                 "--install build --prefix PREFIX` and set "
                                 "TSHARD_CLI=PREFIX/bin/tshard (or put PREFIX/bin on PATH)")


def _text(attr):
    return str(attr) if isinstance(attr, Attr) else attr


def _shape(shape):
    return ",".join(str(int(s)) for s in shape) if len(shape) else "[]"


def _run(args):
    r = subprocess.run([cli_path(), *args], capture_output=True, text=True, timeout=300)
    if r.returncode == 0:
        return r.stdout
    msg = r.stderr.strip().removeprefix("tshard: ")
    m = re.search(r"\(([A-Z_]+)\)$", msg)
    status = _NAMES.get(m.group(1)) if m else None
    if status is None:
        status = 1 if r.returncode == 2 else 10 if "attribute" in msg or "column" in msg else 1
    raise error_for(status, msg)


def plan(shape: Sequence[int], src: Any, dst: Any, dtype: str = "f32",
         strategy: Optional[str] = None, ranks: Optional[int] = None,
         staging: Optional[int] = None) -> Dict[str, Any]:
    """The planner's choice for resharding a tensor of ``shape`` from attribute ``src`` to
    ``dst``, computed locally: a dict as ``tshard plan --json`` prints it ('strategy', 'costs',
    'strategies' with each strategy's costs, 'min_wire_bytes', 'plan_ms', ...). ``ranks``
    simulates a world of that many ranks; ``strategy`` forces one (an error when it does not
    apply); ``staging`` bounds the staging bytes per rank."""
    args = ["plan", "--shape", _shape(shape), "--from", _text(src), "--to", _text(dst),
            "--dtype", dtype, "--json"]
    if strategy:
        args += ["--strategy", strategy]
    if ranks is not None:
        args += ["--ranks", str(int(ranks))]
    if staging is not None:
        args += ["--staging", str(int(staging))]
    return json.loads(_run(args))


def show(shape: Sequence[int], attr: Any, width: Optional[int] = None,
         dims: Optional[Sequence[int]] = None, ascii: Optional[bool] = None) -> str:
    """The drawing of where the slices of a tensor of ``shape`` under ``attr`` live, as text
    (print it). ``width``: columns (blocks that do not fit are summarized); ``dims``: the two
    tensor dims drawn as rows and columns (default 0, 1); ``ascii``: ASCII lines (default:
    Unicode)."""
    args = ["show", "--shape", _shape(shape), "--attr", _text(attr)]
    if width is not None:
        args += ["--width", str(int(width))]
    if dims is not None:
        args += ["--dims", ",".join(str(int(d)) for d in dims)]
    args += ["--ascii"] if ascii else ["--unicode"]
    return _run(args)
