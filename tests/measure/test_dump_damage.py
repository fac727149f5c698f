"""XLA's dump when the disk under it is full, or when ``XLA_FLAGS`` shapes it (issue 41 items 4
and 5; nbcompile/measure/_dump_check.py).

XLA does not fail a compile it cannot dump: on a full disk it logs the failed writes and leaves
empty and cut-short files, which pyelftools then refused with a raw ``ELFError``. nbcompile now
refuses such a dump with NBC610 naming the folder and the fix, and the program still compiles
and runs. How it is simulated here: (a) a real dump whose object file or pass file is cut short
by hand, (b) a real full disk: a 64 KB tmpfs with 12 KB left, mounted in a private mount
namespace (``unshare -rm``, skipped where user namespaces are not allowed) and used as TMPDIR by
a child Python, (c) no folder at all (``TemporaryDirectory`` raising ENOSPC).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import nbcompile
from nbcompile._compat import persistent_cache_disabled, xla_dump_options
from nbcompile.errors import NbcompileError
from nbcompile.measure.metal import MetalDump, kernel_code, read_dump

ROOT = Path(__file__).resolve().parents[2]


def _step(w, x):
    h = x @ w
    for _ in range(6):
        h = jnp.tanh(h) * 0.5 + h
    return h


def _dump(folder: Path) -> Path:
    """A real dump of :func:`_step`'s compile in ``folder`` (XLA:CPU)."""
    lowered = jax.jit(_step).lower(jnp.ones((16, 16)), jnp.ones((8, 16)))
    with persistent_cache_disabled():  # a cache hit would run no XLA and dump nothing
        lowered.compile(compiler_options={"xla_dump_to": str(folder), **xla_dump_options("cpu")})
    return folder


def _read(folder: Path) -> MetalDump:
    return read_dump(folder, "cpu", time.time(), time.time())


@pytest.mark.parametrize("cut", ["empty", "half"])
def test_an_object_file_cut_short_is_nbc610_naming_the_folder_not_elferror(tmp_path, cut):
    folder = _dump(tmp_path / "dump")
    [obj] = folder.glob("*obj-file*.o")
    blob = obj.read_bytes()
    obj.write_bytes(b"" if cut == "empty" else blob[: len(blob) // 2])
    with pytest.raises(NbcompileError) as err:
        dump = _read(folder)
        kernel_code(dump, "multiply_add_fusion", [], ["multiply_add_fusion"])  # today: ELFError
    assert err.value.code == "NBC610"
    assert str(folder) in str(err.value) and obj.name in str(err.value)
    assert "tempfile.tempdir" in err.value.hint and "TMPDIR" in err.value.hint


def test_a_pass_file_cut_short_is_nbc610(tmp_path):
    folder = _dump(tmp_path / "dump")
    step = next(p for p in sorted(folder.glob("module_*.0*.txt")) if p.stat().st_size > 200)
    step.write_bytes(step.read_bytes()[:100])
    with pytest.raises(NbcompileError) as err:
        _read(folder)
    assert err.value.code == "NBC610" and step.name[:60] in str(err.value)


def test_a_whole_dump_is_read(tmp_path):
    dump = _read(_dump(tmp_path / "dump"))
    assert dump.passes is not None and dump.objects and dump.no_passes is None
    assert dump.llvm_ir, "the kernels' LLVM IR (jaxlib 0.12 writes it for xla_dump_emitter_re)"


_FULL_DISK_CHILD = textwrap.dedent(
    """
    import jax.numpy as jnp, nbcompile
    from nbcompile.errors import NbcompileError

    def step(w, x):
        h = x @ w
        for _ in range(24):
            h = jnp.tanh(h) * 0.5 + h
        return h

    c = nbcompile.compile(step, jnp.ones((64, 64)), jnp.ones((32, 64)), passes=True)
    out = c.fn(jnp.ones((64, 64)), jnp.ones((32, 64)))  # the program runs
    print("RAN", float(out[0, 0]) > 0)
    print("NOTE", [n for n in c.notes if "NBC610" in n])
    print("VIEW", "passes" in (c.report().get("extras") or {}))
    print("RUN_PASSES", c.run_passes())  # what %%compile --passes calls: a note, not a failure
    try:
        c.passes
    except NbcompileError as err:
        print("PASSES", err.code, str(err).splitlines()[0])
    """
)


def _unshare() -> list[str] | None:
    """The command that runs a child in a private mount namespace where it may mount a tmpfs,
    None where this machine does not allow it."""
    tool = shutil.which("unshare")
    if tool is None:
        return None
    for prefix in ([tool, "-rm"], [tool, "-m"]):
        probe = subprocess.run(
            [*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /tmp && true"],
            capture_output=True,
        )
        if probe.returncode == 0:
            return prefix
    return None


def test_a_full_disk_under_the_dump_compiles_without_it_and_says_so(tmp_path):
    prefix = _unshare()
    if prefix is None:
        pytest.skip("no private mount namespace here (unshare -rm): the tmpfs case needs one")
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    script = tmp_path / "child.py"
    script.write_text(_FULL_DISK_CHILD)
    shell = (
        f"mount -t tmpfs -o size=64k tmpfs {tiny} && "
        f"dd if=/dev/zero of={tiny}/fill bs=1k count=52 2>/dev/null; "
        f"exec {sys.executable} {script}"
    )
    env = {**os.environ, "TMPDIR": str(tiny), "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    child = subprocess.run(
        [*prefix, "sh", "-c", shell], capture_output=True, text=True, env=env, timeout=300
    )
    assert child.returncode == 0, child.stderr[-3000:]
    lines = {line.split(" ", 1)[0]: line for line in child.stdout.splitlines()}
    assert lines["RAN"] == "RAN True", child.stdout
    assert "NBC610" in lines["NOTE"] and str(tiny) in lines["NOTE"]
    assert lines["VIEW"] == "VIEW False"  # no Passes tab from a dump cut short, no ELFError
    assert lines["RUN_PASSES"] == "RUN_PASSES None"
    assert lines["PASSES"].startswith("PASSES NBC610") and str(tiny) in lines["PASSES"]
    assert "ELFError" not in child.stderr


def test_no_folder_for_the_dump_compiles_without_it(monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", full)
    c = nbcompile.compile(_step, jnp.ones((16, 16)), jnp.ones((8, 16)), passes=True)
    assert c.fn(jnp.ones((16, 16)), jnp.ones((8, 16))).shape == (8, 16)
    [note] = [n for n in c.notes if "NBC610" in n]
    assert tempfile.gettempdir() in note and "No space left" in note
    assert c.run_passes() is None  # --passes: a note, not a failed cell
    with pytest.raises(NbcompileError) as err:
        c.passes  # noqa: B018
    assert err.value.code == "NBC610"


_TEXT_OFF_CHILD = textwrap.dedent(
    """
    import jax.numpy as jnp, nbcompile

    def step(x):
        return jnp.tanh(x * 2.0) * 3.0

    c = nbcompile.compile(step, jnp.ones((8, 8)))
    log = c.passes
    print("PASSES", log is not None and len(log.steps) > 0)
    """
)


def test_xla_flags_turning_the_text_dump_off_still_give_the_pass_log(tmp_path):
    """``XLA_FLAGS=--xla_dump_hlo_as_text=false --xla_dump_hlo_as_proto=true`` left no text in
    nbcompile's dump (text off alone, XLA falls back to text), and ``c.passes`` was silently
    None: nbcompile's dump options now override them."""
    script = tmp_path / "child.py"
    script.write_text(_TEXT_OFF_CHILD)
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_dump_hlo_as_text=false --xla_dump_hlo_as_proto=true",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(ROOT),
    }
    child = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert "PASSES True" in child.stdout, child.stdout + child.stderr[-2000:]


def test_a_dump_without_pass_files_says_why(tmp_path, monkeypatch):
    folder = tmp_path / "dump"
    folder.mkdir()
    (folder / "module_0001.jit_f.debug_options").write_text("xla_dump_to: x\n")
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_hlo_as_text=false --xla_cpu_foo=1")
    dump = _read(folder)
    assert dump.passes is None
    assert "no pass files" in dump.no_passes and "--xla_dump_hlo_as_text=false" in dump.no_passes
    assert "--xla_cpu_foo" not in dump.no_passes
    c = nbcompile.compile(_step, jnp.ones((16, 16)), jnp.ones((8, 16)))
    c._metal = dump
    assert c.passes is None and dump.no_passes in c.notes


def test_a_passes_cell_on_a_full_disk_runs_and_says_so(shell, monkeypatch):
    """``%%compile --passes`` where no dump can be written: the cell compiles, binds and runs
    the function, with the NBC610 note (the only part asked, --passes, does not fail it)."""
    shell.reset(new_session=False)
    assert shell.run_cell("import jax.numpy as jnp\nw = jnp.ones((8, 8))").success

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", full)
    cell = (
        "%%compile -f -q --passes\ndef full_step(w):\n    return jnp.tanh(w) * 2.0\nfull_step(w)\n"
    )
    result = shell.run_cell(cell)
    assert result.success, result.error_in_exec
    comp = nbcompile.last()
    assert any("NBC610" in n for n in comp.notes)
    assert shell.run_cell("full_out = full_step(w)").success
    assert float(shell.user_ns["full_out"][0, 0]) == pytest.approx(2 * 0.7615941559557649)
