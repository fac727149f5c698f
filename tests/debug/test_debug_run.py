"""debug_run(): op-by-op replay, summaries for every equation, stop at the first NaN."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from nbcompile.capture.source import SourceInfo
from nbcompile.debug import debug_run, equation_ids
from nbcompile.measure._hlo import entry_kernels

SOURCE = SourceInfo(filename=__file__, text=Path(__file__).read_text())
RTOL, ATOL = 1e-5, 1e-6  # float32, op by op vs XLA's fused kernels


def line_of(text: str) -> int:
    """The file line holding ``text`` (the tests treat this file as the notebook cell)."""
    return next(i for i, line in enumerate(SOURCE.lines, 1) if text in line)


def overflow(a):
    x = jnp.exp(a * 1000.0)
    y = x - x  # inf - inf
    return y.sum()


def healthy(w, xs):
    @jax.jit
    def layer(h):
        return jnp.tanh(h @ w)  # fused with the scale below

    def step(c, x):
        h = layer(c + x)
        return h, jax.nn.relu(h).sum()

    c, ys = lax.scan(step, jnp.zeros(xs.shape[1]), xs)
    z = lax.cond(ys.sum() > 0, lambda v: v * 2.0, lambda v: v - 1.0, c)
    z = jax.checkpoint(lambda v: jnp.sin(v) * 0.5)(z)
    return z * 3.0 + 1.0, ys


def _healthy_args():
    k1, k2 = jax.random.split(jax.random.key(1))
    return jax.random.normal(k1, (8, 8)) * 0.5, jax.random.normal(k2, (5, 8))


def test_stops_at_inf_minus_inf():
    a = jnp.ones(4, jnp.float32)
    d = debug_run(jax.make_jaxpr(overflow)(a), (a,), source=SOURCE)
    assert d.stopped and d.outputs is None
    at = d.nan_at
    assert at["primitive"] == "sub" and at["kind"] == "nan"
    assert at["line"] == line_of("y = x - x  # inf - inf")
    assert "x - x" in at["code"]
    assert [s["inf"] for s in at["inputs"]] == [4, 4]
    assert at["outputs"][0]["nan"] == 4
    # the Inf that caused it is traced back to the exp
    assert d.first_inf["primitive"] == "exp"
    assert d.first_inf["line"] == line_of("x = jnp.exp(a * 1000.0)")
    # nothing after the stop ran
    assert list(d.summaries)[-1] == at["id"]
    err = d.error()
    assert err.code == "NBC700" and err.line == at["line"]
    assert "sub" in d.text() and f"line {at['line']}" in d.text()
    json.dumps(d.to_json())


def test_stop_on_inf_stops_at_the_overflow():
    a = jnp.ones(4, jnp.float32)
    d = debug_run(jax.make_jaxpr(overflow)(a), (a,), source=SOURCE, stop_on="nan_inf")
    assert d.nan_at["primitive"] == "exp" and d.nan_at["kind"] == "inf"


def test_nan_inside_a_loop_names_the_iteration():
    def logs(xs):
        return lax.scan(lambda c, x: (c + jnp.log(x), None), 0.0, xs)[0]

    xs = jnp.array([1.0, 2.0, -1.0, 3.0], jnp.float32)
    d = debug_run(jax.make_jaxpr(logs)(xs), (xs,), source=SOURCE)
    assert d.nan_at["primitive"] == "log"
    assert d.nan_at["iteration"] == [2]
    assert d.nan_at["line"] == line_of("c + jnp.log(x)")
    assert "/body/" in d.nan_at["id"]


def test_healthy_model_every_equation_summarised_and_output_matches_jit():
    w, xs = _healthy_args()
    closed = jax.make_jaxpr(healthy)(w, xs)
    d = debug_run(closed, (w, xs), source=SOURCE)
    assert not d.stopped and d.nan_at is None and d.notes == []

    expected = jax.jit(healthy)(w, xs)
    for got, want in zip(d.outputs, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)

    # every equation has a summary, except those of the cond branch that was not taken
    ids = [nid for nid, _ in equation_ids(closed)]
    taken = [nid for nid, s in d.summaries.items() if "/branch" in nid]
    assert taken, "the cond's taken branch was descended into"
    untaken = "/branch0/" if "/branch1/" in taken[0] else "/branch1/"
    assert set(d.summaries) == {nid for nid in ids if untaken not in nid}
    for s in d.summaries.values():
        assert s["outputs"] and all(o["nan"] == 0 and o["inf"] == 0 for o in s["outputs"])
        assert all(len(o["hist"]["counts"]) == 8 for o in s["outputs"] if o["size"] and o["hist"])
    # loop bodies ran once per scan step (xs has 5 rows)
    tanh_ids = [nid for nid, s in d.summaries.items() if s["primitive"] == "tanh"]
    assert len(tanh_ids) == 1 and "/body/" in tanh_ids[0]
    assert d.summaries[tanh_ids[0]]["evaluations"] == 5
    assert d.summaries[tanh_ids[0]]["line"] == line_of("return jnp.tanh(h @ w)")
    json.loads(json.dumps(d.to_json()))


def test_fused_away_intermediate_is_recomputed_on_demand():
    def model(w, x):
        h = jnp.tanh(x @ w)
        return h * 3.0 + 1.0

    w, xs = _healthy_args()
    x = xs[:2]
    closed = jax.make_jaxpr(model)(w, x)
    hlo = jax.jit(model).lower(w, x).compile().as_text()
    # XLA fused the tanh away: no kernel of the compiled program produces it
    assert "tanh" not in {op for _, op in entry_kernels(hlo)}
    assert " tanh(" in hlo  # it lives inside a fusion body

    d = debug_run(closed, (w, x))
    assert d._values is None  # only summaries are kept by default
    (tanh_id,) = [nid for nid, s in d.summaries.items() if s["primitive"] == "tanh"]
    value = d.value(tanh_id)
    np.testing.assert_allclose(value, jnp.tanh(x @ w), rtol=RTOL, atol=ATOL)
    summary = d.summaries[tanh_id]["outputs"][0]
    assert summary["min"] == pytest.approx(float(np.min(value)))
    assert summary["max"] == pytest.approx(float(np.max(value)))

    kept = debug_run(closed, (w, x), keep_values=True)
    np.testing.assert_array_equal(kept.value(tanh_id), value)


def test_value_of_a_loop_step():
    w, xs = _healthy_args()
    d = debug_run(jax.make_jaxpr(healthy)(w, xs), (w, xs))
    (add_id,) = [
        nid for nid, s in d.summaries.items() if s["primitive"] == "add" and nid.count("/") == 2
    ][:1]
    # carry + x at step 0 is just xs[0] (the carry starts at zero)
    np.testing.assert_allclose(d.value(add_id, iteration=[0]), xs[0], rtol=RTOL)
    with pytest.raises(KeyError):
        d.value("e999")


def test_rejects_wrong_arguments():
    a = jnp.ones(4, jnp.float32)
    closed = jax.make_jaxpr(overflow)(a)
    with pytest.raises(ValueError, match="stop_on"):
        debug_run(closed, (a,), stop_on="sometimes")
    with pytest.raises(ValueError, match="1 array inputs"):
        debug_run(closed, (a, a))
