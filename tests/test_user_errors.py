"""Bad input answered in the user's words: short, the user's names, no JAX frames; and each
kernel's state on its own Session; and Compilation as a closed type."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from .helpers import PREDICT, failing, run, setup


@pytest.fixture
def ip(shell):
    return setup(shell)


def shown(capsys, ip, text):
    """What the user sees for a failing cell (IPython prints the short traceback)."""
    capsys.readouterr()
    res = run(ip, text)
    assert not res.success
    out = capsys.readouterr()
    return res.error_in_exec, (out.out + out.err).strip()


def test_static_of_an_unknown_name_lists_the_real_arguments(ip):
    res = run(ip, PREDICT.format(opts=" --static nosuch", end=""))
    assert isinstance(res.error_in_exec, UsageError), repr(res.error_in_exec)
    text = str(res.error_in_exec)
    assert "nosuch" in text and "params, x" in text and "NBC114" in text
    assert len(text.splitlines()) <= 2


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        ("def f(x):\n    return 'done'\nf(x)\n", "NBC207", "returns a str"),
        ("def f(x):\n    return x, jnp.tanh\nf(x)\n", "NBC207", "output [1]"),
        ("async def f(x):\n    return x\nf(x)\n", "NBC208", "async def"),
        ("def f(x):\n    yield x\nf(x)\n", "NBC208", "generator"),
        ("def f(x):\n    raise KeyboardInterrupt\nf(x)\n", "NBC209", "interrupted"),
    ],
)
def test_what_the_function_is_or_returns_is_named(ip, capsys, body, code, words):
    err, text = shown(capsys, ip, "%%compile\n" + body)
    assert err.code == code, str(err)
    assert words in str(err)
    assert "an example argument" not in str(err)
    assert len(text.splitlines()) <= 12, text
    assert "jax/_src" not in text and "site-packages" not in text, text


def test_errors_show_short_without_jax_frames(ip, capsys):
    body = "def bad(x):\n    if x.sum() > 0:\n        return x\n    return -x\nbad(x)\n"
    err, text = shown(capsys, ip, "%%compile\n" + body)
    assert (err.code, err.line) == ("NBC201", 3)
    assert len(text.splitlines()) <= 12 and "jax/_src" not in text, text
    assert "raised by JAX/XLA" in text


def test_undefined_name_in_the_function_is_the_users_code_not_jax(ip, capsys):
    body = "def f(x):\n    return x * not_defined_anywhere\nf(x)\n"
    err, text = shown(capsys, ip, "%%compile\n" + body)
    assert err.line == 3 and "not_defined_anywhere" in str(err)
    assert "raised by JAX/XLA" not in text and "raised by your code" in text


@pytest.mark.parametrize("topology", ["v5e:0x0", "v5e:99999x99999"])
def test_impossible_tpu_topology_is_refused_with_the_valid_ones(ip, topology):
    err = failing(
        ip, PREDICT.format(opts=f" --backend tpu --topology {topology}", end=""), "NBC600", None
    )
    assert topology in str(err) and "v5e:2x2" in str(err)


def test_freeze_path_is_read_as_a_shell_would(ip, tmp_path):
    target = tmp_path / "my models" / "m.nbc"
    target.parent.mkdir()
    res = run(ip, PREDICT.format(opts=f" -q --freeze '{target}'", end=""))
    assert res.success, res.error_in_exec
    assert target.exists()
    assert not (tmp_path / "'").exists()


def test_two_shells_in_one_process_keep_their_own_state(shell):
    from IPython.core.interactiveshell import InteractiveShell

    import nbcompile.magic as magic

    other = InteractiveShell()
    try:
        other.run_line_magic("load_ext", "nbcompile")
        for ip in (setup(shell), other):
            if ip is other:
                other.run_cell(
                    "import jax.numpy as jnp\nparams={'w': jnp.ones((3,4)), 'b': jnp.ones((1,4))}\n"
                    "x = jnp.ones((2,3))"
                )
            assert run(ip, PREDICT.format(opts=" -q", end="")).success
        first, second = magic.magics_of(shell).session, magic.magics_of(other).session
        assert first is not second and first.cache is not second.cache
        assert first.last is not None and second.last is not None
        assert first.last is not second.last and first.display is not second.display
        run(
            other,
            "%%compile\ndef g(x):\n    if x.sum() > 0:\n        return x\n    return x\ng(x)\n",
        )
        assert second.last_error is not None and first.last_error is not second.last_error
    finally:
        other.run_line_magic("unload_ext", "nbcompile")
        assert magic.magics_of(other) is None
    # (no clear_instance(): it would clear IPython's singleton, the test session's own shell)


@pytest.mark.profiler
def test_compilation_is_a_closed_type(ip, tmp_path):
    import nbcompile
    from nbcompile.compilation import Compilation

    opts = f" -q --grad --bench --ablate --debug --profile 3 --memory --freeze {tmp_path}/m.nbc"
    text = PREDICT.format(opts=opts, end="").replace(
        "return h * 2.0 + 1.0", "return jnp.sum(h * 2.0 + 1.0)"
    )
    res = run(ip, text)
    assert res.success, res.error_in_exec
    c = nbcompile.last()
    assert not hasattr(c, "__dict__"), "Compilation must declare every field in __slots__"
    assert {"_bench", "_ablation", "_debug", "_frozen", "_profile", "_memory_map"} <= set(
        Compilation.__slots__
    )
    for result in (c.bench, c.ablation, c.debug, c.frozen, c.profile, c.memory_map, c.grad):
        assert result is not None
    with pytest.raises(AttributeError):
        c.anything_new = 1  # nothing outside the class can add state
    assert set(c.extras) >= {"bench", "ablate", "debug", "freeze", "profile", "memory"}


def test_interrupting_an_xla_compile_says_what_keeps_running(ip, monkeypatch):
    """Ctrl-C during XLA's compile: XLA cannot cancel it; the error says it finishes in the
    background and the next compile waits (measured: docs/guide.md, "Interrupting")."""
    import jax

    calls = []
    real = jax.stages.Lowered.compile

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(jax.stages.Lowered, "compile", interrupted)
    err = failing_without_rerun(ip, PREDICT.format(opts=" -f", end=""))
    monkeypatch.setattr(jax.stages.Lowered, "compile", real)
    assert calls and err.code == "NBC209"
    assert "background" in str(err) and "next compile" in str(err)
    assert run(ip, PREDICT.format(opts=" -q -f", end="")).success


def failing_without_rerun(ip, text):
    from nbcompile.errors import NbcompileError

    before = set(ip.user_ns)
    res = run(ip, text)
    assert isinstance(res.error_in_exec, NbcompileError), repr(res.error_in_exec)
    assert not {n for n in set(ip.user_ns) - before if not n.startswith("_")}
    return res.error_in_exec


def test_compile_only_planning_refuses_to_run_in_the_users_words():
    import jax
    import jax.numpy as jnp

    import nbcompile
    from nbcompile.errors import TargetError

    spec = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    c = nbcompile.compile(lambda w, x: jnp.tanh(x @ w).sum(), spec, spec)
    assert c.compiled is not None and not c.runnable and c.fusions
    assert any("compile-only" in n for n in c.notes)
    for run_it in (c.run_bench, c.run_debug, lambda: c.run_profile(3)):
        with pytest.raises(TargetError) as info:
            run_it()
        assert info.value.code == "NBC210" and "ShapeDtypeStruct" in str(info.value)
