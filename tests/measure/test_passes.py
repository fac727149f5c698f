"""The pass-name table: every CPU name marked verified really changes the optimised module."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.measure import PASS_NAMES, passes_for, variants_for

_RNG = np.random.default_rng(0)
_A = _RNG.standard_normal((16, 16)).astype(np.float32)
_B = _RNG.standard_normal((16, 16)).astype(np.float32)


def _elementwise(x):
    return jnp.tanh(x * 2.0 + 1.0) * 3.0


def _matmul(x):
    return jnp.tanh(x @ x.T)


def _constant_product(x):
    return x @ (jnp.asarray(_A) @ jnp.asarray(_B))


# a program on which each pass has work to do
_PROGRAM_FOR = {
    "fusion": _elementwise,
    "fusion-wrapper": _elementwise,
    "dot-library-rewriter": _matmul,
    "constant_folding": _constant_product,
}


def _optimised(fn, disabled):
    lowered = jax.jit(fn).lower(jnp.ones((8, 16), jnp.float32))
    options = {"xla_disable_hlo_passes": ",".join(disabled)} if disabled else None
    return (lowered.compile(compiler_options=options) if options else lowered.compile()).as_text()


def _passes_run(fn, disabled) -> set[str]:
    """The names of the passes XLA dumped a step for (they changed the module)."""
    from nbcompile.measure.metal import dump_compile

    lowered = jax.jit(fn).lower(jnp.ones((8, 16), jnp.float32))
    options = {"xla_disable_hlo_passes": ",".join(disabled)} if disabled else None
    log = dump_compile(lowered, "cpu", options).passes
    return {s.name for s in log.steps}


def _jaxlib_at_least(version: str) -> bool:
    import jaxlib.version

    here = tuple(int(p) for p in jaxlib.version.__version__.split(".")[:2])
    return here >= tuple(int(p) for p in version.split("."))


@pytest.mark.parametrize(
    "entry", [p for p in PASS_NAMES if p.platform == "cpu"], ids=lambda p: p.name
)
def test_verified_cpu_pass_changes_the_module(entry):
    assert entry.verified, "every CPU name in the table is checked here; mark it verified"
    fn = _PROGRAM_FOR[entry.name]
    reference = _optimised(fn, entry.needs)
    changed = _optimised(fn, (*entry.needs, entry.name)) != reference
    if entry.log_only_from and _jaxlib_at_least(entry.log_only_from):
        # XLA redoes the pass's work later (outside a dumped pipeline): disabling it shows in
        # the pass log only; if the module changes again, drop ``log_only_from``
        assert not changed, f"{entry.name} changes the optimised module again: update the table"
        assert entry.name in _passes_run(fn, entry.needs)
        assert entry.name not in _passes_run(fn, (*entry.needs, entry.name))
    else:
        assert changed, f"disabling {entry.name!r} changed nothing: XLA renamed or dropped it"


def test_unknown_names_are_silently_ignored():
    # why the table needs verification at all
    assert _optimised(_elementwise, ("no-such-pass",)) == _optimised(_elementwise, ())


def test_default_variants_use_only_table_names():
    for platform in ("cpu", "gpu"):
        known = {p.name for p in passes_for(platform)}
        for v in variants_for(platform):
            assert set(v.disabled) <= known
    assert [v.name for v in variants_for("tpu")] == ["baseline"]
    assert variants_for("cuda") == variants_for("gpu")


def test_docs_table_lists_every_name():
    doc = (Path(__file__).parents[2] / "docs" / "passes.md").read_text()
    for p in PASS_NAMES:
        assert f"`{p.name}`" in doc
