"""tshard: the Python client of the tshard daemons (pure Python over numpy and protobuf).

    import numpy as np, tshard
    with tshard.connect(rank=0) as c:
        c.create("w", "f32", (8, 4), tshard.Attr(tshard.Mesh([2]), [tshard.Shard(0)]))
        c.put("w", np.arange(32, dtype=np.float32).reshape(8, 4))
        c.reshard("w", "mesh=[2]@0-1 placements=[S(1)]")
        print(c.get("w"))

Errors raise subclasses of tshard.TshardError named after the status codes (NotFoundError,
BadAttributeError, ...) with the daemon's message.
"""
from ._version import __version__
from .attr import Attr, AttrError, Mesh, Partial, Replicate, Shard
from .client import DTYPES, Client, connect, read_token_file, socket_path
from .errors import TshardError, error_for
from .einsum import EinsumResult
from .future import Future, WaitTimeoutError, wait
from . import errors
from . import spmd
from . import checkpoint
from . import safetensors  # Hugging Face safetensors requests and read_header (safetensors.py)
from . import torch  # torch tensors and DLPack objects in and out (torch.py; imports torch lazily)
from .offline import plan, show  # plan and drawing without daemons (offline.py)
from .program import graph_from_json  # a program's message form (program.py)
from .launch import Job, launch  # daemons from Python: with tshard.launch(np=4) as job (launch.py)

__all__ = ["connect", "Client", "Attr", "AttrError", "Mesh", "Shard", "Replicate", "Partial",
           "TshardError", "error_for", "errors", "DTYPES", "socket_path", "read_token_file", "spmd",
           "plan", "show", "EinsumResult",
           "checkpoint", "graph_from_json", "Future", "wait", "WaitTimeoutError", "launch", "Job",
           "safetensors", "torch"]
