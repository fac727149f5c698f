"""diff(): an edited line or a changed shape shows up; an identical program shows nothing.

The "cell" is written to a file twice (before / after an edit), as a notebook re-run would
compile it, so visible line numbers line up between the two versions.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from nbcompile.analysis import analyse, diff

from .helpers import make_artifacts

CELL = """import jax.numpy as jnp

def f(x):
    h = x * 2.0
    h = jnp.tanh(h)
    return jnp.sum(h)
"""


def _cell(tmp_path, text, tag):
    path = tmp_path / f"cell_{tag}.py"
    path.write_text(text)
    namespace = {}
    exec(compile(text, str(path), "exec"), namespace)
    return namespace["f"], str(path)


def _analyse(tmp_path, text, tag, shape=(4, 4)):
    fn, path = _cell(tmp_path, text, tag)
    return analyse(make_artifacts(fn, jnp.ones(shape), source_file=path, name="f"))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _analyse(tmp_path_factory.mktemp("base"), CELL, "base")


def test_same_program_no_changes(base, tmp_path):
    d = diff(base, _analyse(tmp_path, CELL, "same"))
    assert not d.changed and d.text() == "no changes"


def test_changed_line_shows_up(base, tmp_path):
    d = diff(base, _analyse(tmp_path, CELL.replace("jnp.tanh(h)", "jnp.sin(h)"), "edit"))
    assert d.changed
    assert [o["op"] for o in d.ops_removed] == ["tanh"]
    assert [o["op"] for o in d.ops_added] == ["sin"]
    assert {o["line"] for o in d.ops_added + d.ops_removed} == {5}
    assert 5 in d.lines and d.fusions_added and d.fusions_removed
    assert "+ op sin" in d.text() and "- op tanh" in d.text()
    assert d.signature is None


def test_changed_shape_shows_up(base, tmp_path):
    d = diff(base, _analyse(tmp_path, CELL, "shape", shape=(8, 4)))
    assert d.signature == {"before": "f32[4,4] -> f32[]", "after": "f32[8,4] -> f32[]"}
    assert d.cost["flops"]["after"] > d.cost["flops"]["before"]
    assert d.to_json()["signature"] == d.signature
