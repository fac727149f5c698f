"""The check of what JAX processes exchange (``nbcompile/processes/_schema.py``), in one process
with many examples (the cross-process path, with a few, is ``tests/test_cluster_hostile.py``).

Properties: any bytes give a checked body or :class:`Unreadable` -- never another exception --
with a short one-line text; a body that passes is safe for what reads it (``_check_same`` raises
nothing but ``NBC800``, ``side_by_side`` builds its view); what this nbcompile sends passes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbcompile.capture.source import SourceInfo
from nbcompile.errors import NbcompileError
from nbcompile.processes import _schema
from nbcompile.processes._agree import _check_same
from nbcompile.processes._profiles import side_by_side

SETTINGS = settings(
    max_examples=1500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

FINGERPRINT = {
    "digest": "ab" * 32,
    "lines": {"line 3": [3, "00ff"], "line 4": [4, "11ee"], "outside your code": [None, "22"]},
    "host": "host-0",
    "devices": ["cpu:0"],
}
PROFILE = {
    "calls": 10,
    "step": 0.01,
    "kernels": {"fusion": ["fusion", 0.004], "all-reduce": ["all-reduce", 0.006]},
    "own": 0.004,
    "collective": 0.006,
}
SOURCE = SourceInfo(
    filename="<cell>", text="%%compile\ndef f(x):\n    x = g(x)\n    return x\nf(x)"
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["line 3", "fusion", "ab" * 32]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=16,
)


USED: list[str] = []  # the kinds of the checked bodies used (a property that is not empty)


def _check_text(err: _schema.Unreadable) -> None:
    text = _schema.describe([(1, err)], "fingerprints")
    assert "\n" not in text and len(text) < 1000, text
    assert "process 1 sent" in text


def _decode(raw: bytes, kind: str) -> Any:
    try:
        return _schema.decode(raw, kind)
    except _schema.Unreadable as err:
        _check_text(err)
        return None


def _use(kind: str, body: dict[str, Any]) -> None:
    """What reads a checked body: no exception but NBC800."""
    if kind == "fingerprint":
        try:
            _check_same(SOURCE, [FINGERPRINT, body])
            _check_same(SOURCE, [body, FINGERPRINT, body])
        except NbcompileError as err:
            assert err.code == "NBC800"
        USED.append(kind)
    else:
        for pair in ([PROFILE, body], [body, body]):
            view = side_by_side(pair, ["a", "b"], {"all-reduce"})
            view.text()
            json.dumps(view.to_json())
            USED.append(kind)


@SETTINGS
@given(st.binary(max_size=400), st.sampled_from(["fingerprint", "profile"]))
def test_any_bytes_give_a_checked_body_or_unreadable(raw: bytes, kind: str) -> None:
    body = _decode(raw, kind)
    if body is not None:
        _use(kind, body)


@SETTINGS
@given(JSON, st.sampled_from(["fingerprint", "profile"]), st.booleans())
def test_any_json_in_the_envelope_or_without(value: Any, kind: str, wrapped: bool) -> None:
    if wrapped:
        value = {"nbcompile_exchange": 1, "nbcompile": "9.9.9", "kind": kind, "body": value}
    body = _decode(json.dumps(value).encode(), kind)
    if body is not None:
        _use(kind, body)


def _like(value: Any) -> st.SearchStrategy[Any]:
    """Values of the same JSON type as ``value`` (a changed payload that may still fit)."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers() | st.none()
    if isinstance(value, float):
        return st.floats(allow_nan=False, allow_infinity=False) | st.integers()
    if isinstance(value, str):
        return st.text(max_size=70) | st.sampled_from(["ab" * 32, "fingerprint", "profile"])
    if isinstance(value, list):
        return st.lists(JSON, min_size=len(value), max_size=len(value)) | st.just([])
    return st.dictionaries(st.text(max_size=8), JSON, max_size=3) | st.just({})


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for k, v in enumerate(value):
            out += _paths(v, (*path, k))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    return [_replace(v, rest, new) if k == head else v for k, v in enumerate(value)]


def _drop(value: Any, path: tuple[Any, ...]) -> Any:
    head, rest = path[0], path[1:]
    if rest:
        inner = _drop(value[head], rest)
        return (
            {**value, head: inner} if isinstance(value, dict) else _replace(value, (head,), inner)
        )
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != head}
    return [v for k, v in enumerate(value) if k != head]


@SETTINGS
@given(st.data(), st.sampled_from(["fingerprint", "profile"]))
def _changed_anywhere(data: Any, kind: str) -> None:
    sent = json.loads(_schema.encode(kind, FINGERPRINT if kind == "fingerprint" else PROFILE))
    path = data.draw(st.sampled_from(_paths(sent)))
    how = data.draw(st.sampled_from(["replace", "drop", "add"]))
    if how == "replace":
        here: Any = sent
        for k in path:
            here = here[k]
        changed = _replace(sent, path, data.draw(_like(here) | JSON))
    elif how == "drop" and path:
        changed = _drop(sent, path)
    else:
        target = data.draw(st.sampled_from([p for p in _paths(sent) if p == ()] + [path]))
        here = sent
        for k in target:
            here = here[k]
        if not isinstance(here, dict):
            return
        changed = _replace(sent, target, {**here, data.draw(st.text(max_size=8)): data.draw(JSON)})
    body = _decode(json.dumps(changed).encode(), kind)
    if body is not None:
        _use(kind, body)


def test_a_valid_payload_changed_anywhere_is_checked() -> None:
    """One value replaced, dropped or added anywhere in a payload this nbcompile sends; a
    changed payload that still fits is used (often enough that the property is not empty)."""
    USED.clear()
    _changed_anywhere()
    assert USED.count("fingerprint") > 20 and USED.count("profile") > 20, len(USED)


@pytest.mark.parametrize("kind", ["fingerprint", "profile"])
def test_what_this_nbcompile_sends_passes(kind: str) -> None:
    body = FINGERPRINT if kind == "fingerprint" else PROFILE
    assert _schema.decode(_schema.encode(kind, body), kind) == body


def test_a_profile_that_measured_nan_is_refused_by_name_not_a_raw_error() -> None:
    raw = _schema.encode("profile", {**PROFILE, "step": math.nan})
    with pytest.raises(_schema.Unreadable) as err:
        _schema.decode(raw, "profile")
    assert "body.step is null, not a number" in err.value.problem


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\xff\x00garbage{", "not UTF-8 text"),
        (b"[1, 2]", "a list where an object was due"),
        (b"NaN", "not JSON"),
        (b"[" * 100_000, "not JSON"),  # nested past the recursion limit
        (b"1" * 5_000, "not JSON"),  # past Python's digits limit
        (b" " * (_schema.MAX_BYTES + 1), "at most"),
        (json.dumps(FINGERPRINT).encode(), "without an exchange schema"),
        (json.dumps({"nbcompile_exchange": True}).encode(), "another exchange schema"),
    ],
)
def test_named_refusals(raw: bytes, expected: str) -> None:
    with pytest.raises(_schema.Unreadable) as err:
        _schema.decode(raw, "fingerprint")
    assert expected in err.value.problem
    refusal = _schema.refusal([(1, err.value)], "fingerprints")
    assert refusal.code == "NBC804" and refusal.hint and "process 1 sent" in str(refusal)


def test_the_version_sent_is_named_and_cut() -> None:
    sent = {"nbcompile_exchange": 2, "nbcompile": "9.9.9", "kind": "fingerprint", "body": {}}
    with pytest.raises(_schema.Unreadable) as err:
        _schema.decode(json.dumps(sent).encode(), "fingerprint")
    text = _schema.describe([(1, err.value)], "fingerprints")
    assert "it runs nbcompile 9.9.9, exchange schema 2" in text
    sent["nbcompile"] = "<script>\n" + "x" * 10_000
    with pytest.raises(_schema.Unreadable) as err:
        _schema.decode(json.dumps(sent).encode(), "fingerprint")
    assert err.value.version is not None and len(err.value.version) < 50
    assert "\n" not in err.value.version


def test_a_long_label_from_another_process_is_shown_cut() -> None:
    """A label fits the schema up to 65,536 characters; the NBC800 text shows it cut."""
    label = "/very/long/path/" + "d" * 60_000 + ".py:3"
    lines = {**FINGERPRINT["lines"], label: [None, "99"]}  # the only line that differs
    other = {**FINGERPRINT, "digest": "cd" * 32, "lines": lines}
    assert _schema.decode(_schema.encode("fingerprint", other), "fingerprint") == other
    with pytest.raises(NbcompileError) as err:
        _check_same(SOURCE, [FINGERPRINT, other])
    assert err.value.code == "NBC800" and len(str(err.value)) < 1000
    assert "60,021 chars" in str(err.value)
