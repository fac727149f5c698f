"""XLA's cost and memory analyses run in a thread of their own, beside the Python reading of
the compiled program (they are C++ that lets go of the GIL: ~65 ms of a 12-layer model's
analysis, measured): the figures are XLA's all the same, and an error in them reaches the
caller."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import pytest

import nbcompile
from nbcompile.analysis.cost import normalise_memory


def _model(w, x):
    return jnp.tanh(x @ w).sum()


def _fresh(n: int):
    """A program no earlier test analysed (an analysis is memoised by its program)."""
    w, x = jnp.ones((16, n)), jnp.ones((4, 16))
    return nbcompile.compile(lambda w, x: _model(w, x) * 1.0, w, x)


def test_cost_and_memory_are_asked_in_another_thread_and_are_xlas(monkeypatch):
    asked: dict[str, int] = {}
    compiled_type = jax.stages.Compiled
    memory, cost = compiled_type.memory_analysis, compiled_type.cost_analysis

    def memory_analysis(self):
        asked["memory"] = threading.get_ident()
        return memory(self)

    def cost_analysis(self):
        asked["cost"] = threading.get_ident()
        return cost(self)

    monkeypatch.setattr(compiled_type, "memory_analysis", memory_analysis)
    monkeypatch.setattr(compiled_type, "cost_analysis", cost_analysis)
    c = _fresh(17)
    analysis = c.analysis
    here = threading.get_ident()
    assert asked.keys() == {"memory", "cost"}
    assert asked["memory"] != here and asked["cost"] != here
    assert analysis.memory == normalise_memory(memory(c.compiled))
    assert analysis.cost["flops"] == pytest.approx(cost(c.compiled)["flops"])
    assert analysis.timings["analyse.xla_beside"] > 0


def test_an_error_in_xlas_analyses_reaches_the_caller(monkeypatch):
    def broken(self):
        raise RuntimeError("memory analysis broke")

    monkeypatch.setattr(jax.stages.Compiled, "memory_analysis", broken)
    c = _fresh(19)
    with pytest.raises(RuntimeError, match="memory analysis broke"):
        c.analysis  # noqa: B018
    assert not any(t.name == "nbcompile-xla-figures" for t in threading.enumerate())
