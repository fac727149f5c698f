"""Mutation fuzzing of the `.nbc` loader, run under `_supervise.run` by test_fuzz.py.

    python _fuzz_worker.py N SEED BASE.nbc [BASE.nbc ...] [--offset K] --from INDEX

Iteration i mutates one base file (raw bytes of the whole file, or one section re-packed
with valid digests so the deeper checks are reached) with its own generator seeded by
(SEED, i), then loads it from bytes, calls the model on zeros and differentiates it. Each
step's outcome (an NBC code, "loaded"/"ran", or "ESCAPED <exception>") is printed as
``DONE i {json}``; a crash, hang or memory blow-up is seen by the supervisor, which resumes at
i + 1.
"""

from __future__ import annotations

import copy
import json
import random
import struct
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _craft import repack, split, weights_raw

from nbcompile.errors import FreezeError
from nbcompile.frozen import _manifest, _sandbox
from nbcompile.frozen._batch import concrete_shape
from nbcompile.frozen._load import load_bytes

# Mutated programs that send JAX's MLIR reader into an endless loop are refused after this
# long (the production default is longer); keeps the fuzz run short.
_sandbox.PARSE_TIMEOUT_S = 3.0

INTERESTING: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    7,
    2**31,
    2**32,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    1e308,
    0.5,
    "",
    "x" * 300,
    "float32",
    "bfloat16",
    "int8",
    "F32",
    "BF16",
    "cpu",
    "tpu",
    "cuda",
    "0.4.1",
    "0.10.2",
    "99.0.0",
    [],
    {},
    [0],
    [1, 2],
    [2**62, 2**62, 8],
    {"type": "leaf"},
    {"type": "dict", "keys": ["a", "a"], "children": []},
]
INTEGERS = [0, 1, 2**63, 2**64 - 1, 2**32 - 1, 224, 7]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _mutate_json(rng: random.Random, doc: Any) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_paths(doc))
        if not path:
            return rng.choice(INTERESTING)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = rng.random()
        if op < 0.15 and isinstance(parent, dict):
            del parent[key]
        elif op < 0.25 and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif op < 0.35 and isinstance(parent, dict):
            parent[key + "_"] = copy.deepcopy(parent[key])
        elif op < 0.45 and isinstance(parent[key], int) and not isinstance(parent[key], bool):
            parent[key] = parent[key] + rng.choice([-1, 1, 8, -8, 2**32])
        else:
            parent[key] = copy.deepcopy(rng.choice(INTERESTING))
    return doc


def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    op = rng.random()
    if op < 0.35 and buf:
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif op < 0.5:
        del buf[rng.randrange(len(buf) + 1) :]
    elif op < 0.6:
        buf += rng.randbytes(rng.randint(1, 64))
    elif op < 0.7 and buf:
        i = rng.randrange(len(buf))
        del buf[i : i + rng.randint(1, 32)]
    elif op < 0.8:
        i = rng.randrange(len(buf) + 1)
        buf[i:i] = rng.randbytes(rng.randint(1, 32))
    elif len(buf) >= 8:
        i = rng.randrange(len(buf) - 7)
        buf[i : i + 8] = struct.pack("<Q", rng.choice(INTEGERS) % 2**64)
    return bytes(buf)


def _weights_header_mutation(rng: random.Random, weights: bytes) -> bytes:
    (n,) = struct.unpack_from("<Q", weights)
    header = json.loads(weights[8 : 8 + n])
    text = json.dumps(_mutate_json(rng, header)).encode()
    if rng.random() < 0.2:
        text = _mutate_bytes(rng, text)
    return weights_raw(text, weights[8 + n :])


def mutate(rng: random.Random, base: bytes) -> tuple[str, bytes]:
    manifest, weights, program = split(base)
    op = rng.random()
    if op < 0.3:
        return "file-bytes", _mutate_bytes(rng, base)
    if op < 0.5:
        doc = _mutate_json(rng, json.loads(manifest))
        return "manifest-json", repack(base, manifest=json.dumps(doc).encode())
    if op < 0.55:
        return "manifest-bytes", repack(base, manifest=_mutate_bytes(rng, manifest.rstrip(b" ")))
    if op < 0.7:
        return "weights-header", repack(base, weights=_weights_header_mutation(rng, weights))
    if op < 0.8:
        return "weights-bytes", repack(base, weights=_mutate_bytes(rng, weights))
    return "program-bytes", repack(base, program=_mutate_bytes(rng, program))


def _outcome(fn: Any) -> str:
    try:
        jax.block_until_ready(fn())
        return "ran"
    except FreezeError as err:
        return err.code
    except BaseException as err:  # what the fuzz exists to find
        return f"ESCAPED {type(err).__name__}: {str(err)[:300]}"


def run_one(data: bytes) -> dict[str, str]:
    """Load, call (zeros, b = 2) and differentiate one file: the outcome of each step."""
    loaded: list[Any] = []
    out = {"load": _outcome(lambda: loaded.append(load_bytes(data)))}
    if not loaded:
        return out
    out["load"] = "loaded"
    model = loaded[0]
    leaves = [
        np.zeros(concrete_shape(leaf["shape"], 2), leaf["dtype"])
        for leaf in model.signature["inputs"]["leaves"]
    ]
    inputs = _manifest.unflatten(model.signature["inputs"]["tree"], leaves)
    out["call"] = _outcome(lambda: model(*inputs))

    def total(*xs: Any) -> Any:
        return sum(
            jnp.sum(jnp.real(o).astype(jnp.float32)) for o in jax.tree_util.tree_leaves(model(*xs))
        )

    argnums = tuple(range(len(inputs)))
    out["grad"] = _outcome(lambda: jax.grad(total, argnums=argnums, allow_int=True)(*inputs))
    return out


def main() -> None:
    count, seed, *bases = sys.argv[1 : sys.argv.index("--from")]
    offset = 0
    if "--offset" in bases:  # iterations OFFSET..N-1 (a slice of a long run), ids from OFFSET
        offset = int(bases[bases.index("--offset") + 1])
        bases = bases[: bases.index("--offset")]
    start = offset + int(sys.argv[sys.argv.index("--from") + 1])
    files = [Path(p).read_bytes() for p in bases]
    for i in range(start, int(count)):
        rng = random.Random(f"{seed}:{i}")  # one generator per file: a restart resumes exactly
        kind, data = mutate(rng, rng.choice(files))
        print(f"START {i}", flush=True)
        began = time.perf_counter()
        out = run_one(data)
        out.update(kind=kind, seconds=round(time.perf_counter() - began, 3))
        print(f"DONE {i} {json.dumps(out)}", flush=True)


if __name__ == "__main__":
    main()
