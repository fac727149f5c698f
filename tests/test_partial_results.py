"""Parts of a cell are independent, and ``--profile`` survives a deviceless TPU compile
(issue 28 §11).

* ``--bench --debug --profile`` where the profile cannot run (JAX's profiler is already
  tracing: NBC600): the bench and debug results are kept on ``c``, a note and a warning name
  the part that failed with its code, ``c.failures`` holds its error, the function is rebound.
  When every part asked for fails, the cell fails with the first error, as before.
* In a real kernel: a deviceless TPU compile (``--topology``) used to load libtpu with its
  profiler, after which JAX's profiler crashed the process, so ``--profile`` was refused for the
  rest of the kernel. It now measures.
"""

from __future__ import annotations

import jax
import pytest

from .helpers import PREDICT, run, setup


@pytest.fixture
def ip(shell):
    return setup(shell)


@pytest.fixture
def tracing(tmp_path):
    """Another jax.profiler trace running in this process (the user's own, say)."""
    jax.profiler.start_trace(str(tmp_path))
    try:
        yield
    finally:
        jax.profiler.stop_trace()


@pytest.mark.profiler
def test_a_failing_profile_keeps_bench_and_debug(ip, tracing, capsys):
    res = run(ip, PREDICT.format(opts=" -q --bench --debug --profile 2", end=""))
    assert res.success, res.error_in_exec
    c = ip.user_ns["predict"].compilation  # rebound: the cell succeeded
    assert c.bench is not None and c.bench.compiled.median > 0
    assert c.debug is not None and not c.debug.stopped
    assert c.profile is None
    assert list(c.failures) == ["--profile"]
    assert c.failures["--profile"].code == "NBC600"
    note = [n for n in c.notes if n.startswith("--profile failed")]
    assert note and "[NBC600]" in note[0] and "already tracing" in note[0], c.notes
    assert "--profile failed" in capsys.readouterr().err


@pytest.mark.profiler
def test_when_every_part_fails_the_cell_fails_with_its_error(ip, tracing):
    before = ip.user_ns.get("predict")
    res = run(ip, PREDICT.format(opts=" -q --profile 2", end=""))
    err = res.error_in_exec
    assert err is not None and getattr(err, "code", None) == "NBC600", repr(err)
    assert ip.user_ns.get("predict") is before, "a failed cell must not rebind"


@pytest.mark.kernel
@pytest.mark.profiler
def test_profile_after_a_deviceless_tpu_compile_in_a_real_kernel():
    pytest.importorskip("libtpu")
    from .test_kernel import PREDICT as KERNEL_PREDICT
    from .test_kernel import SETUP, execute, notebook, text_of

    tpu = "%%compile -q --backend tpu --topology v5e:1x1\ndef tpu_fn(x):\n"
    tpu += "    return jnp.tanh(x) * 2.0\ntpu_fn(x)"
    profiled = KERNEL_PREDICT.replace("%%compile", "%%compile -q --profile 3")
    check = "c = predict.compilation\nprint('PROFILE', c.profile.source, len(c.profile.kernels))"
    nb = execute(notebook(SETUP, tpu, profiled, check))
    out = text_of(nb.cells[3])
    assert "PROFILE measured" in out, out
