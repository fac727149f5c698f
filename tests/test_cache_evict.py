"""What the cell cache lets go of is freed at once, not left to the cyclic collector.

A bound run and its program hold each other (``f.compilation`` is the run; the run's program
holds ``f``). When the cache evicts a program that nothing else holds, nbcompile cuts that link
so reference counting frees the program (its executable, analysis and run) right away: with the
collector off here, an evicted program must be gone. A program the user still reaches (through
the run, or the function under another name) keeps its link and keeps working.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

import nbcompile
from nbcompile.session import current_session

# quiet (-q): the cell has no value, so IPython's own output history (``_``, ``Out``) holds no run
CELL = (
    "%%compile -q\ndef evict_me(x):\n    return jnp.tanh(x @ x.T).sum() * 3.0\n"
    "evict_me(jnp.ones(({n}, 5)))"
)


@pytest.fixture
def ip(shell) -> Iterator[object]:
    shell.reset(new_session=False)
    shell.run_cell("import jax, jax.numpy as jnp")
    cache = current_session().cache
    size = cache.size
    cache.size = 2
    try:
        yield shell
    finally:
        cache.size = size
        gc.enable()


def _run(ip, n: int) -> None:
    res = ip.run_cell(CELL.format(n=n))
    assert res.success, res.error_in_exec


def test_an_evicted_program_is_freed_without_the_collector(ip):
    _run(ip, 101)
    c = nbcompile.last()
    program, jitted, run = weakref.ref(c.program), weakref.ref(c.fn), weakref.ref(c)
    assert c.fn.compilation is c  # the link: the function bound in the notebook knows its run
    del c
    gc.collect()
    gc.disable()  # from here on only reference counting frees anything
    for n in (102, 103, 104):  # new programs: the first is evicted (the cache holds 2)
        _run(ip, n)
    assert len(current_session().cache) == 2
    assert run() is None and jitted() is None and program() is None


def test_a_program_still_held_keeps_its_link(ip):
    _run(ip, 201)
    kept = nbcompile.last()
    also = ip.user_ns["evict_me"]  # the compiled function under another name
    ip.user_ns["kept_fn"] = also
    gc.collect()
    gc.disable()
    for n in (202, 203, 204):
        _run(ip, n)
    assert also.compilation is kept and kept.fn is also
    assert float(also(jax_ones(201))) == pytest.approx(float(kept.fn(jax_ones(201))))
    gc.enable()
    del also
    ip.user_ns.pop("kept_fn")
    weak = weakref.ref(kept.program)
    held_run = weakref.ref(kept)
    del kept
    gc.collect()  # let go of by the user: the collector frees the cycle as before
    assert held_run() is None and weak() is None


def jax_ones(n: int) -> object:
    import jax.numpy as jnp

    return jnp.ones((n, 5))
