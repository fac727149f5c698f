"""Mutation fuzzing of the `.nbc` loader, run in its own process by test_fuzz.py.

    python _fuzz_worker.py RESULT.json N SEED BASE.nbc [BASE.nbc ...]

Each iteration mutates one base file (raw bytes of the whole file, or one section re-packed
with valid digests so the deeper checks are reached) and loads it from bytes. Anything other
than a FreezeError is recorded. Progress (iteration, seed) goes to RESULT.json.progress so a
native crash can be reproduced.
"""

from __future__ import annotations

import copy
import json
import random
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from _craft import repack, split, weights_raw

from nbcompile.errors import FreezeError
from nbcompile.frozen import _sandbox
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


def main() -> None:
    result_path, count, seed, *bases = sys.argv[1:]
    files = [Path(p).read_bytes() for p in bases]
    rng = random.Random(int(seed))
    stats: dict[str, dict[str, int]] = {}
    failures = []
    seconds: dict[str, float] = {}
    slowest: list[Any] = [0.0]
    start = time.perf_counter()
    with open(result_path + ".progress", "w") as progress:
        for i in range(int(count)):
            kind, data = mutate(rng, rng.choice(files))
            if i % 50 == 0:
                progress.seek(0)
                progress.write(f"{i} {seed} {kind}          \n")
                progress.flush()
            began = time.perf_counter()
            try:
                load_bytes(data)
                outcome = "loaded"
            except FreezeError as err:
                outcome = err.code
            except BaseException as err:
                outcome = "ESCAPED"
                if len(failures) < 20:
                    failures.append(
                        {
                            "iteration": i,
                            "kind": kind,
                            "error": repr(err),
                            "traceback": traceback.format_exc()[-2000:],
                        }
                    )
            stats.setdefault(kind, {}).setdefault(outcome, 0)
            stats[kind][outcome] += 1
            took = time.perf_counter() - began
            seconds[kind] = seconds.get(kind, 0.0) + took
            if took > slowest[0]:
                slowest[:] = [took, i, kind, outcome]
    report = {
        "count": int(count),
        "seconds": time.perf_counter() - start,
        "stats": stats,
        "failures": failures,
        "seconds_by_kind": seconds,
        "slowest": slowest,
    }
    with open(result_path, "w") as out:
        json.dump(report, out, indent=1)


if __name__ == "__main__":
    main()
