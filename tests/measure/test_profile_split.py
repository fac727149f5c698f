"""A fused kernel's time is shared by its member ops' cost, not evenly (issue 26, item 4).

XLA:CPU fuses the 1024² matmul with the ``sum`` of its result; split evenly, ``a @ b`` and
``big.sum()`` got half of that kernel each. Weighed by each op's estimated cost (the matmul's
2·M·N·K flops against the reduction's M·N), the matmul's line gets nearly all of it.
"""

from __future__ import annotations

import pytest

import nbcompile
from nbcompile.analysis.shares import Shares
from nbcompile.measure._kernels import KernelInfo
from nbcompile.measure._result import KernelTime, by_function, spread

SETUP = """
import jax, jax.numpy as jnp
k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
a = jax.random.normal(k1, (1024, 1024)); b = jax.random.normal(k2, (1024, 1024))
v = jax.random.normal(k3, (1024,))
"""

# line 3 (the %%compile line is 1) is the matmul
CELL = """%%compile --profile 3
def f(a, b, v):
    big = a @ b
    small = jnp.tanh(v) * 2 + 1
    return big.sum() + small.sum()
f(a, b, v)
"""


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    assert shell.run_cell(SETUP).success
    return shell


def test_the_matmul_line_gets_at_least_80_percent_of_the_time(ip):
    result = ip.run_cell(CELL)
    assert result.success, result.error_in_exec
    p = nbcompile.last().profile
    assert p is not None and p.source == "measured"
    on_lines = sum(p.by_cell_line.values())
    assert p.by_cell_line[3] / on_lines >= 0.8, p.text()


def _row(name: str, seconds: float) -> KernelTime:
    return KernelTime(name, "fusion", seconds, 0.0, busy_seconds=None, count=1.0)


def test_shares_divide_a_kernel_by_cost_and_evenly_without_them():
    shares = Shares(
        lines={"x:3": 0.99, "x:5": 0.01},
        cell_lines={3: 0.99, 5: 0.01},
        modules={"MLP": 1.0},
        functions={"block#1": 0.75, "block#2": 0.25},
    )
    weighed = KernelInfo("fusion", "fusion", locations=["x:3", "x:5"], cell_lines=[3, 5])
    weighed.modules, weighed.functions, weighed.shares = ["MLP"], ["block#1", "block#2"], shares
    even = KernelInfo("fusion.1", "fusion", locations=["x:3", "x:5"], cell_lines=[3, 5])
    rows = [_row("fusion", 1.0), _row("fusion.1", 1.0)]
    by_line, by_cell, by_module, no_line = spread(rows, {"fusion": weighed, "fusion.1": even})
    assert by_cell == pytest.approx({3: 0.99 + 0.5, 5: 0.01 + 0.5})
    assert by_line == pytest.approx({"x:3": 1.49, "x:5": 0.51})
    assert by_module == pytest.approx({"MLP": 1.0}) and no_line == 0.0
    assert by_function(rows, {"fusion": weighed, "fusion.1": even}) == pytest.approx(
        {"block#1": 0.75, "block#2": 0.25}
    )


def test_shares_are_made_on_first_use_and_equal_the_eager_ones():
    """``Analysis.kernel_shares`` is made when ``--profile`` / ``--memory`` first asks (from the
    optimised HLO parsed again), and equals the shares of the analysis's own parsed module."""
    import jax
    import jax.numpy as jnp

    from nbcompile.analysis.calls import call_kinds
    from nbcompile.analysis.compiled import analyse_compiled
    from nbcompile.analysis.hlo import parse_hlo
    from nbcompile.analysis.lines import Locator
    from nbcompile.analysis.shares import kernel_shares

    def block(x, w):
        return jnp.tanh(x @ w).sum(axis=0, keepdims=True) * 2.0

    def f(x, ws):
        for w in ws:
            x = x + block(x, w)
        return x.sum()

    x = jnp.ones((64, 64))
    c = nbcompile.compile(jax.grad(f), x, [jnp.ones((64, 64)) * 0.01] * 3)
    analysis = c.analysis
    assert analysis.shares_from is not None and analysis._shares is None  # not made yet
    program, names, sources, _kinds = analysis.shares_from
    assert program() is c.stages.compiled and names  # held weakly: no text kept meanwhile
    locator = Locator(sources)
    module = parse_hlo(c.stages.hlo_text)
    info = analyse_compiled(module, locator, False, infer=False)
    eager = kernel_shares(module, info.kernels, locator, call_kinds(c.stages.calls))
    lazy = analysis.kernel_shares
    assert lazy == eager and len(lazy) >= 1
    assert any(len(s.functions) >= 2 or len(s.lines) >= 2 for s in lazy.values())
    assert analysis.shares_from is None and analysis.kernel_shares is lazy  # made once


def test_shares_of_a_program_that_is_gone_are_empty_not_wrong():
    """The analysis holds its compiled program weakly (no HLO text kept for shares nobody may
    ask for); once that program is gone, the shares are empty (even split), not stale."""
    import weakref

    import jax.numpy as jnp

    def f(x):
        return (jnp.tanh(x @ x) * 2).sum()

    analysis = nbcompile.compile(f, jnp.ones((32, 32))).analysis
    assert isinstance(analysis.shares_from[0], weakref.ref)

    class Gone:
        pass

    gone = Gone()
    dead = weakref.ref(gone)
    del gone
    analysis.shares_from = (dead, *analysis.shares_from[1:])
    assert analysis.kernel_shares == {}
