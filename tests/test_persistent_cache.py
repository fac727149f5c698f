"""JAX's persistent compilation cache (switched on by ``%load_ext nbcompile``) gives exactly
what a fresh compile gives: the lines of the *current* cells, and XLA's dumps when asked.

JAX keys an executable without the module's source locations and without ``xla_dump_to``
(0.10.2 and 0.12.0.1); nbcompile adds both rules (``_compat.key_persistent_cache_by_locations``),
leaving out the frames that called nbcompile, as its own cache does (nbcompile/stages/key.py). Each test points the
cache at a fresh folder and caches every compile (no minimum compile time), so it does not
depend on how busy the machine is.
"""

from __future__ import annotations

import glob

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import compilation_cache

import nbcompile

from .helpers import XlaCompiles

COMPILES = XlaCompiles()  # compiles asked of JAX (JAX counts a persistent-cache hit as one)


class CacheHits:
    """Counts executables JAX served from its persistent cache."""

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_listener(self._listen)

    def _listen(self, name: str, **_: object) -> None:
        if name == "/jax/compilation_cache/cache_hits":
            self.count += 1


HITS = CacheHits()

MODEL = """class Mlp:
    def __init__(self, w1, w2):
        self.w1, self.w2 = w1, w2

    def __call__(self, x):
        h = jnp.tanh(x @ self.w1)
        return jnp.sin(h @ self.w2) * 2.0
"""

# The user's edit: a docstring moves ``__call__`` down three lines; the program is the same.
EDITED = MODEL.replace(
    "class Mlp:\n", 'class Mlp:\n    """A two-layer perceptron.\n\n    With a docstring."""\n'
)

SETUP = """import jax, jax.numpy as jnp, numpy as np
rng = np.random.default_rng(0)
w1 = jnp.asarray(rng.normal(size=(16, 32)), jnp.float32)
w2 = jnp.asarray(rng.normal(size=(32, 8)), jnp.float32)
x = jnp.asarray(rng.normal(size=(4, 16)), jnp.float32)"""

COMPILE = """%%compile
def forward(x):
    return mlp(x)
forward(x)"""


@pytest.fixture
def cache_dir(tmp_path):
    """JAX's persistent cache in a fresh folder, every compile cached; restored after."""
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    saved = {name: getattr(jax.config, name) for name in names}
    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "jax-cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    compilation_cache.reset_cache()
    yield tmp_path / "jax-cache"
    for name, value in saved.items():
        jax.config.update(name, value)
    jax.config.update("jax_enable_compilation_cache", enabled)
    compilation_cache.reset_cache()


def _model_lines(ip) -> tuple[list[int], set[int]]:
    """(the model cell's lines named by the fusions, the lines of its two ops)."""
    c = nbcompile.last()
    model_cell = max(n for n, text in enumerate(ip.user_ns["In"]) if "class Mlp" in text)
    text = ip.user_ns["In"][model_cell].splitlines()
    ops = {i for i, line in enumerate(text, 1) if "jnp.tanh" in line or "jnp.sin" in line}
    named = sorted({loc.line for f in c.fusions for loc in f.locations if loc.cell == model_cell})
    return named, ops


@pytest.mark.parametrize("force", ["", " -f"])
def test_an_edited_model_cell_gets_its_new_lines_from_a_warm_cache(shell, cache_dir, force):
    """The user's story: model cell, ``%%compile`` cell; add a docstring to the model (its
    ``__call__`` moves down three lines), re-run both. The fusions name the new lines: nbcompile
    reuses the executable and re-reads the lines, and with ``-f`` (XLA asked again) JAX's
    persistent cache does not serve the old lines."""
    shell.reset(new_session=False)
    assert shell.run_cell(SETUP, store_history=True).success
    for model in (MODEL, EDITED):
        assert shell.run_cell(model + "mlp = Mlp(w1, w2)", store_history=True).success
        cell = COMPILE.replace("%%compile", "%%compile" + force)  # re-run, as the user does
        before = HITS.count
        res = shell.run_cell(cell, store_history=True)
        assert res.success, res.error_in_exec
        named, ops = _model_lines(shell)
        assert named and set(named) <= ops, (named, ops)
        if model is EDITED and force:
            assert HITS.count == before, "JAX's persistent cache served the old lines"
    assert any(cache_dir.iterdir()), "nothing was written to the persistent cache"


def test_a_rerun_of_unchanged_cells_still_hits_the_cache(shell, cache_dir):
    """The locations in the key cost no hit: the same cells run again (another execution
    count, the same code) are served from the persistent cache, with the right lines."""
    shell.reset(new_session=False)
    assert shell.run_cell(SETUP, store_history=True).success
    hits = []
    for _ in range(2):
        assert shell.run_cell(EDITED + "mlp = Mlp(w1, w2)", store_history=True).success
        before = HITS.count
        res = shell.run_cell(COMPILE.replace("%%compile", "%%compile -f"), store_history=True)
        assert res.success, res.error_in_exec
        hits.append(HITS.count - before)
        named, ops = _model_lines(shell)
        assert named and set(named) <= ops, (named, ops)
    assert hits[0] == 0 and hits[1] >= 1, f"persistent-cache hits per run: {hits}"
    assert nbcompile.last().stages.xla_compiles == 0  # served: XLA did not compile


def test_jax_calls_nbcompiles_key_for_its_persistent_cache():
    """The reach nbcompile's persistent-cache rule depends on: ``jax._src.compiler.
    _get_cache_key(options, backend, computation, devices, ...)``, looked up by JAX on each
    compile (checked with JAX 0.10.2 and 0.12.0.1). If a JAX release moves or renames it, this
    fails naming it; nbcompile then leaves the persistent cache off (``enable_persistent_cache``)
    rather than serve executables that name another kernel's lines."""
    import inspect

    from jax._src import compiler

    from nbcompile import _compat

    reach = f"jax._src.compiler._get_cache_key (JAX {jax.__version__})"
    assert hasattr(compiler, "_get_cache_key"), f"{reach} is gone: re-find where JAX keys"
    assert _compat.persistent_cache_keyed(), f"{reach} is not nbcompile's location-keyed wrapper"
    wrapped = inspect.unwrap(compiler._get_cache_key)
    params = list(inspect.signature(wrapped).parameters)
    assert params[:4] == ["options", "backend", "computation", "devices"], (reach, params)
    source = inspect.getsource(compiler)
    assert "partial(_get_cache_key," in source or "_get_cache_key(" in source, (
        f"{reach}: JAX no longer calls it by that name"
    )


def test_who_called_nbcompile_is_not_in_the_key(cache_dir):
    """JAX records the whole Python stack in each operation's location, also the frames that
    called nbcompile (a script's line, IPython's machinery). They are no part of the program
    the view shows, so the key leaves them out: the same program compiled from another line of
    a script is served from the cache, with its fusions on the same lines."""

    def layer(x):
        return jnp.sin(jnp.tanh(x) * 3.0)

    x = jnp.ones((8, 8), jnp.float32)
    first = nbcompile.compile(layer, x)  # this line ...
    before = HITS.count
    again = nbcompile.compile(layer, x)  # ... and this one are the callers
    assert HITS.count - before == 1, "the same program from another line was compiled again"
    assert again.stages.xla_compiles == 0
    lines = [sorted({loc.line for f in c.fusions for loc in f.locations}) for c in (first, again)]
    assert lines[0] and lines[0] == lines[1], lines


def test_a_dump_asked_of_a_cached_program_is_written(cache_dir, tmp_path):
    """``xla_dump_to`` (tutorial 02's pass-by-pass walk) after the same program was cached:
    XLA runs and writes the dump (JAX leaves the option out of its key)."""

    def layer(w, x):
        return jnp.tanh(x @ w).sum()

    w = jnp.ones((8, 8), jnp.float32)
    x = jnp.ones((2, 8), jnp.float32)
    jax.jit(layer).lower(w, x).compile()  # warms the cache
    assert any(cache_dir.iterdir())
    dump = tmp_path / "dump"
    compiled = jax.jit(layer).lower(w, x).compile(compiler_options={"xla_dump_to": str(dump)})
    assert glob.glob(f"{dump}/*jit_layer*before_optimizations.txt"), "XLA wrote no dump"
    assert np.isclose(float(compiled(w, x)), float(layer(w, x)))


def test_ablation_compiles_every_variant_even_when_cached(cache_dir):
    """``--ablate`` reports each variant's compile time: every variant is compiled by XLA,
    also when the same variants were cached by an earlier ablation."""
    from nbcompile.measure.ablate import ablate

    w = jnp.ones((8, 8), jnp.float32)
    x = jnp.ones((2, 8), jnp.float32)
    for _ in range(2):  # the first ablation would fill the cache with every variant

        def layer(w, x):  # a new function: a new lowering, not JAX's in-memory cache
            return jnp.tanh(x @ w).sum()

        lowered = jax.jit(layer).lower(w, x)
        before = HITS.count, COMPILES.count
        result = ablate(lowered, (w, x), time_it=False)
        compiled = [v for v in result.variants if v.error is None]
        assert len(compiled) >= 2 and COMPILES.count - before[1] == len(compiled)
        assert HITS.count == before[0], "a variant was served from the cache, not compiled"


KERNEL_SETUP = (
    "%load_ext nbcompile\n"
    "jax_config = __import__('jax').config\n"
    "jax_config.update('jax_persistent_cache_min_compile_time_secs', 0)  # cache every compile\n"
    + SETUP
)

PROBE = """import json, nbcompile
c = nbcompile.last()
cell = max(n for n, text in enumerate(In) if text.startswith("class Mlp"))
text = In[cell].splitlines()
print("PROBE", json.dumps({
    "named": sorted({l.line for f in c.fusions for l in f.locations if l.cell == cell}),
    "ops": [i for i, s in enumerate(text, 1) if "jnp.tanh" in s or "jnp.sin" in s],
    "served": c.stages.xla_compiles == 0}))"""


@pytest.mark.kernel
def test_the_users_story_in_real_kernels(tmp_path, monkeypatch):
    """In ipykernel: the model cell, the ``%%compile`` cell; the model edited (a docstring) and
    both re-run (the same program, its lines moved: XLA skipped in this kernel, the lines
    re-read); then a new kernel with the first cells, served from JAX's persistent cache.
    Every time the fusions name the model's current lines."""
    import json

    from .test_kernel import execute, notebook, text_of

    monkeypatch.setenv("NBCOMPILE_CACHE_DIR", str(tmp_path / "cache"))
    model, edited = MODEL + "mlp = Mlp(w1, w2)", EDITED + "mlp = Mlp(w1, w2)"
    first = execute(notebook(KERNEL_SETUP, model, COMPILE, PROBE, edited, COMPILE, PROBE))
    second = execute(notebook(KERNEL_SETUP, model, COMPILE, PROBE))
    assert any((tmp_path / "cache").iterdir()), "nothing was written to the persistent cache"
    probes = [
        json.loads(text_of(nb.cells[i]).split("PROBE", 1)[1])
        for nb, i in ((first, 3), (first, 6), (second, 3))
    ]
    for probe in probes:
        assert probe["named"] and set(probe["named"]) <= set(probe["ops"]), probes
    moved = EDITED.count("\n") - MODEL.count("\n")  # the docstring moved the ops down
    assert probes[1]["ops"] == [n + moved for n in probes[0]["ops"]], probes
    assert probes[1]["served"], "the moved program was compiled again in the same kernel"
    assert probes[2]["served"], "a new kernel with the same cells compiled again"
    assert probes[2]["named"] == probes[0]["named"], probes
