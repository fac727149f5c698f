"""The user's calls as groups: one reading of the call labels in name stacks, for every view.

``capture/calls.py`` writes each call the user's code made while tracing into JAX's name stack
(``loss#1/block#3/gelu``) and records which labels are calls (:class:`CallKinds`, from the
traced stage's ``CallLog``). Here a name stack or an HLO ``op_name`` is split into its *module
path* (Flax/Equinox/Keras modules and ``jax.named_scope`` scopes, as before: call labels never
enter it) and its *call path*. Backward equations (``transpose(jvp(...))`` in the name stack)
get the call path of the forward call they differentiate, each label marked ``(backward)``:
``loss#1 (backward)/block#3 (backward)``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .namestack import shown, strip_transforms, unrepeated

__all__ = [
    "BACKWARD",
    "CallKinds",
    "annotate_compiled",
    "call_kinds",
    "functions_of",
    "fusion_functions",
    "fusion_scopes",
    "op_name_calls",
    "op_name_modules",
    "split_scopes",
    "strip_calls",
]

BACKWARD = " (backward)"
_JITTED = re.compile(r"(?:^|\()p?jit\([^()]*\)+$")


@dataclass(frozen=True)
class CallKinds:
    """Name-stack label -> ``"call"`` (a function of the user's files) or ``"library"``."""

    kinds: dict[str, str] = field(default_factory=dict)
    # the hash, computed once: every cached look-up keyed by the kinds hashes them (a few
    # thousand labels, ~40,000 look-ups per GPT-2-small analysis); ``kinds`` is not changed
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def __contains__(self, label: str) -> bool:
        return label in self.kinds

    def __hash__(self) -> int:
        found = self._hash
        if found is None:
            found = hash(frozenset(self.kinds.items()))
            object.__setattr__(self, "_hash", found)
        return found

    def __reduce__(self) -> tuple[Any, ...]:  # a string's hash differs between processes
        return (CallKinds, (self.kinds,))

    def get(self, label: str) -> str | None:
        return self.kinds.get(label)


def call_kinds(log: Any | None) -> CallKinds:
    """The labels of a ``capture.calls.CallLog`` (None or no calls: empty)."""
    # labels as name-stack parsing keeps them (``namestack.shown``: an absurdly long one cut)
    return CallKinds({shown(k): v for k, v in log.kinds.items()} if log is not None else {})


def split_scopes(scopes: tuple[str, ...], kinds: CallKinds) -> tuple[list[str], list[str]]:
    """(module scopes, call labels) of one name stack's scopes (transforms stripped)."""
    if not kinds:
        return list(scopes), []
    modules, calls = [], []
    for scope in scopes:
        (calls if scope in kinds else modules).append(scope)
    return modules, calls


def op_name_modules(op_name: str | None, kinds: CallKinds) -> str | None:
    """The module path of an HLO ``op_name`` (its first name), call labels left out."""
    parts = _op_name_parts(op_name, kinds)
    return "/".join(parts[0]) or None if parts else None


def op_name_calls(op_name: str | None, kinds: CallKinds) -> str | None:
    """The call path of an HLO ``op_name`` (its first name): ``loss#1/block#3/gelu``; labels
    under a ``transpose(...)`` are marked ``(backward)``."""
    parts = _op_name_parts(op_name, kinds)
    return "/".join(parts[1]) or None if parts else None


def fusion_functions(op_names: list[str], kinds: CallKinds) -> list[str]:
    """The call paths of a fusion's member ops (every ``;``-joined name), sorted, unique."""
    found: set[str] = set()
    for op_name in op_names:
        for part in op_name.split(";"):
            path = op_name_calls(part, kinds)
            if path:
                found.add(path)
    return sorted(found)


def fusion_scopes(op_names: list[str], kinds: CallKinds) -> tuple[list[str], list[str]]:
    """Where a kernel's ops sit among the user's own groups, in the order they nest: (the
    paths of modules, scopes and the user's calls interleaved as in the name stack, cut at the
    first library call, sorted and unique, ``""`` for a kernel of the top level; the library calls
    the ops sit in, their ``#k`` dropped). ``Transformer/blocks_0/attn`` for a ``transpose``
    inside ``jnp.transpose`` called by the ``attn`` module; ``loss#1/block#3`` and ``gelu`` for
    the tanh of a ``jax.nn.gelu`` in ``block``. Backward labels are marked ``(backward)``."""
    paths: set[str] = set()
    libs: set[str] = set()
    bare = False  # an op with no label at all: a reducer's region, a shared constant
    for op_name in op_names:
        for part in op_name.split(";"):
            found = _op_name_scope(part, kinds)
            if found is not None:
                if found[0] or found[1]:
                    paths.add(found[0])
                else:
                    bare = True
                if found[1]:
                    libs.add(found[1])
    if bare and not paths:
        paths.add("")  # a kernel of the top level
    return sorted(paths), sorted(libs)


def _scopes(op_name: str) -> Iterator[tuple[str, bool]]:
    """The scopes of an op name as the view shows them, outer first, each with whether it lies
    under a ``transpose(...)`` (backward); jit wrappers and transforms-only parts left out."""
    backward = False
    for part in unrepeated(op_name).split("/")[:-1]:
        if "transpose(" in part:
            backward = True
        if _JITTED.search(part):
            continue
        name = strip_transforms(part, dotted=True)
        if name:
            yield shown(name), backward  # as the traced scopes and the kinds' labels are


@functools.lru_cache(maxsize=1 << 14)
def _op_name_scope(op_name: str, kinds: CallKinds) -> tuple[str, str | None] | None:
    if not op_name or not kinds:
        return None
    path: list[str] = []
    for name, backward in _scopes(op_name):
        if kinds.get(name) == "library":
            return "/".join(path), name.split("#", 1)[0]
        path.append(name + BACKWARD if backward else name)
    return "/".join(path), None


@functools.lru_cache(maxsize=1 << 14)
def _op_name_parts(op_name: str | None, kinds: CallKinds) -> tuple[list[str], list[str]] | None:
    if not op_name or not kinds:
        return None
    modules, calls = [], []
    for name, backward in _scopes(op_name.split(";", 1)[0]):
        if name in kinds:
            calls.append(name + BACKWARD if backward else name)
        else:
            modules.append(name)
    return modules, calls


def strip_calls(paths: list[str], kinds: CallKinds) -> list[str]:
    """Module paths with call labels left out (sorted, unique, empty ones dropped)."""
    if not kinds:
        return paths
    out = {"/".join(p for p in path.split("/") if p not in kinds) for path in paths}
    return sorted(p for p in out if p)


def annotate_compiled(info: Any, kinds: CallKinds) -> dict[str, list[str]]:
    """Give each fusion its ``functions``, each compiled-graph kernel node its ``calls`` (the
    same paths) and keep call labels out of module paths (fusions, kernels, compiled-graph
    nodes). Returns kernel instruction name -> call paths."""
    by_kernel: dict[str, list[str]] = {}
    if not kinds:
        return by_kernel
    # kernel -> (its ops' paths among the user's groups, the library calls they sit in)
    scopes: dict[str, tuple[list[str], list[str]]] = {}
    for fusion in info.fusions:
        fusion.functions = fusion_functions(fusion.op_names, kinds)
        fusion.modules = strip_calls(fusion.modules, kinds)
        if fusion.functions:
            by_kernel[fusion.name] = fusion.functions
        scopes[fusion.name] = fusion_scopes(fusion.op_names, kinds)
    for instr in info.kernels:
        if instr.name not in by_kernel and instr.op_name:
            found = fusion_functions([instr.op_name], kinds)
            if found:
                by_kernel[instr.name] = found
        if instr.name not in scopes and instr.op_name:
            scopes[instr.name] = fusion_scopes([instr.op_name], kinds)
    for name, paths in list(info.modules.items()):
        stripped = strip_calls(paths, kinds)
        if stripped:
            info.modules[name] = stripped
        else:
            del info.modules[name]
    for node in info.graph.nodes:
        if node.path:
            node.path = "/".join(p for p in node.path.split("/") if p not in kinds)
        if node.label in by_kernel and node.kind in ("op", "fusion"):
            node.extra["calls"] = list(by_kernel[node.label])
        if node.label in scopes and node.kind in ("op", "fusion") and scopes[node.label][0]:
            # the view's groups for kernels: the user's calls and modules, as they nest
            node.extra["scopes"], lib = scopes[node.label]
            if lib:
                node.extra["lib"] = lib
    return by_kernel


def functions_of(analysis: Any, kernel: str) -> list[str]:
    """Call paths (``loss#1/block#3``) of kernel ``kernel``'s ops, sorted (empty when none)."""
    return list(getattr(analysis, "kernel_functions", {}).get(kernel, []))
