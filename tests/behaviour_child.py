"""Child process for tests/test_targets_behaviour.py: the target-independent checks on an
8-device CPU mesh (XLA_FLAGS set by the parent before JAX starts). Prints one JSON line."""

from __future__ import annotations

import json
import os
import sys
import tempfile

os.environ.setdefault("NBCOMPILE_CACHE_DIR", tempfile.mkdtemp(prefix="nbcompile-child-"))
sys.path.insert(0, os.path.dirname(__file__))

import helpers as _behaviour
import jax
from IPython.testing.globalipapp import start_ipython

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

ip = start_ipython()
ip.run_line_magic("load_ext", "nbcompile")
counter = _behaviour.XlaCompiles()
opts = "--mesh 8 --shard x=data,None"
done = _behaviour.run_all(
    ip,
    opts,
    {"mesh": "8", "shard": {"x": "data,None"}},
    runnable=True,
    compiles=True,
    counter=counter,
)
mesh = _behaviour.last(ip).target.mesh
print(json.dumps({"devices": jax.device_count(), "done": done, "mesh": dict(mesh.shape)}))
