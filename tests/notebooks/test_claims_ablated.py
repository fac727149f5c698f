"""Each claim's assertion would fail if the claim were false: the notebook runs (up to that
assertion, with only the cells it needs) with the claim's cause removed — the model frozen in
training mode, fusion switched off, remat undone — and the assertion must raise.

A kernel per case; the cases are the cheap part of a tutorial, so together they stay well
inside the tutorials' time budget (docs/tutorials.md)."""

from __future__ import annotations

import importlib.util

import pytest

from ._run import ROOT, execute_ablated
from .test_tutorials import CLAIMS

# (notebook, the claim's assertion that must fail, {code: code with the cause removed},
#  the cells needed besides the first one — None: every cell up to the assertion)
ABLATIONS = [
    (
        "07",
        "assert b.speedup > 1.2",  # nothing dispatched op by op: the "eager" call is jitted too
        {
            "%%compile --bench\ndef attention(p, x):": "%%compile --bench\n@jax.jit\ndef attention(p, x):",
            "assert b.eager_kernels > b.compiled_kernels and b.eager_kernels_exact": "pass",
        },
        ("%%compile --bench\n@jax.jit", "b = attention.compilation.bench"),
    ),
    (
        "03",
        "assert flops_off - flops_on == 2 * 128**3",  # folding left on in the "off" compile
        {
            '{"xla_disable_hlo_passes": "constant_folding"}': "{}",
            'assert not any(f.stage == "xla" and f.folded for f in unfolded.folded)': "pass",
            'assert unfolded.summary()["kernels"] > c.summary()["kernels"]': "pass",
        },
        ("def project", "unfolded = "),
    ),
    (
        "03",
        "off.kernels > on.kernels",  # fusion off on both sides (XLA's compiler options)
        {'on, off = ab["baseline"], ab["no_fusion"]': 'on, off = ab["no_fusion"], ab["no_fusion"]'},
        ("y = jnp.asarray(rng", "def chain", "ab = ablate"),
    ),
    (
        "03",
        "assert off.bytes_accessed > 10 * on.bytes_accessed",  # fusion off on both sides
        {
            'on, off = ab["baseline"], ab["no_fusion"]': 'on, off = ab["no_fusion"], ab["no_fusion"]',
            'assert s["kernels"] < s["eager_kernels"] and off.changed and off.kernels > on.kernels': "pass",
        },
        ("y = jnp.asarray(rng", "def chain", "ab = ablate"),
    ),
    (
        "04",
        "assert sorted(dots.values()) == [1, 2]",  # x differentiated too: dx of layer one
        {"%%compile --grad\n": "%%compile --grad 0,1\n"},
        ("%%compile", "back = [", "dots = {}"),
    ),
    (
        "04",
        "assert abs(grad_flops / predicted_grad - 1) < 0.2",
        {
            "%%compile --grad\n": "%%compile --grad 0,1\n",
            "assert sorted(dots.values()) == [1, 2]": "pass",
        },
        ("%%compile", "back = [", "dots = {}"),
    ),
    (
        "04",
        "assert per_layer == [saved_per_layer] * DEPTH",  # no tanh: nothing of 1 - a² to keep
        {"return jnp.tanh(h @ w)": "return h @ w"},
        ("B2, W, DEPTH", "def layer", "saved_per_layer =", "def deep_loss", "d = deep_loss"),
    ),
    (
        "05",
        "assert all(abs(o / r - 1) < 0.2 for _, r, o in sweep.values())",  # one roof only
        {"roof = max(": "roof = min("},
        None,
    ),
    (
        "06",
        "assert file_census(frozen)[0] == 0 and file_census(frozen)[1] == 0",
        {"net.eval()": "net.train()"},
        ("class Net",),
    ),
    (
        "06",
        "assert np.array_equal(y_served, here)",  # the file holds other weights than the notebook
        {"predict(params, X)": "predict(jax.tree_util.tree_map(lambda w: w * 0.5, params), X)"},
        None,
    ),
    (
        "06",
        'assert os.listdir(out) == ["model.nbc"]',  # the file keeps the program, not the weights
        {
            "%%compile --freeze {path}\n": "%%compile\n",
            'fr = predict.compilation.extras["freeze"]': (
                "fr = vars(nbcompile.freeze(predict.compilation.original, params, X, path=path,"
                " weights_argnums=()))"
            ),
            'print(fr["text"])': "print(fr)",
        },
        None,
    ),
    (
        "07",
        "assert seen == [True, False]",  # nothing compiled: print sees arrays every call
        {"step = jax.jit(unstable)": "step = unstable"},
        ("seen = []",),
    ),
    (
        "09",
        "assert matmul_share > 0.5",  # narrow heads, a long sequence: the softmax takes the time
        {
            "D, SEQ, HEADS = 512, 256, 8": "D, SEQ, HEADS = 16, 1024, 16",
            "assert p.step_seconds > 1e-3 and p.coverage >= 0.95": "pass",
        },
        None,
    ),
    (
        "10",
        "assert abs(remat_flops / (4 * forward_pred) - 1) < 0.1",  # RematBlock without remat
        {
            "return nnx.remat(lambda block, h: Block.__call__(block, h))(self, h)": "return Block.__call__(self, h)",
        },
        ("class Block", "%%compile", "c = nbcompile.last()", "class RematBlock", "forward_pred ="),
    ),
]
#: notebooks planned for a deviceless TPU need libtpu, as their own tests do
NEEDS_LIBTPU = {"05", "10"}

pytestmark = pytest.mark.kernel


def test_each_ablated_assertion_is_a_claims_assertion():
    claimed = {(nb, code) for checks in CLAIMS.values() for nb, code in checks}
    for notebook, code, _, _ in ABLATIONS:
        assert (notebook, code) in claimed, (notebook, code)


def test_every_claim_is_checked_with_its_cause_removed():
    ablated = {(nb, code) for nb, code, _, _ in ABLATIONS}
    missing = [claim for claim, checks in CLAIMS.items() if not ablated & set(checks)]
    assert missing == []


@pytest.mark.parametrize("case", ABLATIONS, ids=[f"{a[0]}-{i}" for i, a in enumerate(ABLATIONS)])
def test_the_claims_assertion_fails_without_its_cause(case, tmp_path):
    notebook, code, replace, only = case
    if notebook in NEEDS_LIBTPU and importlib.util.find_spec("libtpu") is None:
        pytest.skip('plans for a deviceless TPU: needs libtpu ("nbcompile[tpu]")')
    path = next((ROOT / "notebooks").glob(f"{notebook}_*.ipynb"))
    traceback = execute_ablated(path, tmp_path, replace, until=code, only=only)
    assert traceback is not None, f"{path.name}: {code!r} held with its cause removed"
    assert "AssertionError" in traceback and code in traceback, traceback[-2000:]
