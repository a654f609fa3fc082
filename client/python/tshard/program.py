"""Compiled programs on the shards (program/PROGRAM.md): compile a program on every rank, run it
SPMD on the ranks' local slices, show what the compiler made of it. The Client's program_*
methods (the mixin ``Programs``) call the functions here."""
import json
import numbers
from typing import Any, Dict, Mapping, Optional, Union

from . import tshard_pb2 as pb
from .future import Future


def _text(program):
    if isinstance(program, str):
        return program
    if isinstance(program, dict):
        return json.dumps(program)
    raise TypeError("a program is its JSON text (str), a dict or a ProgramGraph message")


def _dimref(v, what):
    r = pb.ProgramGraphDimRef()
    if v is None:
        return r  # unset: a slice bound's default
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise TypeError(f"{what}: an int, a dim name or formula, or None")
    if isinstance(v, int):
        r.size = v
    else:
        r.expr = v
    return r


def _ints(msg, values, what):
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{what}: a list of ints")
    msg.SetInParent()  # present even when empty
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{what}: a list of ints")
        msg.values.append(v)


def graph_from_json(program: Union[str, Dict[str, Any]]) -> Any:
    """The message form (a ``tshard_pb2.ProgramGraph``) of a program given as JSON.

    Field for field, so ``compile(graph=graph_from_json(p))`` compiles the same program as
    ``compile(p)``. Only the structure is converted; the daemon checks the program.

    Args:
        program: the program as JSON text or a dict.

    Returns:
        The ProgramGraph message.

    Raises:
        TypeError: the program is not a JSON object.
    """
    d = json.loads(program) if isinstance(program, str) else program
    if not isinstance(d, dict):
        raise TypeError("a program is a JSON object (dict)")
    g = pb.ProgramGraph()
    if "name" in d:
        g.name = d["name"]
    for name, grp in (d.get("dims") or {}).items():
        m = g.dims.add(name=name, min=grp.get("min", 0), max=grp.get("max", 0))
        b = grp.get("buckets")
        if b == "pow2":
            m.pow2 = True
        elif isinstance(b, dict) and "step" in b:
            m.step = b["step"]
        elif isinstance(b, list):
            _ints(m.list, b, f"dims.{name}.buckets")
        elif b is not None:
            raise TypeError(f"dims.{name}.buckets: \"pow2\", {{\"step\": int}} or a list of ints")
    for i, x in enumerate(d.get("inputs") or []):
        m = g.inputs.add(name=x.get("name", ""), dtype=x.get("dtype", ""))
        for v in x.get("shape") or []:
            m.shape.append(_dimref(v, f"inputs[{i}].shape"))
    for i, o in enumerate(d.get("ops") or []):
        m = g.ops.add(op=o.get("op", ""), out=o.get("out", ""))
        for a in o.get("args") or []:
            if isinstance(a, str):
                m.args.add(name=a)
            elif isinstance(a, numbers.Real) and not isinstance(a, bool):
                m.args.add(value=float(a))
            else:
                raise TypeError(f"ops[{i}].args: value names or numbers")
        if o.get("dims") is not None:
            _ints(m.dims, o["dims"], f"ops[{i}].dims")
        m.keepdims = bool(o.get("keepdims", False))
        if o.get("perm") is not None:
            _ints(m.perm, o["perm"], f"ops[{i}].perm")
        for key, field in (("shape", m.shape), ("start", m.start), ("stop", m.stop)):
            for v in o.get(key) or []:
                field.append(_dimref(v, f"ops[{i}].{key}"))
        for v in o.get("step") or []:
            m.step.append(1 if v is None else v)  # null: the default step
        if o.get("dim") is not None:  # window
            _ints(m.dim, o["dim"] if isinstance(o["dim"], list) else [o["dim"]], f"ops[{i}].dim")
        if o.get("size") is not None:
            m.size.CopyFrom(_dimref(o["size"], f"ops[{i}].size"))
        if "eq" in o:
            m.eq = o["eq"]
        if "dtype" in o:
            m.dtype = o["dtype"]
    for name in d.get("outputs") or []:
        g.outputs.append(name)
    return g


def _rule(msg, name, rule):
    """A bucketing rule override: "pow2", {"step": S} or "step:S", a list or "V1,V2,..."."""
    if isinstance(rule, str) and rule.startswith("step:"):
        rule = {"step": int(rule[5:])}
    elif isinstance(rule, str) and rule != "pow2":
        rule = [int(v) for v in rule.split(",")]
    m = msg.buckets.add(name=str(name))
    if rule == "pow2":
        m.pow2 = True
    elif isinstance(rule, dict) and set(rule) == {"step"}:
        m.step = int(rule["step"])
    elif isinstance(rule, (list, tuple)):
        _ints(m.list, list(rule), f"buckets[{name!r}]")
    else:
        raise TypeError(f"buckets[{name!r}]: \"pow2\", {{\"step\": S}} (or \"step:S\"), or a "
                        "list of ints (or \"V1,V2,...\")")


def compile(client: object, program: Union[str, dict, "pb.ProgramGraph", None] = None,  # noqa: A001
            lazy: bool = True, key: Optional[str] = None,
            graph: Optional["pb.ProgramGraph"] = None,
            buckets: Optional[Mapping[str, object]] = None, wait: bool = True) -> Any:
    """Compiles on every rank; returns the program's id. Buckets are built on their first run
    (lazy=False: every bucket now, e.g. ahead of a timed loop). The
    program is its JSON text or dict, or (graph=, or as program) a ProgramGraph message.
    buckets: {group name: rule} overriding the program's bucketing rules (rule: "pow2",
    {"step": S} or "step:S", a list of ints or "V1,V2,...")."""
    if isinstance(program, pb.ProgramGraph):
        program, graph = None, program
    if (program is None) == (graph is None):
        raise TypeError("compile takes a program (JSON text or dict) or graph= (a ProgramGraph "
                        "message), exactly one")
    req = pb.ProgramCompileRequest(lazy=bool(lazy))
    if graph is not None:
        if not isinstance(graph, pb.ProgramGraph):
            raise TypeError("graph: a tshard_pb2.ProgramGraph message (see graph_from_json)")
        req.graph.CopyFrom(graph)
    else:
        req.text = _text(program)
    for name, rule in dict(buckets or {}).items():
        _rule(req, name, rule)
    return client._op(key, lambda r: r.program.id, wait, "program_compile",
                      program_compile=req)


def run(client: object, program_id: str, inputs: Mapping[str, Union[str, float]],
        outputs: Optional[Mapping[str, str]] = None, key: Optional[str] = None,
        overwrite: bool = False, wait: bool = True) -> Any:
    """Runs a compiled program on the ranks' local slices.

    inputs: {program input name: stored tensor name, or a number for a scalar input};
    outputs: {program output name: tensor name}; an output not named becomes a tensor named
    after the output. An output's tensor must not exist unless overwrite=True (then it is
    replaced; an input of the run never is). In-place assigns update the inputs' tensors.
    Missing, repeated or unknown names are refused all at once (InvalidArgumentError naming
    them and the program's inputs and outputs)."""
    msg = pb.ProgramRunRequest(id=str(program_id), overwrite=bool(overwrite))
    for name, v in dict(inputs).items():
        if isinstance(v, str):
            msg.inputs.add(name=str(name), tensor=v)
        elif isinstance(v, numbers.Real):
            msg.inputs.add(name=str(name), value=float(v))
        else:
            raise TypeError(f"input {name!r}: a tensor name or a number")
    for name, t in dict(outputs or {}).items():
        msg.outputs.add(name=str(name), tensor=str(t))
    return client._op(key, lambda r: None, wait, f"program_run of {program_id}",
                      program_run=msg)


def drop(client, program_id, key=None, wait=True):
    """Forgets the program on every rank."""
    return client._op(key, lambda r: None, wait, f"program_drop of {program_id}",
                      program_drop=pb.ProgramDropRequest(id=str(program_id)))


def show(client: object, program_id: str, summary: bool = False) -> str:
    """The report of this rank's compiled program: graph, kernels, buckets, pool plan, cache;
    summary=True: the short report a compile prints (interface, kernels, dim groups, buckets
    built, cache)."""
    req = pb.ProgramShowRequest(id=str(program_id), summary=bool(summary))
    return client._call(program_show=req).program.text


class Programs:
    """Compiled programs: the Client's methods over the functions above (a mixin of
    :class:`tshard.Client`)."""

    def program_compile(self, program: Union[None, str, Dict[str, Any]] = None, lazy: bool = True,
                        key: Optional[str] = None, graph: Any = None,
                        buckets: Optional[Dict[str, Any]] = None, wait: bool = True) -> Any:
        """Compiles an elementwise/reduction program on every rank.

        Args:
            program: the program as JSON text or a dict (or None with ``graph``).
            lazy: build each bucket on its first run (False: all now).
            key: an idempotency key.
            graph: the program as a ProgramGraph message (see :func:`tshard.graph_from_json`).
            buckets: ``{group: rule}`` overriding the program's bucketing rules.
            wait: False returns a Future of the id.

        Returns:
            The program's id, for :meth:`program_run`.

        Raises:
            ParseError: a bad program. ProgramCompileError: the C compiler failed.
        """
        return compile(self, program, lazy=lazy, key=key, graph=graph, buckets=buckets,
                                wait=wait)

    def program_run(self, program_id: Any, inputs: Mapping[str, Any],
                    outputs: Optional[Mapping[str, str]] = None, key: Optional[str] = None,
                    overwrite: bool = False, wait: bool = True) -> Optional[Future]:
        """Runs a compiled program on the local slices of every rank.

        Args:
            program_id: the id from :meth:`program_compile`.
            inputs: ``{input name: tensor name or number}``; a number its input's dtype cannot
                hold is refused (BadDtypeError).
            outputs: ``{output name: tensor name}``; outputs not named become tensors of their
                own names.
            key: an idempotency key.
            overwrite: let outputs replace existing tensors.
            wait: False returns a Future.

        Raises:
            ProgramPlacementError: the tensors' attributes do not fit the program.
            NotFoundError: an unknown program or tensor.
        """
        return run(self, program_id, inputs, outputs, key=key, overwrite=overwrite,
                            wait=wait)

    def program_show(self, program_id: Any, summary: bool = False) -> Any:
        """What a compiled program is: its inputs, outputs and kernels (``summary``: briefly).

        Raises:
            NotFoundError: no program with this id.
        """
        return show(self, program_id, summary=summary)

    def program_drop(self, program_id: Any, key: Optional[str] = None,
                     wait: bool = True) -> Optional[Future]:
        """Forgets a compiled program on every rank (``wait=False``: a Future).

        Raises:
            NotFoundError: no program with this id.
        """
        return drop(self, program_id, key=key, wait=wait)
