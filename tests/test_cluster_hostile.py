"""What another JAX process sends is checked, never trusted (issue 41, item 3).

Two real engines of ``nbcompile.cluster(2)``; process 1 sends what another nbcompile version
(or anything writing to the key-value store) could send: on process 1, a client of
``jax.distributed`` put between nbcompile and the store changes what it writes for one exchange,
so the bytes both processes read are the hostile ones. Before the check: garbage bytes gave a
raw ``JSONDecodeError`` on process 0 while process 1 bound the program; a JSON list a
``TypeError``, missing keys a ``KeyError``, wrong types a ``TypeError``; a profile summary of
wrong types a ``ValueError``. Now every process refuses the cell with the same ``NBC804`` naming
process 1 and the version it sent, within 15 s, and no process binds; for ``--profile`` the
documented promise holds (a note on every process, ``c.profile.processes`` None, the profile
stands). A property test sends any bytes (hypothesis, a few examples: each is a compile on two
engines). One cluster for the file; its engines are gone after it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("ipyparallel")

import nbcompile
from nbcompile.processes import _schema
from tests.test_cluster import SETUP, WAIT, cluster, compile_everywhere, pull, px, stop

LIMIT = 15  # seconds for the refusal on every process (the processes' own wait is WAIT)

#: On process 1, what ``jax.distributed``'s client writes for an exchange of kind
#: ``_hostile_kind`` becomes ``_hostile(kind, body, sent)`` (``sent``: the value as nbcompile
#: wrote it, ``body`` what it carries): a client between nbcompile and the store, so the same
#: injection reaches any version of the exchange (the str API of nbcompile before the check too).
HOSTILE = """
import json as _json
import nbcompile._compat as _C
_real_client = getattr(_C, "_real_distributed_client", _C.distributed_client)
_C._real_distributed_client = _real_client


def _rewrap(sent, body):
    # a body in the sender's envelope (if it had one), as nbcompile 9.9.9 would send it
    if isinstance(sent, dict) and "nbcompile_exchange" in sent:
        return {**sent, "nbcompile": "9.9.9", "body": body}
    return body


class _HostileClient:
    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _swap(self, key, value):
        kind = "profile" if "/profile/" in key else "fingerprint"
        if jax.process_index() != 1 or kind != _hostile_kind or not key.startswith("nbcompile/"):
            return value
        sent = _json.loads(value)
        body = sent["body"] if isinstance(sent, dict) and "nbcompile_exchange" in sent else sent
        return _hostile(kind, body, sent)

    def key_value_set(self, key, value, allow_overwrite=False):
        new = self._swap(key, value.encode()).decode("utf-8", "replace")  # this API takes text
        return self._real.key_value_set(key, new, allow_overwrite=allow_overwrite)

    def key_value_set_bytes(self, key, value, allow_overwrite=False):
        new = self._swap(key, value)
        return self._real.key_value_set_bytes(key, new, allow_overwrite=allow_overwrite)


def _client():
    real = _real_client()
    return _HostileClient(real) if real is not None else None


_C.distributed_client = _client
"""

#: what process 1 sends in place of its fingerprint: case -> (source of _hostile, text expected)
FINGERPRINT_CASES = {
    "garbage bytes": ("lambda k, b, s: b'\\xff\\x00garbage{'", "not UTF-8 text"),
    "a JSON list": ("lambda k, b, s: b'[1, 2, 3]'", "a list where an object was due"),
    "missing keys": (
        "lambda k, b, s: _json.dumps(_rewrap(s, {'digest': b['digest']})).encode()",
        "has no 'lines', 'host', 'devices'",
    ),
    "wrong types": (
        "lambda k, b, s: _json.dumps(_rewrap(s, {**b, 'lines': "
        "{label: [str(v[0]), 7] for label, v in b['lines'].items()}})).encode()",
        "is a string, not a whole number",
    ),
    "an older nbcompile (no envelope)": (
        "lambda k, b, s: _json.dumps(b).encode()",
        "without an exchange schema",
    ),
    "a newer exchange schema": (
        "lambda k, b, s: _json.dumps({'nbcompile_exchange': 2, 'nbcompile': '9.9.9', "
        "'kind': k, 'body': [b]}).encode()",
        "in another exchange schema",
    ),
}


@pytest.fixture(scope="module")
def rc() -> Iterator[Any]:
    from IPython.terminal.interactiveshell import TerminalInteractiveShell

    TerminalInteractiveShell.instance()
    client = nbcompile.cluster(2, timeout=WAIT)
    pids: list[int] = []
    try:
        px(client, SETUP + "import os\n_hostile_kind = 'none'\n" + HOSTILE)
        pids = pull(client, "os.getpid()")
        yield client
    finally:
        stop(client)
    # no engine left running
    deadline = time.monotonic() + 15
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.2)
    assert not alive, f"engines still running: {alive}"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (ended, not yet reaped by its parent) is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _cell(name: str) -> str:
    return f"""
    def {name}(x):
        return (x**2).mean()

    {name}(batch)
    """


def _refused_everywhere(rc: Any, source: str, kind: str, name: str) -> list[Any]:
    """Process 1 sends ``source``'s bytes for its ``kind``; the outcomes of a %%compile of a
    fresh function ``name`` on both processes (asserting the bound on the time)."""
    rc[:].push({"_hostile_source": source, "_hostile_kind": kind}, block=True)
    px(rc, "_hostile = eval(_hostile_source)")
    try:
        start = time.monotonic()
        outcomes = compile_everywhere(rc, _cell(name), timeout=WAIT + 60)
        took = time.monotonic() - start
    finally:
        px(rc, "_hostile_kind = 'none'")
    assert took < LIMIT, (took, outcomes)
    return outcomes


def _assert_refused(rc: Any, outcomes: list[Any], name: str, expected: str) -> None:
    assert all(isinstance(o, dict) for o in outcomes), outcomes
    assert [o["code"] for o in outcomes] == ["NBC804", "NBC804"], outcomes
    assert outcomes[0]["text"] == outcomes[1]["text"]  # the same refusal on every process
    text = outcomes[0]["text"]
    assert "process 1 sent" in text and "process 0 sent" not in text, text
    assert expected in text, text
    assert "same nbcompile" in text  # the fix
    # no process binds the program
    bound = pull(rc, f"'{name}' in dir() and hasattr({name}, 'compilation')")
    assert bound == [False, False]


@cluster
@pytest.mark.parametrize("case", sorted(FINGERPRINT_CASES))
def test_an_unreadable_fingerprint_is_refused_on_every_process(rc: Any, case: str) -> None:
    source, expected = FINGERPRINT_CASES[case]
    name = "f_" + "".join(ch if ch.isalnum() else "_" for ch in case)
    outcomes = _refused_everywhere(rc, source, "fingerprint", name)
    _assert_refused(rc, outcomes, name, expected)
    if case != "garbage bytes" and case != "a JSON list":
        assert "nbcompile 9.9.9" in outcomes[0]["text"] or "older nbcompiles" in outcomes[0]["text"]
    # the processes still work together afterwards
    assert compile_everywhere(rc, _cell(name + "_again")) == ["ok", "ok"]


PROFILE_WRONG_TYPES = (
    "lambda k, b, s: _json.dumps(_rewrap(s, {**b, 'kernels': "
    "{name: [opcode, 'fast'] for name, (opcode, _) in b['kernels'].items()}})).encode()"
)


@cluster
def test_an_unreadable_profile_summary_leaves_a_note_on_every_process(rc: Any) -> None:
    """The documented promise: the program is bound and profiled on every process;
    ``c.profile.processes`` is None and the same NBC804 note is on every process."""
    rc[:].push({"_hostile_source": PROFILE_WRONG_TYPES, "_hostile_kind": "profile"}, block=True)
    px(rc, "_hostile = eval(_hostile_source)")
    try:
        cell = _cell("profiled")
        outcomes = compile_everywhere(rc, cell, line="--profile 3", timeout=WAIT + 120)
    finally:
        px(rc, "_hostile_kind = 'none'")
    assert outcomes == ["ok", "ok"], outcomes
    assert pull(rc, "nbcompile.last().profile.processes is None") == [True, True]
    notes = pull(rc, "[n for n in nbcompile.last().profile.notes if 'NBC804' in n]")
    assert len(notes[0]) == 1 and notes[0] == notes[1], notes
    assert "process 1 sent a profile" in notes[0][0] and "is a string, not a number" in notes[0][0]
    assert "nbcompile 9.9.9" in notes[0][0]  # the version process 1 sent
    assert pull(rc, "nbcompile.last().profile.kernels != []") == [True, True]  # it stands
    assert pull(rc, "hasattr(profiled, 'compilation')") == [True, True]


#: any bytes, text, JSON, and JSON in the envelope (each example: a compile on two engines)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_ANY_BYTES = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=100).map(str.encode),
    _JSON.map(lambda v: json.dumps(v).encode()),
    _JSON.map(
        lambda v: json.dumps(
            {"nbcompile_exchange": 1, "nbcompile": "9.9.9", "kind": "fingerprint", "body": v}
        ).encode()
    ),
)


@cluster
@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=_ANY_BYTES)
def test_any_bytes_from_another_process_are_refused_on_every_process(rc: Any, data: bytes) -> None:
    try:
        _schema.decode(data, "fingerprint")
    except _schema.Unreadable:
        pass
    else:  # (never seen) bytes that are a fingerprint are no refusal
        assume(False)
    name = f"any_{data.hex()[:16] or 'empty'}"
    source = f"lambda k, b, s: {data!r}"
    _assert_refused(rc, _refused_everywhere(rc, source, "fingerprint", name), name, "sent")


@cluster
def test_a_100kb_scope_name_across_processes_is_shown_cut(rc: Any) -> None:
    """Issue 41 item 1 under two processes: the collective's op_name carries the scope; the
    fingerprints agree, the program binds, and process 0's view shows the name cut."""
    cell = """
    def long_scope(x):
        with jax.named_scope("a" * 100_000):
            return (x**2).mean()

    long_scope(batch)
    """
    assert compile_everywhere(rc, cell, timeout=WAIT + 120) == ["ok", "ok"]
    views = pull(rc, "repr(nbcompile.last())")
    assert "crosses processes 0, 1" in views[0]
    assert "100,000 chars" in views[0] and "a" * 500 not in views[0]
