"""No option ever deletes, mutates or donates a user's array (issue 28 §1).

An AdamW training step written the way optax's examples write it, ``step(params, opt_state,
x, y)`` compiled with ``--donate params,opt_state``, run through a real IPython shell with every
option that calls the program (and combinations): after each cell every leaf of every argument
must still be alive and hold the value it had before. The rebound function itself still donates
(that is what ``--donate`` asks for); only nbcompile's measurements must not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from .helpers import run

SETUP = """
import jax, jax.numpy as jnp, numpy as np
rng = np.random.default_rng(0)
params = {"w": jnp.asarray(rng.normal(size=(8, 4)), jnp.float32),
          "b": jnp.zeros((1, 4), jnp.float32)}
x = jnp.asarray(rng.normal(size=(16, 8)), jnp.float32)
y = jnp.asarray(rng.normal(size=(16, 4)), jnp.float32)

def adamw_init(params):  # two trees of zeros: one buffer donated twice is refused by XLA
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)
    return {"count": jnp.zeros((), jnp.int32), "mu": zeros(), "nu": zeros()}

def adamw_update(grads, state, params, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8, wd=1e-4):
    count = state["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
    t = count.astype(jnp.float32)
    updates = jax.tree.map(
        lambda m, v, p: -lr * ((m / (1 - b1**t)) / (jnp.sqrt(v / (1 - b2**t)) + eps) + wd * p),
        mu, nu, params)
    return updates, {"count": count, "mu": mu, "nu": nu}

opt_state = adamw_init(params)
"""

STEP = """%%compile --donate params,opt_state -q {opts}
def step(params, opt_state, x, y):
    def loss_fn(p):
        return jnp.mean((jnp.tanh(x @ p["w"] + p["b"]) - y) ** 2)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = adamw_update(grads, opt_state, params)
    params = jax.tree.map(lambda p, u: p + u, params, updates)
    return params, opt_state, loss
step(params, opt_state, x, y)
"""

# (loss, aux): the decayed parameters are an output of the same shapes, so the donation is used
LOSS = """%%compile --donate params -q {opts}
def loss(params, x, y):
    value = jnp.mean((jnp.tanh(x @ params["w"] + params["b"]) - y) ** 2)
    return value, jax.tree.map(lambda p: 0.99 * p, params)
loss(params, x, y)
"""

ARGS = ("params", "opt_state", "x", "y")

OPTIONS = [
    "--bench",
    "--debug",
    "--profile 2",
    "--memory",
    "--ablate",
    "--freeze {tmp}/step.nbc",
    "--bench --debug --profile 2 --memory --ablate --freeze {tmp}/all.nbc",
]


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    res = shell.run_cell(SETUP)
    assert res.success, res.error_in_exec
    return shell


def _snapshot(ns: dict) -> dict:
    """Copies (new device buffers, no NumPy views: a view would block donation) of every
    argument, to compare with after the cell."""
    return {n: jax.tree.map(lambda a: jnp.array(a, copy=True), ns[n]) for n in ARGS}


def _assert_untouched(ns: dict, before: dict, what: str) -> None:
    for name, saved in before.items():
        now = jax.tree.leaves(ns[name])
        assert len(now) == len(jax.tree.leaves(saved)), f"{what}: {name} changed structure"
        for leaf, old in zip(now, jax.tree.leaves(saved), strict=True):
            assert isinstance(leaf, jax.Array), f"{what}: {name} was replaced"
            assert not leaf.is_deleted(), f"{what}: a leaf of `{name}` was deleted (donated)"
            assert bool(jnp.array_equal(leaf, old)), f"{what}: `{name}` was changed"


@pytest.mark.profiler
@pytest.mark.parametrize("opts", OPTIONS)
def test_no_option_consumes_a_donated_train_step_argument(ip, tmp_path, opts):
    opts = opts.format(tmp=tmp_path)
    before = _snapshot(ip.user_ns)
    res = run(ip, STEP.format(opts=opts))
    assert res.success, res.error_in_exec
    _assert_untouched(ip.user_ns, before, opts)
    c = ip.user_ns["step"].compilation
    assert c.call_form.donated_names() == ["params", "opt_state"]
    if "--bench" in opts:
        assert c.bench.compiled.median > 0
        assert any("--donate params, opt_state" in n for n in c.bench.notes), c.bench.notes
    if "--debug" in opts:
        assert c.debug is not None and not c.debug.stopped
        assert c.debug.divergence is None or not c.debug.divergence.differs
    if "--profile" in opts:
        assert c.profile.source == "measured" and c.profile.kernels
    if "--ablate" in opts:
        assert all(v.time is not None for v in c.ablation.variants if v.error is None)
        assert not c.ablation.notes or "failed" not in " ".join(c.ablation.notes)
    if "--freeze" in opts:
        assert c.frozen is not None


@pytest.mark.parametrize("opts", ["--grad", "--grad --debug --bench"])
def test_grad_options_leave_donated_parameters_alive(ip, opts):
    before = _snapshot(ip.user_ns)
    res = run(ip, LOSS.format(opts=opts))
    assert res.success, res.error_in_exec
    _assert_untouched(ip.user_ns, before, opts)
    c = ip.user_ns["loss"].compilation
    assert c.grad is not None
    if "--debug" in opts:
        assert c.debug.program == "value_and_grad(loss)" and not c.debug.stopped


def test_the_rebound_function_still_donates_as_asked(ip):
    res = run(ip, STEP.format(opts="--bench"))
    assert res.success, res.error_in_exec
    ns = ip.user_ns
    old = ns["params"]["w"]
    res = ip.run_cell("params, opt_state, loss_value = step(params, opt_state, x, y)")
    assert res.success, res.error_in_exec
    assert old.is_deleted(), "--donate params: the compiled step must consume params"
    assert not ns["x"].is_deleted() and not ns["params"]["w"].is_deleted()


def test_a_function_the_user_jitted_with_donation_is_benched_on_copies(ip):
    res = ip.run_cell(
        "@jax.jit\ndef _inner(w, x):\n    return w + x.sum()\n"
        "donating = jax.jit(lambda w, x: _inner(w, x), donate_argnums=0)"
    )
    assert res.success, res.error_in_exec
    w0 = jnp.array(ip.user_ns["params"]["w"], copy=True)
    res = run(ip, "%%compile -q --bench --debug\ndonating(params['w'], x)\n")
    assert res.success, res.error_in_exec
    w = ip.user_ns["params"]["w"]
    assert not w.is_deleted() and bool(jnp.array_equal(w, w0))


def test_every_timed_call_of_a_consuming_program_gets_its_own_inputs():
    from nbcompile.measure._timing import Prepared, time_call, time_calls_in_turns

    made: list[object] = []
    used: list[object] = []

    def prepare() -> object:
        made.append(object())
        return made[-1]

    def run(token: object) -> None:
        assert all(token is not u for u in used), "inputs reused after a consuming call"
        used.append(token)

    time_call(Prepared(prepare, run), 0.05)
    time_calls_in_turns([Prepared(prepare, run), lambda: None], 0.05)
    assert len(made) == len(used) > 6


def test_fresh_inputs_copy_only_the_donated_leaves_and_keep_their_sharding():
    from nbcompile.measure._calls import CallForm

    def f(w, x, act):
        return act(x @ w).sum() + w  # an output shaped like w: the donation is usable

    w, x = jnp.ones((4, 4)), jnp.ones((2, 4))
    lowered = jax.jit(f, static_argnums=2, donate_argnums=0).trace(w, x, jax.nn.relu).lower()
    form = CallForm.of((w, x, jax.nn.relu), static_argnums=(2,), lowered=lowered, names="wxa")
    assert form.donated == (True, False) and form.donated_names() == ["w"]
    (w2, x2), _ = form.fresh_dynamic()
    assert w2 is not w and x2 is x and w2.sharding == w.sharding
    (w3, x3, act), _ = form.fresh()
    assert w3 is not w and x3 is x and act is jax.nn.relu
    form.call_compiled(lowered.compile())
    assert not w.is_deleted()


def test_no_room_for_the_copies_is_refused_with_a_code_and_touches_nothing(ip, monkeypatch):
    from nbcompile.measure import _calls

    def out_of_memory(x):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 128 bytes")

    monkeypatch.setattr(_calls, "fresh_copy", out_of_memory)
    before = _snapshot(ip.user_ns)
    res = run(ip, STEP.format(opts="--bench --debug"))
    err = res.error_in_exec
    assert getattr(err, "code", None) == "NBC211", repr(err)
    assert "params, opt_state" in str(err) and "--donate" in str(err)
    _assert_untouched(ip.user_ns, before, "NBC211")
