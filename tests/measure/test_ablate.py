"""ablate(): recompiling one lowered program with passes off changes structure as expected."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.measure import ablate
from nbcompile.measure._hlo import entry_kernels


def gelu_chain(x):
    for _ in range(6):
        x = jax.nn.gelu(x) * 1.1 + 0.2
    return x


@pytest.fixture(scope="module")
def chain_result():
    x = jnp.ones((1024, 1024), jnp.float32)
    return ablate(jax.jit(gelu_chain).lower(x), (x,), max_seconds=4.0)


def test_fusion_off_means_more_kernels(chain_result):
    base = chain_result["baseline"]
    assert base.effect == "baseline"
    for name in ("no_loop_fusion", "no_fusion"):
        v = chain_result[name]
        assert v.changed is True and v.effect == "changed"
        assert v.kernels > base.kernels
        # unfused intermediates go through memory: XLA's own traffic estimate grows
        assert v.bytes_accessed > base.bytes_accessed


def test_every_variant_is_timed(chain_result):
    for v in chain_result.variants:
        assert v.error is None
        assert v.time is not None and v.time.median > 0 and v.time.samples >= 1
        assert v.time.q25 <= v.time.median <= v.time.q75
        assert v.ratio is not None and v.ratio > 0
    assert chain_result["baseline"].ratio == pytest.approx(1.0)


def test_folding_has_no_effect_on_the_chain(chain_result):
    # nothing to fold: the module must be byte-identical to the baseline and say so
    v = chain_result["no_constant_folding"]
    assert v.changed is False and v.effect == "no effect"
    assert "no effect" in chain_result.text()


def test_result_round_trips_through_json(chain_result):
    data = json.loads(json.dumps(chain_result.to_json()))
    assert data["variants"][0]["name"] == "baseline"
    assert data["platform"] == "cpu"


def test_constant_folding_off_means_more_ops():
    rng = np.random.default_rng(0)
    # 1 KB each: JAX >= 0.12.1 embeds closed-over arrays up to jax_embedded_constants_max_bytes
    # (1,024 bytes) as constants and passes larger ones as arguments, which XLA cannot fold
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)

    def model(x):
        return jnp.tanh(x @ (jnp.asarray(a) @ jnp.asarray(b)))

    x = jnp.ones((8, 16), jnp.float32)
    result = ablate(
        jax.jit(model).lower(x),
        (x,),
        variants=[("no_constant_folding", ["constant_folding"])],
        time_it=False,
    )
    base, off = result["baseline"], result["no_constant_folding"]
    assert off.changed is True
    assert off.hlo_ops > base.hlo_ops
    assert off.kernels > base.kernels  # A @ B now runs at every call
    assert base.time is None and off.time is None


def test_unknown_pass_name_is_reported_as_no_effect():
    x = jnp.ones((64, 64), jnp.float32)
    result = ablate(
        jax.jit(gelu_chain).lower(x), (x,), variants=[("typo", ["fusoin"])], time_it=False
    )
    assert result["typo"].changed is False
    assert result["typo"].effect == "no effect"


def test_kernel_counter_skips_bookkeeping_ops():
    text = (
        jax.jit(lambda x, y: (x + y, x * 2.0)).lower(jnp.ones(3), jnp.ones(3)).compile().as_text()
    )
    ops = [op for _, op in entry_kernels(text)]
    assert ops and not {"parameter", "tuple", "constant"} & set(ops)
