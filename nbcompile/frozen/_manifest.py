"""The JSON manifest of a `.nbc` file: pytree structure as JSON, schema checks, version window.

A pytree structure is stored as plain JSON, never as a pickled treedef::

    {"type": "leaf"} | {"type": "none"} | {"type": "tuple", "children": [...]}
    | {"type": "list", "children": [...]} | {"type": "dict", "keys": [...], "children": [...]}

Dict keys are strings or integers, kept in JAX's order (sorted). Inputs and outputs of a frozen
model must be arrays in such containers; weights may be any pytree (only their key-path names
are stored).

A typed PRNG key (``jax.random.key``) among the weights or inputs is stored as its key data
(``jax.random.key_data``: uint32, the key's shape plus the implementation's trailing dims) with
``"prng_impl"`` naming the implementation from the closed list :data:`PRNG_IMPLS`; the program
rebuilds the key with ``jax.random.wrap_key_data`` (never an import by name).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.frozen._safetensors import CODES

SCHEMA = "nbcompile.frozen-model"
#: The symbolic batch dimension as written in input/output shapes (never in weight shapes).
BATCH_DIM = "b"
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
MAX_TREE_DEPTH = 64
MAX_LEAVES = 100_000
#: PRNG implementations a frozen key may name -> the trailing dims of their key data
PRNG_IMPLS: dict[str, tuple[int, ...]] = {"threefry2x32": (2,), "rbg": (4,), "unsafe_rbg": (4,)}
_VERSION = re.compile(r"^(\d{1,4})\.(\d{1,4})\.(\d{1,6})(?:[.+a-z0-9-]{0,40})$")


def _bad(field: str, message: str) -> FreezeError:
    return FreezeError(f"manifest field {field}: {message}", code="NBC500")


# ---------------------------------------------------------------- pytrees as JSON
def tree_of(value: Any, where: str, depth: int = 0) -> dict[str, Any]:
    """JSON structure of ``value`` (dict / list / tuple / None / array leaves)."""
    if depth > MAX_TREE_DEPTH:
        raise FreezeError(f"{where}: nested deeper than {MAX_TREE_DEPTH}", code="NBC506")
    if value is None:
        return {"type": "none"}
    if isinstance(value, dict):
        keys = sorted(value)
        if not all(type(k) in (str, int) for k in keys):
            raise FreezeError(f"{where}: dict keys must be str or int", code="NBC506")
        children = [tree_of(value[k], f"{where}[{k!r}]", depth + 1) for k in keys]
        return {"type": "dict", "keys": keys, "children": children}
    if type(value) in (list, tuple):
        kind = "list" if isinstance(value, list) else "tuple"
        children = [tree_of(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        return {"type": kind, "children": children}
    if (hasattr(value, "shape") and hasattr(value, "dtype")) or isinstance(
        value, int | float | bool
    ):
        return {"type": "leaf"}
    raise FreezeError(
        f"{where} is a {type(value).__name__}; frozen inputs and outputs must be arrays in "
        "dicts, lists or tuples",
        code="NBC506",
        hint="return plain containers (e.g. a dict instead of a namedtuple or dataclass)",
    )


def flatten(tree: dict[str, Any], value: Any, where: str) -> list[Any]:
    """Leaves of ``value`` laid out as ``tree``; FreezeError NBC507 on a structure mismatch."""
    kind = tree["type"]
    if kind == "leaf":
        if value is None or isinstance(value, dict | list | tuple):
            raise FreezeError(
                f"{where}: expected an array, got {type(value).__name__}", code="NBC507"
            )
        return [value]
    if kind == "none":
        if value is not None:
            raise FreezeError(f"{where}: expected None", code="NBC507")
        return []
    if kind == "dict":
        if not isinstance(value, dict) or set(value) != set(tree["keys"]):
            got = sorted(map(repr, value)) if isinstance(value, dict) else type(value).__name__
            raise FreezeError(
                f"{where}: expected a dict with keys {tree['keys']}, got {got}", code="NBC507"
            )
        pairs = zip(tree["keys"], tree["children"], strict=True)
        return [x for k, t in pairs for x in flatten(t, value[k], f"{where}[{k!r}]")]
    if not isinstance(value, list | tuple) or len(value) != len(tree["children"]):
        n = len(tree["children"])
        raise FreezeError(f"{where}: expected a sequence of {n} items", code="NBC507")
    return [
        x for i, t in enumerate(tree["children"]) for x in flatten(t, value[i], f"{where}[{i}]")
    ]


def unflatten(tree: dict[str, Any], leaves: Sequence[Any]) -> Any:
    """Rebuild a value of structure ``tree`` from its leaves (in `flatten` order)."""
    it = iter(leaves)

    def build(t: dict[str, Any]) -> Any:
        kind = t["type"]
        if kind == "leaf":
            return next(it)
        if kind == "none":
            return None
        children = [build(c) for c in t["children"]]
        if kind == "dict":
            return dict(zip(t["keys"], children, strict=True))
        return children if kind == "list" else tuple(children)

    return build(tree)


# ---------------------------------------------------------------- schema checks
def _check_tree(tree: Any, field: str, depth: int = 0) -> int:
    """Validate a JSON tree; return its number of leaves."""
    if depth > MAX_TREE_DEPTH:
        raise _bad(field, f"nested deeper than {MAX_TREE_DEPTH}")
    if not isinstance(tree, dict) or not isinstance(tree.get("type"), str):
        raise _bad(field, "tree node must be an object with a type")
    kind = tree["type"]
    if kind in ("leaf", "none"):
        if set(tree) != {"type"}:
            raise _bad(field, f"unexpected keys in a {kind} node")
        return int(kind == "leaf")
    children = tree.get("children")
    if kind not in ("tuple", "list", "dict") or not isinstance(children, list):
        raise _bad(field, f"unknown tree node {kind!r}")
    if kind == "dict":
        keys = tree.get("keys")
        if (
            set(tree) != {"type", "keys", "children"}
            or not isinstance(keys, list)
            or len(keys) != len(children)
            or not all(type(k) in (str, int) for k in keys)
            or len({(type(k), k) for k in keys}) != len(keys)
        ):
            raise _bad(field, "dict node needs unique str/int keys, one per child")
        if len({type(k) for k in keys}) > 1 or keys != sorted(keys):
            # JAX sorts a dict's keys: keys of two types (or out of order) are no JAX pytree
            raise _bad(field, "dict keys must be all strings or all integers, in sorted order")
    elif set(tree) != {"type", "children"}:
        raise _bad(field, f"unexpected keys in a {kind} node")
    return sum(_check_tree(c, f"{field}[{i}]", depth + 1) for i, c in enumerate(children))


def _check_array_spec(spec: Any, field: str, named: bool = False, batch: str = "none") -> bool:
    """Validate an array spec; return whether it uses the batch dimension ``"b"``.

    ``batch`` says where ``"b"`` may appear: ``"none"`` (weights), ``"leading"`` (inputs) or
    ``"any"`` (outputs). Weights and inputs may carry ``"prng_impl"`` (a typed PRNG key's
    data), outputs not.
    """
    keys = {"name", "shape", "dtype"} if named else {"shape", "dtype"}
    if isinstance(spec, dict) and batch != "any" and "prng_impl" in spec:
        _check_key_spec(spec, field)
        keys = keys | {"prng_impl"}
    if not isinstance(spec, dict) or set(spec) != keys:
        raise _bad(field, f"must be an object with exactly {sorted(keys)}")
    if named and (not isinstance(spec["name"], str) or not 0 < len(spec["name"]) <= 1000):
        raise _bad(field, "name must be a non-empty string")
    shape = spec["shape"]
    if not isinstance(shape, list) or len(shape) > 32:
        raise _bad(field, "shape must be a list of at most 32 dims")
    uses_b = False
    for i, d in enumerate(shape):
        if (
            type(d) is str
            and d == BATCH_DIM
            and (batch == "any" or (batch == "leading" and i == 0))
        ):
            uses_b = True
        elif not (type(d) is int and 0 <= d < 1 << 62):
            where = "" if batch == "none" else f" or {BATCH_DIM!r} ({batch} dimension)"
            raise _bad(field, f"shape {shape!r} must hold non-negative integers{where}")
    if not isinstance(spec["dtype"], str) or spec["dtype"] not in CODES:
        raise _bad(field, f"unknown dtype {spec['dtype']!r}")
    return uses_b


def _check_key_spec(spec: dict[str, Any], field: str) -> None:
    """A typed PRNG key's data: a listed implementation, uint32, its trailing dims."""
    impl = spec["prng_impl"]
    if not isinstance(impl, str) or impl not in PRNG_IMPLS:
        raise _bad(f"{field}.prng_impl", f"must be one of {sorted(PRNG_IMPLS)}")
    shape, tail = spec.get("shape"), PRNG_IMPLS[impl]
    if (
        spec.get("dtype") != "uint32"
        or not isinstance(shape, list)
        or len(shape) < len(tail)
        or tuple(shape[len(shape) - len(tail) :]) != tail
    ):
        raise _bad(field, f"{impl} key data must be uint32 with trailing dims {list(tail)}")


def key_impl(leaf: Any) -> str | None:
    """The implementation name of a typed PRNG key (None for any other leaf); FreezeError
    NBC506 for a key of an implementation not in :data:`PRNG_IMPLS`."""
    import jax

    dtype = getattr(leaf, "dtype", None)
    try:
        if dtype is None or not jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            return None
    except TypeError:
        return None
    name = str(jax.random.key_impl(leaf))
    if name not in PRNG_IMPLS:
        raise FreezeError(
            f"a PRNG key of implementation {name!r} cannot be frozen",
            code="NBC506",
            hint=f"use one of {', '.join(sorted(PRNG_IMPLS))} (jax.random.key(seed, impl=...))",
        )
    return name


def key_shapes(arrays: Sequence[np.ndarray], impls: Sequence[str | None]) -> list[np.ndarray]:
    """``arrays`` with each key's data replaced by a stand-in of the key's own shape (its data
    without the trailing dims), for the batch-dimension checks."""
    return [
        a if impl is None else np.broadcast_to(np.zeros((), a.dtype), a.shape[: -len(tail)])
        for a, impl in zip(arrays, impls, strict=True)
        for tail in [PRNG_IMPLS.get(impl or "", ())]
    ]


def wrap_keys(flat: Sequence[Any], impls: Sequence[str | None]) -> list[Any]:
    """Key data rebuilt as typed keys where ``impls`` names an implementation (in a program)."""
    import jax

    return [
        x if impl is None else jax.random.wrap_key_data(x, impl=impl)
        for x, impl in zip(flat, impls, strict=True)
    ]


def key_data_for(leaf: Any, want: dict[str, Any], i: int) -> Any:
    """An input leaf as the program takes it: a typed PRNG key of the implementation the model
    was frozen with becomes its key data (its raw uint32 data is taken as it is);
    FreezeError NBC507 for a key where the model takes another implementation or an array."""
    import jax

    impl = key_impl(leaf)
    if impl is None:
        return leaf
    if want.get("prng_impl") != impl:
        takes = f"a {want['prng_impl']} key" if "prng_impl" in want else "an array"
        raise FreezeError(
            f"input leaf {i} is a {impl} PRNG key, the model takes {takes}", code="NBC507"
        )
    return jax.random.key_data(leaf)


def refuse_keys(leaves: Sequence[Any], where: str) -> None:
    """FreezeError NBC506 for a typed PRNG key among a model's outputs."""
    for i, leaf in enumerate(leaves):
        if key_impl(leaf) is not None:
            raise FreezeError(
                f"{where} leaf {i} is a typed PRNG key; frozen outputs must be arrays",
                code="NBC506",
                hint="return jax.random.key_data(key) and rebuild it with "
                "jax.random.wrap_key_data(data) after the call",
            )


def _check_signature(sig: Any, field: str, batch: str) -> bool:
    """Validate an input/output signature; return whether any leaf uses ``"b"``."""
    if not isinstance(sig, dict) or set(sig) != {"tree", "leaves"}:
        raise _bad(field, "must be an object with tree and leaves")
    if not isinstance(sig["leaves"], list) or len(sig["leaves"]) > MAX_LEAVES:
        raise _bad(f"{field}.leaves", "must be a list")
    if _check_tree(sig["tree"], f"{field}.tree") != len(sig["leaves"]):
        raise _bad(field, "the tree's leaf count differs from the leaves listed")
    uses = [
        _check_array_spec(leaf, f"{field}.leaves[{i}]", batch=batch)
        for i, leaf in enumerate(sig["leaves"])
    ]
    return any(uses)


def _expect(obj: dict[str, Any], field: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(field)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise _bad(field, f"missing or not a {getattr(kind, '__name__', kind)}")
    return value


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _bad(key, "appears twice")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise _bad("(number)", f"non-finite JSON number {name}")


def parse(raw: memoryview | bytes, format_version: int) -> dict[str, Any]:
    """Decode and validate the manifest section; FreezeError NBC500 naming the bad field."""
    try:
        manifest = json.loads(
            bytes(raw).decode("utf-8"),
            object_pairs_hook=_reject_duplicates,
            parse_constant=_reject_constant,
        )
    except FreezeError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise FreezeError(
            f"manifest is not valid UTF-8 JSON ({type(err).__name__})", code="NBC500"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != SCHEMA:
        raise _bad("format", f"expected {SCHEMA!r}")
    if _expect(manifest, "format_version", int) != format_version:
        raise _bad("format_version", "differs from the header's format version")
    _expect(manifest, "name", str)
    _expect(manifest, "created_utc", str)
    writer = _expect(manifest, "writer", dict)
    for key in ("nbcompile", "jax", "jaxlib"):
        if not isinstance(writer.get(key), str):
            raise _bad(f"writer.{key}", "missing or not a string")
    for key in ("export_serialization_version", "calling_convention_version"):
        if type(writer.get(key)) is not int:
            raise _bad(f"writer.{key}", "missing or not an integer")
    platforms = _expect(manifest, "platforms", list)
    if (
        not platforms
        or len(set(map(str, platforms))) != len(platforms)
        or not all(p in PLATFORMS for p in platforms)
    ):
        raise _bad("platforms", f"must be distinct names among {PLATFORMS}, got {platforms!r}")
    count = _expect(manifest, "device_count", int)
    if not 1 <= count <= 1 << 20:
        raise _bad("device_count", f"{count} is out of range")
    _expect(manifest, "constants_mode", bool)
    batched_in = _check_signature(manifest.get("inputs"), "inputs", "leading")
    if _check_signature(manifest.get("outputs"), "outputs", "any") and not batched_in:
        raise _bad("outputs", f"uses the batch dimension {BATCH_DIM!r} but no input does")
    weights = _expect(manifest, "weights", list)
    if len(weights) > MAX_LEAVES:
        raise _bad("weights", "too many tensors")
    for i, spec in enumerate(weights):
        _check_array_spec(spec, f"weights[{i}]", named=True)
    if len({w["name"] for w in weights}) != len(weights):
        raise _bad("weights", "duplicate tensor names")
    program = _expect(manifest, "program", dict)
    if type(program.get("stablehlo_ops")) is not int:
        raise _bad("program.stablehlo_ops", "missing or not an integer")
    calls = program.get("custom_calls", [])
    if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
        raise _bad("program.custom_calls", "must be a list of strings")
    return manifest


def encode(manifest: dict[str, Any]) -> bytes:
    """Canonical manifest bytes (sorted keys; non-ASCII written as JSON escapes, so any name,
    even one holding an unpaired surrogate, is stored and read back unchanged)."""
    return json.dumps(manifest, sort_keys=True, indent=1, ensure_ascii=True).encode("ascii")


def array_spec(
    shape: Sequence[int], dtype: Any, batched: bool = False, prng_impl: str | None = None
) -> dict[str, Any]:
    """Manifest spec of an array; ``batched`` writes the leading dimension as ``"b"``;
    ``prng_impl`` marks a typed PRNG key's data."""
    dims: list[int | str] = [int(d) for d in shape]
    if batched:
        dims[0] = BATCH_DIM
    spec: dict[str, Any] = {"shape": dims, "dtype": np.dtype(dtype).name}
    if prng_impl is not None:
        spec["prng_impl"] = prng_impl
    return spec


def parse_version(text: str) -> tuple[int, int, int] | None:
    match = _VERSION.match(text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def leaf_paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """Key-path names of a JSON tree's leaves, e.g. ``[0]['y']``, in `flatten` order."""
    kind = tree["type"]
    if kind == "leaf":
        return [prefix]
    if kind == "none":
        return []
    keys = tree["keys"] if kind == "dict" else range(len(tree["children"]))
    return [
        p
        for k, child in zip(keys, tree["children"], strict=True)
        for p in leaf_paths(child, f"{prefix}[{k!r}]")
    ]
