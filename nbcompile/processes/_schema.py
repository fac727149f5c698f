"""What JAX processes send each other, and the check of everything another process sent.

Another process runs code this one does not control: another nbcompile version on another host,
or anything writing to ``jax.distributed``'s key-value store. So every value read from the store
is bytes, checked here against a versioned schema before anything uses it; what does not fit is
an :class:`Unreadable` naming what is wrong and the nbcompile version the sender gave, and the
processes refuse the cell (``NBC804``, :func:`refusal`).

Every process checks the same bytes -- the others' as read from the store and its own as it wrote
them -- with the same rules, so every process reaches the same verdict and the same text: none
binds while another refuses. The rules are strict (exact keys, exact schema) so that two
nbcompile versions that exchange different schemas both refuse; never one reads a payload
leniently while the other refuses it.

The envelope is permanent across versions::

    {"nbcompile_exchange": SCHEMA, "nbcompile": "<version>", "kind": "fingerprint", "body": {...}}

A new body shape means a new ``SCHEMA``. An nbcompile from before the envelope (its payload had
``digest`` / ``lines`` at the top) fails on this one's payload with a ``KeyError`` and binds
nothing; this one names it (no exchange schema).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..errors import TargetError

__all__ = [
    "MAX_BYTES",
    "SCHEMA",
    "Unreadable",
    "decode",
    "describe",
    "encode",
    "read_all",
    "refusal",
]

#: the version of what processes exchange (the envelope's ``nbcompile_exchange``)
SCHEMA = 1
#: the most bytes one exchanged value may have (a fingerprint is one digest per cell line)
MAX_BYTES = 16 << 20

_PLAIN = re.compile(r"[\w.+\-]{1,40}")  # a version shown as it is (else quoted, cut)
_NAME = 1 << 16  # the longest name (cell-line label, kernel, device, opcode) in characters
_MANY = 1 << 20  # the most entries in one list or map


class Unreadable(ValueError):
    """What one process sent does not fit the schema: ``problem`` (short, safe to show) and the
    nbcompile ``version`` and exchange ``schema`` it said it runs, as shown in a message (None
    where it said none)."""

    def __init__(self, problem: str, version: str | None = None, schema: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.version = version
        self.schema = schema


Check = Callable[[Any, str], None]


def _fail(where: str, what: str) -> Unreadable:
    return Unreadable(f"{where} {what}" if where else what)


def _kind_of(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return {dict: "an object", list: "a list", str: "a string"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def _text(limit: int) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, str):
            raise _fail(where, f"is {_kind_of(value)}, not a string")
        if len(value) > limit:
            raise _fail(where, f"is {len(value):,} characters long (at most {limit:,})")

    return check


def _hex(length: int) -> Check:
    def check(value: Any, where: str) -> None:
        _text(length)(value, where)
        if len(value) != length or value.strip("0123456789abcdef"):
            raise _fail(where, f"is not {length} hexadecimal digits")

    return check


def _int(low: int, high: int) -> Check:
    def check(value: Any, where: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(where, f"is {_kind_of(value)}, not a whole number")
        if not low <= value <= high:
            raise _fail(where, f"is out of range ({low} to {high})")

    return check


def _seconds(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, f"is {_kind_of(value)}, not a number")
    if not math.isfinite(value) or abs(value) > 1e9:
        raise _fail(where, "is not a finite number of seconds")


def _optional(inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if value is not None:
            inner(value, where)

    return check


def _pair(first: Check, second: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list) or len(value) != 2:
            raise _fail(where, f"is {_kind_of(value)}, not a pair")
        first(value[0], f"{where}[0]")
        second(value[1], f"{where}[1]")

    return check


def _list(item: Check, most: int = _MANY) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise _fail(where, f"is {_kind_of(value)}, not a list")
        if len(value) > most:
            raise _fail(where, f"has {len(value):,} entries (at most {most:,})")
        for k, v in enumerate(value):
            item(v, f"{where}[{k}]")

    return check


def _map(value_check: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _fail(where, f"is {_kind_of(value)}, not an object")
        if len(value) > _MANY:
            raise _fail(where, f"has {len(value):,} entries (at most {_MANY:,})")
        for k, v in value.items():
            if len(k) > _NAME:
                raise _fail(where, f"has a key {len(k):,} characters long (at most {_NAME:,})")
            value_check(v, f"{where}[{_shown(k, 40)}]")

    return check


def _object(fields: dict[str, Check]) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _fail(where, f"is {_kind_of(value)}, not an object")
        missing = [k for k in fields if k not in value]
        if missing:
            raise _fail(where, f"has no {', '.join(repr(k) for k in missing)}")
        extra = sorted(k for k in value if k not in fields)
        if extra:
            names = ", ".join(_shown(k, 40) for k in extra[:3])
            raise _fail(where, f"has keys this schema does not know: {names}")
        for k, inner in fields.items():
            inner(value[k], f"{where}.{k}" if where else k)

    return check


#: kind -> the body's rules (schema 1)
BODIES: dict[str, Check] = {
    # _agree.fingerprint + the sender's host and devices
    "fingerprint": _object(
        {
            "digest": _hex(64),
            "lines": _map(_pair(_optional(_int(1, 10**9)), _text(64))),
            "host": _text(255),
            "devices": _list(_text(64), 1 << 16),  # "cpu:0", "tpu:123"
        }
    ),
    # _profiles._summary: medians of one process's --profile
    "profile": _object(
        {
            "calls": _int(0, 10**9),
            "step": _seconds,
            "kernels": _map(_pair(_text(_NAME), _seconds)),
            "own": _seconds,
            "collective": _seconds,
        }
    ),
}


_ENVELOPE = _object(
    {
        "nbcompile_exchange": lambda value, where: None,  # checked first, to name it
        "nbcompile": _text(_NAME),
        "kind": _text(40),
        "body": lambda value, where: None,  # by its kind's rules
    }
)


def _shown(text: str, limit: int) -> str:
    """``text`` quoted for a message: at most ``limit`` characters, escapes for anything not
    printable (a newline, a control character)."""
    cut = text[:limit]
    body = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in cut)
    return f"'{body}{'…' if len(text) > limit else ''}'"


def encode(kind: str, body: dict[str, Any]) -> bytes:
    """``body`` in the envelope, as this process sends it."""
    envelope = {"nbcompile_exchange": SCHEMA, "nbcompile": __version__, "kind": kind, "body": body}
    try:
        return json.dumps(envelope, allow_nan=False).encode()
    except ValueError:  # a NaN or infinity (a profile that measured nothing): sent as null,
        return json.dumps(_finite(envelope)).encode()  # which the others then refuse by name


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def decode(raw: Any, kind: str) -> dict[str, Any]:
    """The body of one exchanged value, checked; else :class:`Unreadable`."""
    if not isinstance(raw, bytes | bytearray):
        raise Unreadable(f"{_kind_of(raw)}, not bytes")
    if len(raw) > MAX_BYTES:
        raise Unreadable(f"{len(raw):,} bytes (at most {MAX_BYTES:,})")
    head = bytes(raw[:16])
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable(f"bytes that are not UTF-8 text (starting {head!r})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise Unreadable(f"bytes that are not JSON (starting {head!r})") from None
    if not isinstance(value, dict):
        raise Unreadable(f"{_kind_of(value)} where an object was due")
    version = value.get("nbcompile")
    if isinstance(version, str):
        version = version if _PLAIN.fullmatch(version) else _shown(version, 40)
    else:
        version = None
    if "nbcompile_exchange" not in value:
        raise Unreadable(f"a {kind} without an exchange schema, as older nbcompiles send", version)
    schema = value["nbcompile_exchange"]
    if isinstance(schema, int) and not isinstance(schema, bool) and abs(schema) < 10**6:
        said = str(schema)
    else:
        said = _shown(schema, 20) if isinstance(schema, str) else _kind_of(schema)
    if said != str(SCHEMA):
        raise Unreadable(f"a {kind} in another exchange schema", version, said)
    try:
        _ENVELOPE(value, "the envelope")
        if value["kind"] != kind:
            raise Unreadable(f"a {_shown(value['kind'], 20)} where a {kind} was due")
        BODIES[kind](value["body"], "its body")
    except Unreadable as err:
        problem = err.problem if err.problem.startswith("a ") else f"a {kind}: {err.problem}"
        raise Unreadable(problem, version, said) from None
    return value["body"]


def read_all(
    raw: list[Any], kind: str
) -> tuple[list[dict[str, Any]], list[tuple[int, Unreadable]]]:
    """Every process's body (None where unreadable) and the unreadable ones by process."""
    bodies: list[Any] = []
    bad: list[tuple[int, Unreadable]] = []
    for i, value in enumerate(raw):
        try:
            bodies.append(decode(value, kind))
        except Unreadable as err:
            bodies.append(None)
            bad.append((i, err))
    return bodies, bad


def describe(bad: list[tuple[int, Unreadable]], what: str) -> str:
    """What could not be read, from which process and the version it sent (the same text on
    every process: it depends on the bytes only)."""
    parts = []
    for i, err in bad:
        runs = f"it runs nbcompile {err.version}" if err.version else "it sent no version"
        if err.schema is not None:
            runs += f", exchange schema {err.schema}"
        parts.append(f"process {i} sent {err.problem} ({runs})")
    return (
        f"the processes cannot read each other's {what}: {'; '.join(parts)}; this nbcompile "
        f"{__version__} reads exchange schema {SCHEMA}"
    )


HINT = (
    f"install the same nbcompile ({__version__}) on every host, restart the engines, and run "
    "the cell again on every process (%%px)"
)


def refusal(bad: list[tuple[int, Unreadable]], what: str) -> TargetError:
    """``NBC804``: :func:`describe`, nothing bound or run."""
    return TargetError(f"{describe(bad, what)}; nothing was bound or run", code="NBC804", hint=HINT)
