"""Before a ``%%compile`` binds under multi-controller JAX, the processes agree on the program.

Every process writes its program's fingerprint to ``jax.distributed``'s own key-value store
and reads every other process's, bounded by :func:`~nbcompile.processes.process_timeout`.
A fingerprint is the SHA-256 of the StableHLO text without locations plus one digest per cell
line (the equations traced at that line: primitive, parameters, types), so where programs
differ every process names the same processes and the first cell line whose program differs
(``NBC800``) before anything runs — a rank-dependent program would otherwise hang at its first
collective. A process that died or runs other code is named after the timeout (``NBC801``).
What another process sent is checked against a versioned schema (``_schema``): anything else
(another nbcompile version, any bytes) is refused on every process (``NBC804``).
Keys live under a per-compile namespace (the cell and its options, and how many times this
process compiled them), so a re-run never reads an earlier run's keys.
"""

from __future__ import annotations

import hashlib
import re
import socket
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jax

from .. import _compat
from ..analysis.lines import Locator
from ..analysis.namestack import shown
from ..capture.source import SourceInfo
from ..errors import TargetError
from . import _schema
from ._cluster import process_timeout

__all__ = ["ProcessInfo", "agree", "fingerprint", "profile_space", "program_devices"]

_ROUNDS: dict[str, int] = {}  # namespace seed -> compiles of it in this process
#: compilation -> [its agreed namespace, how many times this process profiled it]
_SPACES: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class ProcessInfo:
    """One JAX process that compiled the program."""

    index: int
    host: str
    devices: tuple[str, ...]
    fingerprint: str

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "host": self.host,
            "devices": list(self.devices),
            "fingerprint": self.fingerprint,
        }


def _sub_jaxprs(value: Any) -> Iterator[Any]:
    if isinstance(value, tuple | list):
        for item in value:
            yield from _sub_jaxprs(item)
    elif hasattr(value, "eqns"):
        yield value
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):
        yield value.jaxpr


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _param_text(value: Any) -> str:
    """A parameter as text that is the same in every process: no object addresses (a function
    JAX keeps as a parameter), sets in sorted order (string hashes differ per process)."""
    if isinstance(value, set | frozenset):
        value = sorted(value, key=repr)
    return _ADDRESS.sub("", repr(value))


def _atom_text(atom: Any) -> str:
    """A literal's value and type (``2.0:f32[]``), a variable's type."""
    return str(atom) if hasattr(atom, "val") else str(atom.aval)  # a Literal has its value


def _line_digests(jaxpr: Any, locator: Locator, out: dict[str, Any]) -> None:
    for eqn in jaxpr.eqns:
        subs = [j for v in eqn.params.values() for j in _sub_jaxprs(v)]
        plain = [
            f"{k}={_param_text(v)}"
            for k, v in sorted(eqn.params.items())
            if not list(_sub_jaxprs(v))
        ]
        text = " ".join(
            [
                eqn.primitive.name,
                *plain,
                *(_atom_text(v) for v in eqn.invars),
                "->",
                *(str(v.aval) for v in eqn.outvars),
            ]
        )
        location, visible = locator.of_traceback(eqn.source_info.traceback)
        label = (
            f"line {visible}"
            if visible is not None
            else f"{location.file}:{location.line}"
            if location is not None
            else "outside your code"
        )
        entry = out.setdefault(label, [visible, hashlib.sha256()])
        entry[1].update(text.encode())
        for sub in subs:
            _line_digests(sub, locator, out)


def fingerprint(stages: Any, source: SourceInfo) -> dict[str, Any]:
    """``digest`` (SHA-256 of the StableHLO without locations) and ``lines`` (label →
    [visible cell line or None, digest of what that line traced])."""
    digest = hashlib.sha256(stages.lowered.as_text().encode()).hexdigest()
    per_line: dict[str, Any] = {}
    _line_digests(stages.closed_jaxpr.jaxpr, Locator(source), per_line)
    lines = {k: [v[0], v[1].hexdigest()[:16]] for k, v in per_line.items()}
    return {"digest": digest, "lines": lines}


def program_devices(comp: Any) -> list[Any]:
    """The compiled program's devices, partition ``i`` on the ``i``-th ([] where unknown)."""
    return _compat.partition_devices(comp.compiled) or []


def profile_space(comp: Any) -> str | None:
    """A fresh key namespace for one more profile of ``comp`` (under the one its processes
    agreed on: every process profiles the same compile the same number of times); None where
    ``comp`` was not agreed on across processes."""
    entry = _SPACES.get(comp)
    if entry is None:
        return None
    entry[1] += 1
    return f"{entry[0]}/profile/{entry[1]}"


def _tag(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


def _exchange(
    client: Any,
    space: str,
    mine: bytes,
    n: int,
    timeout: float,
    what: str = "this %%compile",
) -> list[bytes]:
    """Write ``mine`` for this process and read every process's bytes back from the store,
    this one's too (unchecked: see ``_schema``): every process then checks the same ``n``
    values, whatever came between a process and the store."""
    me = jax.process_index()
    try:
        client.key_value_set_bytes(f"{space}/{me}", mine, allow_overwrite=True)
    except jax.errors.JaxRuntimeError as exc:
        raise TargetError(
            "the JAX processes' key-value store (jax.distributed's coordinator, on process 0) "
            "does not answer: process 0 died or was shut down",
            code="NBC801",
            hint="restart the engines (nbcompile.cluster) and run the cells again",
        ) from exc
    deadline = time.monotonic() + timeout
    got: list[bytes | None] = [None] * n
    for other in [me, *(i for i in range(n) if i != me)]:
        left = max(int((deadline - time.monotonic()) * 1000), 1)
        try:
            got[other] = client.blocking_key_value_get_bytes(f"{space}/{other}", left)
        except jax.errors.JaxRuntimeError:
            break  # past the deadline (or the store is gone): the missing ones are named below
    missing = [i for i in range(n) if got[i] is None]
    if missing:
        names = ", ".join(f"process {i}" for i in missing)
        raise TargetError(
            f"{names} did not reach {what} within {timeout:g} s "
            f"(of {n} processes): it died, is still busy, or runs other code",
            code="NBC801",
            hint="run the cell on every process (%%px), check the engines (rc.ids), or "
            "raise the wait with $NBCOMPILE_PROCESS_TIMEOUT (seconds)",
        )
    return [g for g in got if g is not None]


def _first_difference(ref: dict[str, Any], other: dict[str, Any]) -> Any:
    labels = set(ref["lines"]) | set(other["lines"])
    differing = [label for label in labels if ref["lines"].get(label) != other["lines"].get(label)]
    if not differing:
        return None, None

    def order(label: str) -> tuple[int, int, str]:
        line = (ref["lines"].get(label) or other["lines"].get(label))[0]
        return (line is None, line or 0, label)

    first = min(differing, key=order)
    line = (ref["lines"].get(first) or other["lines"].get(first))[0]
    return first, line


def _check_same(source: SourceInfo, payloads: list[dict[str, Any]]) -> None:
    ref = payloads[0]
    differ = [i for i, p in enumerate(payloads) if p["digest"] != ref["digest"]]
    if not differ:
        return
    label, line = _first_difference(ref, payloads[differ[0]])
    who = ", ".join(f"process {i}" for i in differ)
    verb = "compiles" if len(differ) == 1 else "compile"
    where = (
        f" from {shown(label)}" + (f" (`{source.line_text(line).strip()}`)" if line else "")
        if label
        else " (not at one cell line: constants, shardings or options)"
    )
    raise TargetError(
        f"the processes compiled different programs: {who} {verb} another program than "
        f"process 0{where}; running it would hang at its first collective",
        code="NBC800",
        line=line,
        hint="every process must trace the same program: do not branch on "
        "jax.process_index() or on process-local values inside the function",
    )


def agree(comp: Any, source: SourceInfo, *, seed: str, freeze: Any = None) -> bool:
    """Compare this program with every other JAX process's (see the module docstring) and
    record the processes on ``comp``; False (nothing done) with one process. ``freeze``: the
    cell's ``--freeze`` path, refused for a program across processes."""
    n = jax.process_count()
    client = _compat.distributed_client()
    if n <= 1 or client is None:
        return False
    me = jax.process_index()
    devices = program_devices(comp)
    mine_devices = [d for d in devices if d.process_index == me] or jax.local_devices()
    timeout = process_timeout()
    mine = {
        **fingerprint(comp.stages, source),
        "host": socket.gethostname(),
        "devices": [f"{d.platform}:{d.id}" for d in mine_devices],
    }
    sent = _schema.encode("fingerprint", mine)
    tag = _tag(seed)
    _ROUNDS[tag] = _ROUNDS.get(tag, 0) + 1
    space = f"nbcompile/compile/{tag}/{_ROUNDS[tag]}"
    try:
        raw = _exchange(client, space, sent, n, timeout)
    except TargetError:
        # the others did not come (most often: the cell failed there before this point, so
        # their count of it did not move): the next run of the cell uses this round again
        _ROUNDS[tag] -= 1
        raise
    # every process checks the same n values (its own as it wrote it): the same verdict
    # everywhere, and none binds while another refuses (NBC804)
    payloads, unreadable = _schema.read_all(raw, "fingerprint")
    if unreadable:
        raise _schema.refusal(unreadable, "fingerprints")
    _check_same(source, payloads)
    if freeze and len({d.process_index for d in devices}) > 1:
        raise TargetError(
            "--freeze: this program is sharded across processes; a .nbc file holds a "
            "program for one process's devices",
            code="NBC802",
            hint="freeze on one process with its own devices (a mesh of jax.local_devices()),"
            " or save the sharded weights with a checkpointing library",
        )
    _SPACES[comp] = [space, 0]
    comp.record_processes(
        [
            ProcessInfo(i, p["host"], tuple(p["devices"]), p["digest"])
            for i, p in enumerate(payloads)
        ]
    )
    return True
