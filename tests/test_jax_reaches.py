"""Every reach into JAX's and jaxlib's internals, checked against the JAX installed here.

nbcompile reads JAX's private modules in a few places (``_compat.py``, ``analysis/_jax.py``,
``capture/_namestack.py``, ``frozen/_jaxcompat.py`` ...). When JAX moves one, the feature that
needs it must not silently degrade: this test finds every such reach in the package's source
(``from jax._src... import name``, ``from jaxlib... import name``, then ``name.attr`` and
``getattr(name, "attr", ...)`` on what was imported) and fails naming each one that does not
resolve on this JAX — file, line and the dotted name. A reach that exists only on some supported
versions is listed in :data:`VERSION_SPECIFIC` with the versions that have it, and the code
beside it handles both. ``make test`` runs this on the newest JAX, ``make test-compat`` on 0.10.2.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import jax
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nbcompile"
PRIVATE = ("jax._src", "jaxlib")

#: Reaches that only some supported JAX versions have (checked on 0.10.2 and 0.12.0.1; 0.11 is
#: not tested): dotted name -> (the test of the JAX
#: version that has it, what the code does on the others).
VERSION_SPECIFIC: dict[str, tuple[str, str]] = {
    "jax._src.core.ClosedJaxpr": (
        "<0.12",
        "JAX 0.12 merged ClosedJaxpr into Jaxpr: analysis/_jax.py aliases it to Jaxpr",
    ),
    "jax._src.interpreters.mlir._thread_local_context": (
        ">=0.12",
        "older JAX makes a new MLIR context per lowering: a forked child needs only a new pool",
    ),
}


def _jax_version() -> tuple[int, ...]:
    return tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())


def _applies(test: str) -> bool:
    """Whether a reach listed as ``"<0.12"`` / ``">=0.11"`` should exist on this JAX."""
    op = test[:2] if test[:2] in ("<=", ">=") else test[:1]
    bound = tuple(int(p) for p in test[len(op) :].split("."))
    here = _jax_version()[: len(bound)]
    return {"<": here < bound, ">": here > bound, "<=": here <= bound, ">=": here >= bound}[op]


def _reaches() -> list[tuple[str, str, int]]:
    """(dotted name, file, line) of every private reach in the package's source."""
    found: list[tuple[str, str, int]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        rel = str(path.relative_to(PACKAGE.parent))
        bound: dict[str, str] = {}  # local name -> dotted name it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.startswith(PRIVATE):
                    for alias in node.names:
                        dotted = f"{node.module}.{alias.name}"
                        bound[alias.asname or alias.name] = dotted
                        found.append((dotted, rel, node.lineno))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PRIVATE) and alias.asname:
                        bound[alias.asname] = alias.name
                        found.append((alias.name, rel, node.lineno))
        for node in ast.walk(tree):  # plain aliases: ``siu = _siu``
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        bound.setdefault(target.id, bound[node.value.id])
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
            ):
                found.append((f"{bound[node.value.id]}.{node.attr}", rel, node.lineno))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in bound
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                found.append((f"{bound[node.args[0].id]}.{node.args[1].value}", rel, node.lineno))
    return found


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                try:
                    obj = getattr(obj, name)
                except AttributeError:
                    obj = importlib.import_module(f"{obj.__name__}.{name}")
        except (AttributeError, ImportError):
            return False
        return True
    return False


def test_the_scan_finds_the_known_reaches():
    names = {dotted for dotted, _f, _l in _reaches()}
    # one from each place that reaches in: a scan that found nothing would pass everything
    for expected in (
        "jax._src.compiler._get_cache_key",
        "jax._src.source_info_util.NameStack",
        "jax._src.core.Literal",
        "jax._src.interpreters.mlir",
        "jax._src.lib._jax",
    ):
        assert any(n == expected or n.startswith(expected + ".") for n in names), expected
    assert len(names) >= 40


def test_every_reach_into_jax_internals_resolves_on_this_jax():
    missing = []
    for dotted, file, line in _reaches():
        if _resolves(dotted):
            continue
        special = VERSION_SPECIFIC.get(dotted)
        if special is not None and not _applies(special[0]):
            continue
        missing.append(f"{dotted}  ({file}:{line})")
    assert not missing, (
        f"JAX {jax.__version__} lacks {len(missing)} internal(s) nbcompile reaches:\n  "
        + "\n  ".join(sorted(set(missing)))
    )


@pytest.mark.parametrize("dotted", sorted(VERSION_SPECIFIC))
def test_version_specific_reaches_exist_where_listed(dotted):
    test, _what = VERSION_SPECIFIC[dotted]
    assert _resolves(dotted) == _applies(test), (
        f"{dotted} on JAX {jax.__version__}: expected {'present' if _applies(test) else 'absent'}"
        f" (listed for JAX {test}); update VERSION_SPECIFIC and the code beside the reach"
    )


def test_private_attributes_of_jax_objects_that_nbcompile_reads():
    """The reaches into JAX *objects* (not modules), made on a real lowering and compile:
    ``_compat.adopt_executable`` (``Lowered._lowering._executable``, ``Compiled._executable``),
    ``_compat.EarlyHlo`` (``Lowered._lowering.compile_args["tuple_args"]``), the HLO modules of
    an executable, a device's client (``analysis/_jax.xla_cost``)."""
    import jax.numpy as jnp

    lowered = jax.jit(lambda x: jnp.tanh(x) * 2).lower(jnp.ones(4))
    assert hasattr(lowered, "_lowering"), "jax.stages.Lowered._lowering"
    assert hasattr(lowered._lowering, "_executable"), "MeshComputation._executable"
    assert "tuple_args" in lowered._lowering.compile_args, "MeshComputation.compile_args"
    compiled = lowered.compile()
    assert hasattr(compiled, "_executable"), "jax.stages.Compiled._executable"
    modules = compiled.runtime_executable().hlo_modules()
    assert modules and modules[0].as_serialized_hlo_module_proto()
    assert jax.devices("cpu")[0].client is not None


def test_the_constant_flags_folding_reads_exist_and_decide_the_lowering():
    """``_compat.passed_as_argument`` reads ``jax_use_simplified_jaxpr_constants`` (JAX says
    the flag will exist only briefly) and ``jax_embedded_constants_max_bytes``; its answer must
    be what the lowering does (``jax.const`` marks an array passed as an argument)."""
    import jax.numpy as jnp
    import numpy as np

    from nbcompile import _compat

    assert hasattr(jax.config, "jax_use_simplified_jaxpr_constants"), "flag gone: see _compat"
    assert hasattr(jax.config, "jax_embedded_constants_max_bytes")
    for size in (8, 256):  # 32 bytes and 32 KB
        a = np.ones((size, size // 8), np.float32)
        text = jax.jit(lambda x, a=a: x + jnp.asarray(a).sum()).lower(1.0).as_text()
        assert _compat.passed_as_argument(a) == ("jax.const" in text), (size, jax.__version__)
