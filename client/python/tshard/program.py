"""Compiled programs on the shards (program/PROGRAM.md): compile a program on every rank, run it
SPMD on the ranks' local slices, show what the compiler made of it. The Client's program_*
methods delegate here."""
import json
import numbers

from . import tshard_pb2 as pb


def _text(program):
    if isinstance(program, str):
        return program
    if isinstance(program, dict):
        return json.dumps(program)
    raise TypeError("a program is its JSON text (str) or a dict")


def compile(client, program, lazy=False, key=None):  # noqa: A001 - the operation's name
    """Compiles on every rank (all buckets now unless lazy); returns the program's id."""
    r = client._call(key, program_compile=pb.ProgramCompileRequest(text=_text(program),
                                                                   lazy=bool(lazy)))
    return r.program.id


def run(client, program_id, inputs, outputs=None, key=None):
    """inputs: {program input name: stored tensor name, or a number for a scalar input};
    outputs: {program output name: new tensor name}. In-place assigns update the inputs'
    tensors."""
    msg = pb.ProgramRunRequest(id=str(program_id))
    for name, v in dict(inputs).items():
        if isinstance(v, str):
            msg.inputs.add(name=str(name), tensor=v)
        elif isinstance(v, numbers.Real):
            msg.inputs.add(name=str(name), value=float(v))
        else:
            raise TypeError(f"input {name!r}: a tensor name or a number")
    for name, t in dict(outputs or {}).items():
        msg.outputs.add(name=str(name), tensor=str(t))
    client._call(key, program_run=msg)


def drop(client, program_id, key=None):
    """Forgets the program on every rank."""
    client._call(key, program_drop=pb.ProgramDropRequest(id=str(program_id)))


def show(client, program_id):
    """The report of this rank's compiled program: graph, kernels, buckets, pool plan, cache."""
    return client._call(program_show=pb.ProgramShowRequest(id=str(program_id))).program.text
