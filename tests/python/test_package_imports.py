"""The Python package's structure, read from its sources with ast (no daemons):

- no import cycle among the modules of client/python/tshard, counting the imports inside
  functions as well as those at module level (a cycle is named module by module, with the line
  of each import);
- the package imports without torch (``import tshard`` in a subprocess where torch is hidden);
- statuses by name: no numeric literal as error_for's first argument, nor compared with an
  attribute named ``status`` (``e.status == 14``, ``resp.status in (17, 18)``): the names of
  _status (generated from include/tshard_errors.h) say which status is meant;
- tshard/_limits.py, kept for copies of client/python without the C headers, is what
  gen_limits.py makes of those headers now.
"""
import ast
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PKG = os.path.join(ROOT, "client", "python", "tshard")
GENERATED = {"tshard_pb2", "_status", "_version"}  # made at build time, importing nothing of ours
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def modules():
    """{module name: parsed tree} of every module of the package's sources."""
    out = {}
    for f in sorted(os.listdir(PKG)):
        if f.endswith(".py"):
            with open(os.path.join(PKG, f)) as fh:
                out[f[:-3]] = ast.parse(fh.read(), filename=f)
    return out


def imported(node, names):
    """The package's modules an Import or ImportFrom node imports: `from . import x` imports
    module x (or the package, __init__, for a name that is not a module), `from .x import y`
    module x, `import tshard.x` and `from tshard.x import y` likewise."""
    if isinstance(node, ast.Import):
        return [a.name.split(".")[1] if "." in a.name else "__init__" for a in node.names
                if a.name.split(".")[0] == "tshard"]
    mod = node.module or ""
    if node.level == 0:
        if mod.split(".")[0] != "tshard":
            return []
        mod, inside = mod[len("tshard."):] if "." in mod else "", True
    else:
        inside = node.level == 1
    if not inside:
        return []
    if mod:
        return [mod.split(".")[0]]
    return [a.name if a.name in names or a.name in GENERATED else "__init__" for a in node.names]


def import_graph(trees):
    """{module: {module it imports: line of the first such import}}, at any depth."""
    graph = {}
    for name, tree in trees.items():
        edges = graph.setdefault(name, {})
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported(node, trees):
                    if target != name and target in trees:
                        edges.setdefault(target, node.lineno)
    return graph


def find_cycle(graph):
    """A cycle of the graph as a list of modules (the first again at its end), or None."""
    state = {}  # 1: on the path being walked, 2: done
    path = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for t in sorted(graph.get(m, {})):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def no_cycles(trees):
    graph = import_graph(trees)
    check(sum(len(e) for e in graph.values()) > 20, f"the import graph has too few edges "
                                                    f"to be the package's: {graph}")
    cycle = find_cycle(graph)
    if cycle:
        steps = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:]))
        check(False, f"import cycle: {steps} -> {cycle[-1]}")
    # the checker itself: a cycle through an import inside a function is found
    check(find_cycle({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}}) == ["a", "b", "c", "a"],
          "find_cycle misses a cycle of three")
    lazy = ast.parse("def f():\n    from .client import connect\n")
    check(import_graph({"client": ast.parse("from .launch import x"), "launch": lazy})
          == {"client": {"launch": 1}, "launch": {"client": 2}}, "a function's import is missed")


def is_number(node):
    return (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool))


def numbers_in(node):
    """The numeric literals an expression may evaluate to, or hold: itself, the items of a
    tuple, list or set, the two values of a conditional (not its test), the operands of and/or."""
    if is_number(node):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for e in node.elts for v in numbers_in(e)]
    if isinstance(node, ast.IfExp):
        return numbers_in(node.body) + numbers_in(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [v for e in node.values for v in numbers_in(e)]
    return []


def is_status(node):
    return isinstance(node, ast.Attribute) and node.attr == "status"


def bare_statuses(name, tree):
    """(line, what) of every status given as a number."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if fname == "error_for" and numbers_in(node.args[0]):
                found.append((node.lineno, f"error_for({ast.unparse(node.args[0])}, ...)"))
        if isinstance(node, ast.Compare):
            sides = [node.left] + node.comparators
            if any(is_status(s) for s in sides) and any(
                    numbers_in(s) for s in sides if not is_status(s)):
                found.append((node.lineno, ast.unparse(node)))
    return [f"{name}.py:{line}: {what}: name the status (from ._status import ...)"
            for line, what in found]


def statuses_by_name(trees):
    for name, tree in trees.items():
        for msg in bare_statuses(name, tree):
            check(False, msg)
    # the checker itself
    bad = ast.parse("raise error_for(4, 'x')\nif e.status in (17, 18): pass\n"
                    "if resp.status != 0: pass\nraise error_for(1 if a == 2 else IO, 'y')\n")
    check(len(bare_statuses("t", bad)) == 4, f"bare statuses missed: {bare_statuses('t', bad)}")
    good = ast.parse("raise error_for(BAD_DTYPE, 'x')\nif e.status in (IO, TIMEOUT): pass\n"
                     "raise error_for(s['status'], s['message'])\n"
                     "raise error_for(AUTH if r.returncode == 2 else IO, 'z')\n")
    check(not bare_statuses("t", good), f"named statuses refused: {bare_statuses('t', good)}")


def imports_without_torch():
    code = ("import sys\n"
            "sys.modules['torch'] = None  # import torch raises ImportError\n"
            "import tshard, tshard.torch, tshard.state_dict, tshard.tracing\n"
            "import tshard.client as c\n"
            "assert c.Client.put and tshard.connect\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and r.stdout.strip() == "['torch']",
          f"import tshard with torch hidden: exit {r.returncode}, {r.stdout.strip()} "
          f"{r.stderr.strip()[-2000:]}")


def limits_current():
    headers = ["proto/ts_rules.h", "client/client_internal.h", "shard/plan/ts_plan.h",
               "kernels/ts_kernels.h"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "_limits.py")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "client", "python", "gen_limits.py"),
                            out] + [os.path.join(ROOT, h) for h in headers],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"gen_limits.py: {r.stderr.strip()}")
        if r.returncode == 0:
            with open(out) as a, open(os.path.join(PKG, "_limits.py")) as b:
                check(a.read() == b.read(), "client/python/tshard/_limits.py is stale; regenerate: "
                      "/usr/bin/python3 client/python/gen_limits.py client/python/tshard/_limits.py "
                      + " ".join(headers))


trees = modules()
check(len(trees) > 20 and "client" in trees and "conn" in trees, f"modules: {sorted(trees)}")
no_cycles(trees)
statuses_by_name(trees)
imports_without_torch()
limits_current()
for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
