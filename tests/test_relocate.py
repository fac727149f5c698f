"""nbcompile/stages/relocate.py: an executable's source tables rewritten to where the same
program's code is now — exactly what a fresh compile names, or nothing (then XLA compiles)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nbcompile.analysis.hlo import parse_hlo
from nbcompile.stages.relocate import relocate_hlo

CODE = """def block(h):
    return jnp.tanh(h) * 2
def f(x):
    return jnp.sin(block(block(x))).sum()
"""


def _lowered(source: str, name: str) -> jax.stages.Lowered:
    namespace = {"jnp": jnp}
    exec(compile(source, name, "exec"), namespace)
    return jax.jit(namespace["f"]).trace(jnp.ones((4, 4), jnp.float32)).lower()


def _stacks(text: str) -> list[tuple[tuple[str, int], ...]]:
    module = parse_hlo(text)
    return sorted({module.stack(i) for c in module.computations.values() for i in c.instructions})


def _relocated(old_source: str, new_source: str) -> tuple[str | None, str]:
    old = _lowered(old_source, "/nbc/model_old.py")
    new = _lowered(new_source, "/nbc/model_new.py")
    text = relocate_hlo(
        old.compile().as_text(),
        old.compiler_ir("stablehlo"),
        new.compiler_ir("stablehlo"),
    )
    return text, new.compile().as_text()


def test_moved_code_names_what_a_fresh_compile_names():
    moved = "# a comment\n\n" + CODE.replace("def f(x):", "\n\ndef f(x):")
    text, fresh = _relocated(CODE, moved)
    assert text is not None
    assert _stacks(text) == _stacks(fresh)
    assert any(file == "/nbc/model_new.py" and line == 4 for s in _stacks(text) for file, line in s)


def test_one_line_become_two_or_another_program_is_not_relocated():
    """A statement split over two lines, or ``jnp.mean(x)`` written as ``s = jnp.sum(x);
    s / x.size``: the same program, but XLA's metadata keeps one source row per line, so which
    new line each old row means is not known: XLA compiles (None)."""
    split = CODE.replace("return jnp.tanh(h) * 2", "h = jnp.tanh(h)\n    return h * 2")
    assert _relocated(CODE, split)[0] is None
    one = "def f(x):\n    return jnp.mean(x)\n"
    two = "def f(x):\n    s = jnp.sum(x)\n    return s / x.size\n"
    assert _relocated(one, two)[0] is None
    other = CODE.replace("jnp.sin", "jnp.cos")
    assert _relocated(CODE, other)[0] is None  # not the same program
