"""tshard: the Python client of the tshard daemons (pure Python over numpy and protobuf).

    import numpy as np, tshard
    with tshard.connect(rank=0) as c:
        c.create("w", "f32", (8, 4), tshard.Attr(tshard.Mesh([2]), [tshard.Shard(0)]))
        c.put("w", np.arange(32, dtype=np.float32).reshape(8, 4))
        c.reshard("w", "mesh=[2]@0-1 placements=[S(1)]")
        print(c.get("w"))

Errors raise subclasses of tshard.TshardError named after the status codes (tshard.NotFoundError,
tshard.BadAttributeError, ...) with the daemon's message; they also subclass the matching
builtins (tshard.TimeoutError is a TimeoutError, tshard.IoError a ConnectionError, bad values
ValueError). A numpy array's dtype means what it says; bf16 data is given as bits with
tshard.bf16_bits, f8_e4m3 and f8_e5m2 data with tshard.f8_bits; c64 and c128 are numpy's
complex64 and complex128 (partial sum, avg and prod; no max or min; no cast to a real dtype).
"""
from ._version import __version__
from .attr import (SPLIT_RULES, Attr, Mesh, Partial, Replicate, Shard, from_dtensor_spec,
                   from_scalapack_desc, numroc)
from .client import (DTYPE_SPELLINGS, DTYPES, ROW_MAJOR, Client, connect, read_token_file,
                     socket_path)
from .errors import *  # noqa: F401,F403 - every exception class, one per status
from .errors import __all__ as _error_names
from .einsum import EinsumResult
from .future import Future, WaitTimeoutError, wait
from .typed_put import BF16Bits, F8Bits, bf16_bits, f8_bits
from . import errors
from . import spmd
from . import checkpoint
from . import safetensors  # Hugging Face safetensors requests and read_header
from . import attr_rules  # which attribute each tensor of a load or a state dict takes
from . import torch  # torch tensors and DLPack objects in and out (imports torch lazily)
from .offline import plan, show  # plan and drawing without daemons
from .program import graph_from_json  # a program's message form
from .launch import Job, launch  # daemons from Python: with tshard.launch(np=4) as job
from . import tracing
from .tracing import trace  # with tshard.trace() as t: ... t.save("trace.json", job=...)

__all__ = ["connect", "Client", "Attr", "Mesh", "Shard", "Replicate", "Partial",
           "errors", "DTYPES", "DTYPE_SPELLINGS", "ROW_MAJOR", "socket_path", "read_token_file",
           "spmd", "plan", "show", "EinsumResult", "checkpoint", "graph_from_json", "Future",
           "wait", "WaitTimeoutError", "bf16_bits", "BF16Bits", "f8_bits", "F8Bits", "launch",
           "Job", "safetensors", "torch", "attr_rules", "from_dtensor_spec", "SPLIT_RULES",
           "from_scalapack_desc", "numroc", "trace", "tracing"] + [
               n for n in _error_names if n not in ("TimeoutError", "OverflowError")]
# tshard.TimeoutError and tshard.OverflowError subclass the builtins of those names but stay out
# of __all__, so that "from tshard import *" never hides the builtins from the importing code.
