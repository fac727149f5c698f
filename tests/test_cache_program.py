"""The cache key is the program: a re-run of an unchanged ``%%compile`` cell computes what a fresh
``jax.jit`` of the live objects computes, whatever changed in between (SPEC §9.2, issue 40).

Each case defines a model in one cell, compiles it from another (an IPython shell with the
magic loaded), changes ONE thing the traced code reads without changing the cell — a class
attribute (the ``class CFG:`` pattern), a module's function edited under ``%autoreload 2`` or
``importlib.reload``, a list or dict in a closure mutated in place, a NumPy global changed in
place, a global rebound, a ``functools.partial``'s arguments, a config dict or dataclass — and
re-runs it. The program's outputs on its live arguments must equal a fresh ``jax.jit`` of the
same call, and a run that changed nothing must be a cache hit (XLA skipped). The Flax, Equinox
and Keras state changes are in tests/test_cache_live.py; the property test at the end makes
random edits of all of these.
"""

from __future__ import annotations

import itertools
import os
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbcompile

from .helpers import XlaCompiles

COMPILES = XlaCompiles()
_MODULES = itertools.count()


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    return shell


def _run(ip, cell: str) -> None:
    res = ip.run_cell(cell)
    assert res.success, (cell, res.error_before_exec or res.error_in_exec)


def _compile(ip, cell: str, *, hit: bool | None, what: str) -> nbcompile.Compilation:
    """Run the ``%%compile`` cell; its program on its live arguments must equal a fresh
    ``jax.jit`` of the cell's call (``ip.user_ns['CALL']``) on the live objects."""
    before = COMPILES.count
    _run(ip, cell)
    c = nbcompile.last()
    compiled = COMPILES.count - before
    _run(ip, "_want = np.asarray(jax.jit(lambda: " + ip.user_ns["CALL"] + ")())")
    got = np.asarray(jax.device_get(c.fn(*c.args, **c.kwargs)))
    np.testing.assert_allclose(got, ip.user_ns["_want"], rtol=1e-5, atol=1e-6, err_msg=what)
    if hit is not None:
        assert c.cache_hit is hit, f"after {what}: cache_hit={c.cache_hit}"
    if c.cache_hit:
        assert compiled == 0, f"after {what}: a cache hit ran XLA"
    # every run traced and lowered, hit or not (SPEC §9.2)
    assert {"trace", "lower"} <= set(c.timings), c.timings
    return c


def _cell(call: str) -> str:
    return f"%%compile -q\n{call}\n"


def test_a_class_attribute_changed(ip):
    """``class CFG:`` hyper-parameters: ``CFG.temperature = 0.25``, then ``CFG.n_layers = 4;
    CFG.act = "tanh"`` (issue 40: both were stale cache hits)."""
    _run(
        ip,
        textwrap.dedent(
            """
            import jax, jax.numpy as jnp, numpy as np
            class CFG:
                temperature = 1.0
                n_layers = 2
                act = "relu"
            W = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
            x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
            def logprobs(x):
                h = x
                for _ in range(CFG.n_layers):
                    h = h @ W
                    h = jnp.tanh(h) if CFG.act == "tanh" else jax.nn.relu(h)
                return jax.nn.log_softmax(h / CFG.temperature)
            CALL = "logprobs(x)"
            """
        ),
    )
    cell = _cell("logprobs(x)")
    _compile(ip, cell, hit=None, what="the first run")
    _compile(ip, cell, hit=True, what="nothing changed")
    _run(ip, "CFG.temperature = 0.25")
    _compile(ip, cell, hit=False, what="CFG.temperature = 0.25")
    _run(ip, 'CFG.n_layers = 4; CFG.act = "tanh"')
    c = _compile(ip, cell, hit=False, what='CFG.n_layers = 4; CFG.act = "tanh"')
    assert str(c.jaxpr).count("tanh") == 4
    _run(ip, "CFG.temperature = 1.0; CFG.n_layers = 2; CFG.act = 'relu'")
    _compile(ip, cell, hit=True, what="back to the first configuration")


def _module(tmp_path: Path, body: str) -> str:
    """Write a fresh importable module (a new name each test) and return its name."""
    name = f"nbc_user_model_{os.getpid()}_{next(_MODULES)}"
    (tmp_path / f"{name}.py").write_text(body)
    if str(tmp_path) not in sys.path:
        sys.path.insert(0, str(tmp_path))
    return name


def _edit(path: Path, body: str) -> None:
    """Rewrite a module file so that both autoreload and Python's bytecode cache see a change
    (a later modification time, even within the file system's time resolution)."""
    stat = path.stat()
    path.write_text(body)
    os.utime(path, (stat.st_atime + 10, stat.st_mtime + 10))


MODULE = '''"""The user's model code in a .py file."""
import jax.numpy as jnp


def block(x, w):
    h = x @ w
    return jnp.tanh(h)
'''

# the edit: two lines more above, another activation (its ops move from lines 6-7 to 8-9)
MODULE_EDITED = '''"""The user's model code in a .py file.

Edited."""
import jax.numpy as jnp


def block(x, w):
    h = x @ w
    return jnp.sin(h)
'''


def _module_lines(c: nbcompile.Compilation, path: Path) -> set[int]:
    return {
        loc.line
        for f in c.fusions
        for loc in f.locations
        if os.path.realpath(loc.file) == os.path.realpath(path)
    }


@pytest.mark.parametrize("how", ["%autoreload 2", "%autoreload 2 --full", "importlib.reload"])
def test_a_module_function_edited_and_reloaded(ip, tmp_path, how):
    """Model code in a .py file, called as ``mymodel.block`` from the notebook, edited and
    reloaded: the re-run computes with the new code and its fusions name the new lines (issue
    40: a stale hit with the old activation, fusions on the old lines 6-7).

    IPython 9's default ``%autoreload 2`` (deduperreload) compiles the new function without its
    line numbers (ipython/ipython#15359: Python itself then reports lines counted from the top
    of the file): the program is still the new one, and a note names the fix."""
    from nbcompile import _compat

    name = _module(tmp_path, MODULE)
    path = tmp_path / f"{name}.py"
    if how.startswith("%"):
        _run(ip, f"%load_ext autoreload\n{how}")
    try:
        _run(
            ip,
            f"import jax, jax.numpy as jnp, numpy as np, importlib\nimport {name} as mymodel\n"
            "w = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)\n"
            "x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)\n"
            "def forward(x):\n    return mymodel.block(x, w) * 2\n"
            "CALL = 'forward(x)'\n",
        )
        cell = _cell("forward(x)")
        c = _compile(ip, cell, hit=None, what="the first run")
        assert _module_lines(c, path) and _module_lines(c, path) <= {6, 7}, _module_lines(c, path)
        _edit(path, MODULE_EDITED)
        if how == "importlib.reload":
            _run(ip, "mymodel = importlib.reload(mymodel)")
        else:
            _run(ip, "pass")  # autoreload reloads before this cell runs
        # compiled, or XLA skipped where this session compiled the same program before (an
        # earlier case's module): either way this run's program, with this run's lines
        c = _compile(ip, cell, hit=None, what=f"the module edited ({how})")
        assert "sin" in str(c.jaxpr) and "tanh" not in str(c.jaxpr)
        lines = _module_lines(c, path)
        assert lines and not lines & {6, 7}, f"fusions name the old lines {sorted(lines)}"
        warned = [n for n in c.notes if "ipython/ipython#15359" in n]
        if _compat.autoreload_dedupes():
            assert warned and "`block`" in warned[0] and "--full" in warned[0], c.notes
        else:
            assert not warned, warned
            assert lines <= {8, 9}, f"fusions name {sorted(lines)}, the code is on 8-9"
        again = _compile(ip, cell, hit=True, what="nothing changed since the edit")
        assert [n for n in again.notes if "ipython/ipython#15359" in n] == warned
    finally:
        if how.startswith("%"):
            ip.run_cell("%autoreload 0")
        sys.modules.pop(name, None)


def test_a_closure_over_a_list_or_dict_mutated_in_place(ip):
    _run(
        ip,
        textwrap.dedent(
            """
            import jax, jax.numpy as jnp, numpy as np
            def make():
                scales = [1.0, 2.0]
                table = {"bias": 0.5, "act": "tanh"}
                def f(x):
                    h = x * scales[0] + scales[1] + table["bias"]
                    return jnp.tanh(h) if table["act"] == "tanh" else jnp.sin(h)
                return f, scales, table
            f, scales, table = make()
            x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
            CALL = "f(x)"
            """
        ),
    )
    cell = _cell("f(x)")
    _compile(ip, cell, hit=None, what="the first run")
    for change in ("scales[1] = 5.0", "table['bias'] = -1.0", "table['act'] = 'sin'"):
        _run(ip, change)
        _compile(ip, cell, hit=False, what=change)
    _compile(ip, cell, hit=True, what="nothing changed")


def test_a_global_numpy_array_changed_in_place(ip, tmp_path):
    """In the notebook and in a module's namespace (``mymodel.TABLE``)."""
    name = _module(tmp_path, "import numpy as np\nTABLE = np.ones((1, 8), np.float32)\n")
    _run(
        ip,
        textwrap.dedent(
            f"""
            import jax, jax.numpy as jnp, numpy as np
            import {name} as mymodel
            T = np.eye(8, dtype=np.float32)
            def f(x):
                return (x @ T) * mymodel.TABLE
            x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
            CALL = "f(x)"
            """
        ),
    )
    try:
        cell = _cell("f(x)")
        _compile(ip, cell, hit=None, what="the first run")
        _run(ip, "T[0, 1] = 7.0")
        _compile(ip, cell, hit=False, what="T[0, 1] = 7.0")
        _run(ip, "mymodel.TABLE[0, 2:5] *= 3")
        _compile(ip, cell, hit=False, what="mymodel.TABLE[0, 2:5] *= 3")
    finally:
        sys.modules.pop(name, None)


def test_a_global_rebound(ip, tmp_path):
    """A notebook global (a scalar, a JAX array) and a module attribute rebound."""
    name = _module(tmp_path, "SHIFT = 0.5\n")
    _run(
        ip,
        textwrap.dedent(
            f"""
            import jax, jax.numpy as jnp, numpy as np
            import {name} as mymodel
            SCALE = 2.0
            W = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
            def f(x):
                return jnp.tanh(x @ W) * SCALE + mymodel.SHIFT
            x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
            CALL = "f(x)"
            """
        ),
    )
    try:
        cell = _cell("f(x)")
        _compile(ip, cell, hit=None, what="the first run")
        for change in ("SCALE = 3.0", "W = W * 2", "mymodel.SHIFT = -1.5"):
            _run(ip, change)
            _compile(ip, cell, hit=False, what=change)
        _compile(ip, cell, hit=True, what="nothing changed")
    finally:
        sys.modules.pop(name, None)


def test_functools_partial_arguments_changed(ip):
    _run(
        ip,
        textwrap.dedent(
            """
            import functools, jax, jax.numpy as jnp, numpy as np
            def f(x, scale, act="tanh"):
                return (jnp.tanh(x) if act == "tanh" else jnp.sin(x)) * scale
            g = functools.partial(f, scale=2.0)
            x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
            CALL = "g(x)"
            """
        ),
    )
    cell = _cell("g(x)")
    _compile(ip, cell, hit=None, what="the first run")
    _run(ip, "g = functools.partial(f, scale=3.0)")
    _compile(ip, cell, hit=False, what="g = functools.partial(f, scale=3.0)")
    _run(ip, "g.keywords['act'] = 'sin'")  # a partial's keywords are a mutable dict
    _compile(ip, cell, hit=False, what="g.keywords['act'] = 'sin'")
    _compile(ip, cell, hit=True, what="nothing changed")


def test_a_config_dict_and_a_dataclass(ip, tmp_path):
    """In the notebook, and a dict in a module the code reads (``mymodel.CONFIG``)."""
    name = _module(tmp_path, "CONFIG = {'offset': 0.0}\n")
    _run(
        ip,
        textwrap.dedent(
            f"""
            import dataclasses, jax, jax.numpy as jnp, numpy as np
            import {name} as mymodel
            @dataclasses.dataclass
            class Config:
                depth: int = 2
                act: str = "tanh"
            @dataclasses.dataclass(frozen=True)
            class Frozen:
                scale: float = 2.0
            conf, frozen = Config(), Frozen()
            cfg = {{"bias": 0.5, "norm": True}}
            W = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
            def f(x):
                for _ in range(conf.depth):
                    x = x @ W
                    x = jnp.tanh(x) if conf.act == "tanh" else jnp.sin(x)
                x = x * frozen.scale + cfg["bias"] + mymodel.CONFIG["offset"]
                return x / jnp.linalg.norm(x) if cfg["norm"] else x
            x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
            CALL = "f(x)"
            """
        ),
    )
    cell = _cell("f(x)")
    _compile(ip, cell, hit=None, what="the first run")
    for change in (
        "cfg['bias'] = -2.0",
        "cfg['norm'] = False",
        "conf.depth = 3",
        "conf.act = 'sin'",
        "frozen = dataclasses.replace(frozen, scale=0.5)",
        "mymodel.CONFIG['offset'] = 3.0",
    ):
        _run(ip, change)
        _compile(ip, cell, hit=False, what=change)
    sys.modules.pop(name, None)


def test_a_host_callback_edited_is_never_served_stale(ip):
    """A program calling back into Python (``jax.pure_callback``) does not contain the Python
    function: the same module can call another function. Such programs are compiled on every
    run, never served from the cache."""
    _run(
        ip,
        textwrap.dedent(
            """
            import jax, jax.numpy as jnp, numpy as np
            def host(v):
                return np.asarray(v) * 2
            def f(x):
                return jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1
            x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
            CALL = "f(x)"
            """
        ),
    )
    cell = _cell("f(x)")
    _compile(ip, cell, hit=None, what="the first run")
    _run(ip, "def host(v):\n    return np.asarray(v) * 5")
    _compile(ip, cell, hit=False, what="the callback redefined")


def test_a_rerun_compiles_nothing_and_shows_its_trace_and_lowering(ip):
    """``c.cache_hit``: XLA skipped; ``c.timings``: the trace and lowering this run paid,
    the phases still adding up to the cell."""
    _run(
        ip,
        "import jax, jax.numpy as jnp, numpy as np\n"
        "x = jnp.ones((4, 8), jnp.float32)\n"
        "def f(x):\n    return jnp.tanh(x) * 2\n"
        "CALL = 'f(x)'\n",
    )
    first = _compile(ip, _cell("f(x)"), hit=None, what="the first run")
    again = _compile(ip, _cell("f(x)"), hit=True, what="nothing changed")
    assert again.program is first.program
    assert "compile" not in again.timings and "compile" in first.timings
    assert again.timings["trace"] > 0 and again.timings["lower"] > 0
    assert again.timings["cache_lookup"] >= 0


# --- random edits ---------------------------------------------------------------------------

PROPERTY_SETUP = """
import jax, jax.numpy as jnp, numpy as np, importlib
import {name} as mymodel
class CFG:
    scale = 1.0
    act = "tanh"
SHIFT = 0.0
TABLE = np.ones((1, 8), np.float32)
opts = {{"depth": 1}}
W = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)) / 3, jnp.float32)
def make():
    extra = [0.0]
    def model(x):
        for _ in range(opts["depth"]):
            x = mymodel.layer(x @ W)
            x = jnp.tanh(x) if CFG.act == "tanh" else jnp.cos(x)
        return x * CFG.scale * TABLE + SHIFT + extra[0]
    return model, extra
model, extra = make()
x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
CALL = "model(x)"
"""

LAYER = "import jax.numpy as jnp\n{pad}\ndef layer(h):\n    return jnp.{fn}(h) * {k}\n"

EDITS = st.one_of(
    st.tuples(st.just("CFG.scale = {}"), st.sampled_from(["1.0", "0.5"])),
    st.tuples(st.just("CFG.act = {!r}"), st.sampled_from(["tanh", "cos"])),
    st.tuples(st.just("SHIFT = {}"), st.sampled_from(["0.0", "2.0"])),
    st.tuples(st.just("TABLE[0, 3] = {}"), st.sampled_from(["1.0", "-4.0"])),
    st.tuples(st.just("opts['depth'] = {}"), st.sampled_from(["1", "2"])),
    st.tuples(st.just("extra[0] = {}"), st.sampled_from(["0.0", "0.25"])),
    st.tuples(
        st.just("module"),
        st.tuples(st.sampled_from(["sin", "tanh"]), st.sampled_from(["1.0", "3.0"]), st.booleans()),
    ),
)


@pytest.fixture(scope="module")
def random_edits(shell, tmp_path_factory):
    """One notebook for every example (a fresh model each example would compile every program
    again; kept, the cache meets earlier programs again and must tell them apart)."""
    shell.reset(new_session=False)
    folder = tmp_path_factory.mktemp("random-edits")
    name = _module(folder, LAYER.format(pad="", fn="sin", k="1.0"))
    _run(shell, PROPERTY_SETUP.format(name=name))
    yield shell, folder / f"{name}.py"
    sys.modules.pop(name, None)


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(edits=st.lists(EDITS, min_size=1, max_size=3))
def test_random_edits_then_the_rerun_equals_a_fresh_jit(random_edits, edits):
    ip, path = random_edits
    cell = _cell("model(x)")
    for template, value in edits:
        if template == "module":
            fn, k, pad = value
            _edit(path, LAYER.format(pad="# moved\n# down\n" if pad else "", fn=fn, k=k))
            _run(ip, "mymodel = importlib.reload(mymodel)")
        else:
            _run(ip, template.format(value))
        _compile(ip, cell, hit=None, what=f"{template} <- {value}")
    _compile(ip, cell, hit=True, what="nothing changed")


KERNEL_SETUP = """%load_ext nbcompile
%load_ext autoreload
%autoreload 2 --full
import json, os, sys, jax, jax.numpy as jnp, numpy as np, nbcompile
sys.path.insert(0, {folder!r})
import {name} as mymodel
class CFG:
    temperature = 1.0
    n_layers = 2
    act = "relu"
W = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
def model(x):
    h = x
    for _ in range(CFG.n_layers):
        h = mymodel.block(h, W)
        h = jnp.tanh(h) if CFG.act == "tanh" else jax.nn.relu(h)
    return jax.nn.log_softmax(h / CFG.temperature)"""

KERNEL_PROBE = """c = nbcompile.last()
_want = np.asarray(jax.jit(lambda: model(x))())
_got = np.asarray(c.fn(*c.args, **c.kwargs))
print("PROBE", json.dumps({{"hit": c.cache_hit, "d": float(np.max(np.abs(_got - _want))),
    "lines": sorted({{l.line for f in c.fusions for l in f.locations
                     if l.file.endswith({file!r})}}),
    "timings": sorted(c.timings)}}))"""


@pytest.mark.kernel
def test_class_attributes_and_an_edited_module_in_a_real_kernel(tmp_path):
    """The issue's two stories in ipykernel (its cell files are named by content, so a re-run
    is found by the cheap digest): ``CFG.temperature = 0.25``, then ``CFG.n_layers = 4;
    CFG.act = "tanh"``, then the module's ``block`` edited under ``%autoreload 2 --full``; every
    run equal to a fresh jit, unchanged re-runs served from the cache, fusions on the module's
    current lines."""
    import json

    from .test_kernel import execute, notebook, text_of

    name = f"nbc_kernel_model_{os.getpid()}"
    path = tmp_path / f"{name}.py"
    path.write_text(MODULE)
    edit = (
        f"import os, pathlib\np = pathlib.Path({str(path)!r})\nst = p.stat()\n"
        f"p.write_text({MODULE_EDITED!r})\nos.utime(p, (st.st_atime + 10, st.st_mtime + 10))"
    )
    compile_cell = "%%compile -q\nmodel(x)"
    probe = KERNEL_PROBE.format(file=f"{name}.py")
    cells = [KERNEL_SETUP.format(folder=str(tmp_path), name=name)]
    for change in (
        None,
        None,
        "CFG.temperature = 0.25",
        'CFG.n_layers = 4; CFG.act = "tanh"',
        None,
        edit,
        None,
    ):
        if change is not None:
            cells.append(change)
        cells += [compile_cell, probe]
    nb = execute(notebook(*cells))
    probes = [
        json.loads(text_of(cell).split("PROBE", 1)[1])
        for cell in nb.cells
        if "PROBE" in text_of(cell)
    ]
    hits = [p["hit"] for p in probes]
    assert hits == [False, True, False, False, True, False, True], probes
    assert all(p["d"] <= 1e-5 for p in probes), probes
    assert all({"trace", "lower"} <= set(p["timings"]) for p in probes), probes
    assert probes[0]["lines"] and set(probes[0]["lines"]) <= {6, 7}, probes
    assert probes[-2]["lines"] and set(probes[-2]["lines"]) <= {8, 9}, probes
    assert probes[-1]["lines"] == probes[-2]["lines"], probes


def test_a_rerun_probes_without_recording_calls_and_a_new_program_records_them(ip):
    """A cell run before is traced first without recording the user's calls (the look-up needs
    only the program); a program found new that way is traced again with the recording, so its
    view still groups by the user's functions, and the look-up's trace is shown as such
    (``cache_lookup.probe_trace``)."""
    _run(
        ip,
        textwrap.dedent(
            """
            import jax, jax.numpy as jnp, numpy as np
            SCALE = 2.0
            def block(h):
                return jnp.tanh(h) * SCALE
            def probed(x):
                return block(block(x))
            x = jnp.ones((4, 8), jnp.float32)
            CALL = "probed(x)"
            """
        ),
    )
    cell = _cell("probed(x)")  # a cell no other test runs: its first run records
    first = _compile(ip, cell, hit=None, what="the first run")
    recorded = [c.label for c in first.stages.calls.calls]
    assert recorded and not any(k.startswith("cache_lookup.probe") for k in first.timings)
    # the cell's first probe does not know the program by its probe yet: found by the
    # recording trace, then by the probe from the next run on
    second = _compile(ip, cell, hit=True, what="nothing changed")
    assert second.program is first.program and "cache_lookup.probe_trace" in second.timings
    again = _compile(ip, cell, hit=True, what="nothing changed, again")
    assert again.program is first.program
    assert not any(k.startswith("cache_lookup.probe") for k in again.timings), again.timings
    _run(ip, "SCALE = 3.0")
    changed = _compile(ip, cell, hit=False, what="SCALE = 3.0")
    assert [c.label for c in changed.stages.calls.calls] == recorded  # recorded again
    assert {"cache_lookup.probe_trace", "cache_lookup.probe_lower"} <= set(changed.timings)
    assert any("block" in (f.get("functions") or [""])[0] for f in changed.report()["fusions"])
    back = _compile(ip, cell, hit=True, what="SCALE = 3.0 again")
    assert back.program is changed.program


MOVED_SETUP = """
import jax, jax.numpy as jnp, numpy as np
W = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
{pad}def block(h):
    h = h @ W
    return jnp.tanh(h) * 2.0
def model(x):
    return jnp.sin(block(block(x))).sum()
CALL = "model(x)"
"""


def _model_cell_lines(ip, c: nbcompile.Compilation) -> tuple[set[int], set[int]]:
    """(lines of the model cell the fusions name, the lines its operations are on now)."""
    cell = max(n for n, text in enumerate(ip.user_ns["In"]) if "def block(h):" in text)
    text = ip.user_ns["In"][cell].splitlines()
    ops = {i for i, line in enumerate(text, 1) if any(op in line for op in ("@", "tanh", "sin"))}
    named = {loc.line for f in c.fusions for loc in f.locations if loc.cell == cell}
    return named, ops


@pytest.mark.parametrize("opts", ["", " --grad"])
def test_moved_code_reuses_the_executable_and_names_the_new_lines(ip, opts):
    """A comment added above the model (every line moves): the same program, so XLA is skipped
    (its executable reused, ``c.cache_hit``) and the analysis re-reads the lines from this
    run's program: the fusions name the lines the code is on now, as a fresh compile's do
    (with ``--grad``, the gradient program's too)."""
    for pad in ("", "# a comment\n# and another\n"):
        assert ip.run_cell(MOVED_SETUP.format(pad=pad), store_history=True).success
        cell = f"%%compile -q{opts}\nmodel(x)\n"
        c = _compile(ip, cell, hit=None, what=f"model cell with {pad!r}")
        named, ops = _model_cell_lines(ip, c)
        assert named and named <= ops, (named, ops)
        if pad:
            assert c.cache_hit and c.stages.xla_compiles == 0, c.timings
            assert "relocate" in c.timings and "compile" not in c.timings
            assert any("executable is reused" in n for n in c.notes), c.notes
            # the reference: compiled again (by XLA, or served by JAX's persistent cache, whose
            # key has the same places)
            _run(ip, cell.replace("-q", "-q -f"))
            fresh = nbcompile.last()
            assert not fresh.cache_hit

            def view(comp: nbcompile.Compilation) -> list[tuple]:
                return sorted(
                    (f.name, tuple(sorted(f.source_lines)), tuple(sorted(map(str, f.locations))))
                    for f in comp.fusions
                )

            assert view(c) == view(fresh)
            assert c.hlo.count("stack_frame_id") == fresh.hlo.count("stack_frame_id")
            assert c.compiled.as_text() == c.hlo  # JAX's own object names the new lines too
            if opts:
                assert c.grad is not None and fresh.grad is not None
                assert c.grad.stages.xla_compiles == 0 and "grad_relocate" in c.timings
                assert view(c.grad) == view(fresh.grad)


def test_the_key_cuts_call_stacks_where_the_view_does():
    """The cache key leaves out the frames that called the program by the same rule as the
    view's locator (nbcompile/analysis/lines.py): the two lists of nbcompile's tracing modules
    agree."""
    import nbcompile.analysis.lines as lines
    from nbcompile.stages import _CALLERS, called_the_program

    assert _CALLERS == lines._CALLERS
    for path in (*_CALLERS, lines._PACKAGE + "capture/models.py", "/home/me/model.py"):
        probe = path if path.endswith(".py") else path + "__init__.py"
        assert called_the_program(probe) == lines._is_ours(probe), probe
