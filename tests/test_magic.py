"""%%compile through a real IPython InteractiveShell: binding, display, cache, errors."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from IPython.core.error import UsageError

from nbcompile.compilation import Compilation

from .helpers import COUNTER, PREDICT, cell, failing, run, setup


@pytest.fixture
def ip(shell):
    return setup(shell)


def test_binds_compiled_function_with_same_outputs(ip):
    res = run(ip, PREDICT.format(opts=" -q -f", end=""))
    assert res.success, res.error_in_exec
    predict = ip.user_ns["predict"]
    assert type(predict).__name__ == "PjitFunction"
    c = predict.compilation
    assert isinstance(c, Compilation)
    assert "fusion" in c.hlo
    original = c.original
    p, x = ip.user_ns["params"], ip.user_ns["x"]
    np.testing.assert_array_equal(np.asarray(predict(p, x)), np.asarray(jax.jit(original)(p, x)))
    assert (c.jaxpr.eqns and "stablehlo" in c.stablehlo) or "func.func" in c.stablehlo
    assert set(c.timings) >= {"trace", "lower", "compile"} and not c.cache_hit


def test_cell_value_is_the_compilation_and_semicolon_silences(ip):
    res = run(ip, PREDICT.format(opts="", end=""))
    assert res.success, res.error_in_exec
    assert isinstance(res.result, Compilation)
    assert ip.user_ns["_"] is res.result
    res = run(ip, PREDICT.format(opts=" -f", end=";"))
    assert res.success and res.result is None
    assert type(ip.user_ns["predict"]).__name__ == "PjitFunction"


def test_rerun_of_unchanged_cell_does_not_compile(ip):
    text = PREDICT.format(opts=" -q", end="")
    assert run(ip, text).success
    first = ip.user_ns["predict"].compilation
    before = COUNTER.count
    assert run(ip, text).success
    assert COUNTER.count == before, "an unchanged cell compiled again"
    again = ip.user_ns["predict"].compilation
    assert again.program is first.program and again.cache_hit and again is not first
    assert run(ip, PREDICT.format(opts=" -q -f", end="")).success
    assert COUNTER.count > before, "-f must recompile"


def test_changed_cell_shows_what_changed(ip):
    assert run(ip, PREDICT.format(opts=" -q", end="")).success
    edited = PREDICT.format(opts=" -q", end="").replace("h * 2.0 + 1.0", "h * 3.0 + 1.0")
    assert run(ip, edited).success
    card = ip.user_ns["predict"].compilation.extras["changes"]["text"]
    assert "line 4 changed" in card and "h * 3.0 + 1.0" in card
    ip.run_cell("x = jnp.ones((5, 3), jnp.float32)")
    assert run(ip, edited).success
    card = ip.user_ns["predict"].compilation.extras["changes"]["text"]
    assert "argument x: f32[2,3] → f32[5,3]" in card
    assert "line" not in card.split("\n", 1)[1]


def test_closed_over_global_change_recompiles(ip):
    text = """%%compile -q
def scale(x):
    return x * k
scale(x)
"""
    ip.run_cell("k = jnp.float32(2.0)")
    assert run(ip, text).success
    ip.run_cell("k = jnp.float32(3.0)")
    before = COUNTER.count
    assert run(ip, text).success
    assert COUNTER.count > before
    np.testing.assert_allclose(
        np.asarray(ip.user_ns["scale"](ip.user_ns["x"])), 3.0 * np.asarray(ip.user_ns["x"])
    )


def test_syntax_error_names_visible_line(ip):
    err = failing(ip, "%%compile\na = 1\ny = (x +\n", "NBC100", 3)
    assert "^" in str(err) and "y = (x +" in str(err)


def test_name_error_after_assignments_rolls_back(ip):
    text = "%%compile\nnew_a = 1\nparams = None\nnew_b = undefined_thing\npredict(params, x)\n"
    failing(ip, text, "NBC102", 4)


def test_python_if_on_tracer(ip):
    text = "%%compile\ndef bad(x):\n    y = x * 2\n    if y.sum() > 0:\n        return y\n    return -y\nbad(x)\n"
    err = failing(ip, text, "NBC201", 4)
    assert isinstance(err.__cause__, jax.errors.TracerBoolConversionError)


def test_value_dependent_shape(ip):
    text = "%%compile\ndef pos(x):\n    return x[x > 0]\npos(x)\n"
    failing(ip, text, "NBC202", 3)


def test_non_array_argument_suggests_static(ip):
    text = (
        "%%compile\ndef act(x, kind):\n    return jnp.tanh(x) if kind == 'tanh' else x\n"
        "act(x, 'tanh')\n"
    )
    err = failing(ip, text, "NBC203", None)
    assert "--static kind" in str(err)
    ok = run(ip, "%%compile -q --static kind\n" + text.split("\n", 1)[1])
    assert ok.success, ok.error_in_exec


def test_tracer_leaked_into_global(ip):
    text = (
        "%%compile\ndef leaky(x):\n    global leaked\n    leaked = x * 2\n    return x\nleaky(x)\n"
    )
    failing(ip, text, "NBC204", 4)  # the line that stores it
    assert "leaked" not in ip.user_ns


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("%%compile\nz = 1\nz\n", "NBC110"),
        ("%%compile\ndef f(x):\n    return x\nf(x) + f(x)\n", "NBC111"),
        ("%%compile --no-such-option\ndef f(x):\n    return x\nf(x)\n", "unrecognized"),
        ("%%compile nothere\ndef f(x):\n    return x\nf(x)\n", "NBC110"),
    ],
)
def test_usage_errors_are_one_line(ip, text, needle):
    res = run(ip, text)
    assert isinstance(res.error_in_exec, UsageError), repr(res.error_in_exec)
    assert needle in str(res.error_in_exec)


def test_print_at_trace_time_warns(ip, capsys):
    text = "%%compile -q\ndef noisy(x):\n    print('value', x)\n    return x + 1\nnoisy(x)\n"
    res = run(ip, text)
    assert res.success
    out = capsys.readouterr()
    assert "value" in out.out
    assert "jax.debug.print" in out.err
    assert any("trace time" in n for n in ip.user_ns["noisy"].compilation.notes)


def test_new_shape_call_is_explained(ip, capsys):
    assert run(ip, PREDICT.format(opts=" -q", end="")).success
    capsys.readouterr()
    res = run(ip, "y2 = predict(params, jnp.ones((7, 3), jnp.float32))")
    assert res.success
    err = capsys.readouterr().err
    assert "`predict` was compiled again" in err
    assert "f32[7,3]" in err and "f32[2,3]" in err


def test_ten_recompiles_warn_once(ip, capsys):
    text = "%%compile -q\ndef grow(x):\n    return x * 2\ngrow(x)\n"
    for n in range(1, 12):
        ip.run_cell(f"x = jnp.ones(({n},), jnp.float32)")
        assert run(ip, text).success
    err = capsys.readouterr().err
    assert err.count("compiled 10 times") == 1
    assert "argument `x`" in err


def test_grad_option_builds_value_and_grad(ip):
    text = (
        "%%compile -q --grad\ndef loss(params, x):\n    return jnp.mean(predict(params, x) ** 2)\n"
        "loss(params, x)\n"
    )
    assert run(ip, PREDICT.format(opts=" -q", end="")).success
    res = run(ip, text)
    assert res.success, res.error_in_exec
    c = ip.user_ns["loss"].compilation
    assert c.grad is not None
    _value, grads = c.grad.fn(ip.user_ns["params"], ip.user_ns["x"])
    expected = jax.grad(c.original)(ip.user_ns["params"], ip.user_ns["x"])
    np.testing.assert_allclose(np.asarray(grads["w"]), np.asarray(expected["w"]), rtol=1e-6)


def test_grad_of_non_scalar_is_explained(ip):
    text = "%%compile --grad\ndef vec(x):\n    return x * 2\nvec(x)\n"
    failing(ip, text, "NBC206", None)


def test_jit_object_and_partial_targets(ip):
    text = (
        "%%compile -q\nimport functools\n@jax.jit\ndef jf(x, y):\n    return x * y\n"
        "pf = functools.partial(jf, y=2.0)\npf(x)\n"
    )
    res = run(ip, text)
    assert res.success, res.error_in_exec
    assert ip.user_ns["pf"].compilation.original.func is ip.user_ns["jf"]  # partial of a cell jit
    res = run(ip, "%%compile -q\nsq = lambda v: v * v\nsq(x)\n")
    assert res.success, res.error_in_exec
    assert type(ip.user_ns["sq"]).__name__ == "PjitFunction"


def test_args_option(ip):
    res = run(
        ip,
        '%%compile -q predict --args "(params, x)"\n'
        + cell(PREDICT.format(opts="", end="")).rsplit("\n", 2)[0]
        + "\n",
    )
    assert res.success, res.error_in_exec
    assert type(ip.user_ns["predict"]).__name__ == "PjitFunction"


def test_display_options_do_not_invalidate_the_cache(ip):
    assert run(ip, PREDICT.format(opts="", end=";")).success
    before = COUNTER.count
    assert run(ip, PREDICT.format(opts=" -q", end="")).success
    assert COUNTER.count == before


def test_progress_names_the_target_and_shows_stages(ip, monkeypatch):
    from nbcompile import magic

    shown = []
    monkeypatch.setattr(magic._Progress, "DELAY", 0.0)
    monkeypatch.setattr(
        "IPython.display.display",
        lambda bundle, **kw: shown.append(bundle["text/plain"]) or _Handle(shown),
    )
    assert run(ip, PREDICT.format(opts=" -q -f", end="")).success
    assert shown and all("predict" in text for text in shown)
    assert any("tracing" in text for text in shown) and any("compiling" in text for text in shown)
    assert shown[-1].startswith("✓ predict: compiled in")
    shown.clear()
    assert run(ip, PREDICT.format(opts=" -f", end="")).success  # displayed: analysed first
    stages = [text for text in shown if "analysing: " in text]
    assert any("(1/10)" in t for t in stages) and any("(10/10)" in t for t in stages), stages
    assert shown[-1].startswith("✓ predict: compiled and analysed in")


class _Handle:
    def __init__(self, shown):
        self.shown = shown

    def update(self, bundle, **kw):
        self.shown.append(bundle["text/plain"])
