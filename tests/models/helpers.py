"""Checks shared by the per-library adapter tests."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

from nbcompile.capture.models import Adapted, module_paths

#: a constant with at least this many elements counts as a baked-in weight
LARGE = 16


def assert_trees_close(a: Any, b: Any, *, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b) and leaves_a
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def large_consts(closed: Any) -> list[tuple[int, ...]]:
    return [np.shape(c) for c in closed.consts if np.size(c) >= LARGE]


def assert_params_are_inputs(ad: Adapted, n_params: int) -> Any:
    """The traced program takes every weight as an input and holds no weight as a constant."""
    closed = jax.jit(ad.fn).trace(*ad.args, **ad.kwargs).jaxpr
    assert large_consts(closed) == []
    n_inputs = len(jax.tree.leaves((ad.args, ad.kwargs)))
    assert len(closed.jaxpr.invars) == n_inputs
    param_leaves = jax.tree.leaves([ad.args[i] for i in ad.params_argnums])
    assert len(param_leaves) == n_params
    return closed


def paths_of(ad: Adapted) -> set[str]:
    return module_paths(jax.jit(ad.fn).trace(*ad.args, **ad.kwargs).jaxpr)


def grad_of(ad: Adapted, loss: Any) -> Any:
    """Gradient of ``loss(ad.fn(*args))`` w.r.t. the parameter argument(s) of ``ad``."""
    (argnum,) = ad.params_argnums
    return jax.grad(lambda *a: loss(ad.fn(*a)), argnums=argnum)(*ad.args)


def freeze_round_trip(ad: Adapted, tmp_path: Any, expected: Any) -> None:
    """freeze(ad.fn) with the weights stored, load it, call it on the other inputs."""
    freezing = pytest.importorskip("nbcompile.frozen")
    if not hasattr(freezing, "freeze") or not hasattr(freezing, "load"):
        pytest.skip("nbcompile.frozen does not offer freeze/load yet")
    freeze, load = freezing.freeze, freezing.load

    path = tmp_path / f"{ad.name}.nbc"
    weights = ad.weights_argnums
    freeze(ad.fn, *ad.args, path=path, weights_argnums=weights)
    inputs = [a for i, a in enumerate(ad.args) if i not in weights]
    assert_trees_close(load(path)(*inputs), expected)
