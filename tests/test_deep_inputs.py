"""Programs past what JAX and XLA survive, and scopes nested past what the views drew.

Before the limits of ``nbcompile/stages/limits.py`` these ended the kernel (SIGABRT on an
array whose size overflows 64 bits, a stack overflow on a 40,000-op chain) or raised a raw
``SystemError`` (a 5,000-deep argument); each runs in a child process here, so a crash fails
the test instead of ending pytest. Scopes 3,000 deep (the user's own) or 1,500 deep (the op
names of a loaded file) made every display raise ``RecursionError``.
"""

from __future__ import annotations

from pathlib import Path

from nbcompile.report import graphmodel

from .helpers import child_json

REFUSE = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
import nbcompile
from nbcompile.errors import NbcompileError

def chain(x):
    for _ in range(40_000):
        x = jnp.sin(x)
    return x

def deep(t):
    return jax.tree_util.tree_leaves(t)[0] * 2

nested = np.ones(2, np.float32)
for _ in range(5_000):
    nested = [nested]

cases = {
    "huge": (lambda x: x * 2, (jax.ShapeDtypeStruct((2**62,), jnp.float32),)),
    "intermediate": (
        lambda x: jnp.sum(jnp.broadcast_to(x[:, None, None], (4, 2**30, 2**30))),
        (np.ones(4, np.float32),),
    ),
    "chain": (chain, (np.ones(4, np.float32),)),
    "deep": (deep, (nested,)),
}
out = {}
for name, (fn, args) in cases.items():
    try:
        nbcompile.compile(fn, *args)
        out[name] = {"code": "compiled"}
    except NbcompileError as err:
        out[name] = {"code": err.code, "message": str(err)}
print(json.dumps(out))
"""


def test_programs_xla_would_crash_on_are_refused_with_a_code() -> None:
    out = child_json(["-c", REFUSE], timeout=600)
    assert out["huge"]["code"] == "NBC215", out["huge"]
    assert "float32[4611686018427387904]" in out["huge"]["message"]
    assert out["intermediate"]["code"] == "NBC215", out["intermediate"]
    assert "broadcast_in_dim" in out["intermediate"]["message"]
    assert out["chain"]["code"] == "NBC216", out["chain"]
    assert out["deep"]["code"] == "NBC217", out["deep"]
    assert "'t'" in out["deep"]["message"]  # the user's own argument name


# ---------------------------------------------------------------- deep scopes in the views
def _deep_path_graph(depth: int) -> dict:
    path = "/".join(f"s{i}" for i in range(depth))
    return {
        "nodes": [
            {"id": "a", "op": "sine", "path": path, "kind": "op"},
            {"id": "b", "op": "cosine", "path": "top", "kind": "op"},
        ],
        "edges": [{"src": "a", "dst": "b"}],
    }


def test_deep_op_paths_fold_into_one_group() -> None:
    pg = graphmodel.prepare_graph(_deep_path_graph(3_000), {})
    depth, gid = 0, pg.parent_of["n:a"]
    while gid:
        depth += 1
        gid = pg.groups[gid].parent
    assert depth == graphmodel.MAX_DEPTH
    folded = pg.groups[pg.parent_of["n:a"]]
    assert folded.label.startswith(f"{3_000 - graphmodel.MAX_DEPTH + 1} nested scopes: ")
    assert folded.count == 1 and pg.root is not None and pg.root.count == 2


def test_deep_report_groups_fold_and_cycles_are_cut() -> None:
    groups = [
        {"id": f"g{i}", "label": f"L{i}", "kind": "scope", "parent": f"g{i - 1}" if i else None}
        for i in range(3_000)
    ]
    groups += [
        {"id": "c1", "label": "c1", "kind": "scope", "parent": "c2"},
        {"id": "c2", "label": "c2", "kind": "scope", "parent": "c1"},
    ]
    graph = {
        "nodes": [
            {"id": "a", "op": "sine", "group": "g2999", "kind": "op"},
            {"id": "b", "op": "cosine", "group": "g3", "kind": "op"},
            {"id": "c", "op": "cosine", "group": "c1", "kind": "op"},
        ],
        "edges": [],
        "groups": groups,
    }
    pg = graphmodel.prepare_graph(graph, {})
    assert pg.root is not None and pg.root.count == 3  # the cycle's node is drawn too
    deep = pg.groups["g2999"]
    assert deep.parent == f"g{graphmodel.MAX_DEPTH - 1}" and "3000 deep" in deep.label


VIEW = """
import contextlib, json, sys
import jax, jax.numpy as jnp, numpy as np
import nbcompile
from nbcompile.report.fallback import fallback_html

def scoped(depth, fn):
    def run(x):
        with contextlib.ExitStack() as stack:
            for i in range(depth):
                stack.enter_context(jax.named_scope(f"s{i}"))
            return fn(x)
    return run

out = {}
# the user's own cell, 3,000 scopes deep
own = nbcompile.compile(lambda x: scoped(3_000, jnp.sin)(x) + 1, np.ones(4, np.float32))
out["own"] = [len(fallback_html(own.report())), sorted(own._repr_mimebundle_())]
# a loaded file whose op names are 1,500 scopes deep, called from the user's function
nbcompile.freeze(scoped(1_500, lambda x: jnp.tanh(x) * 2), np.ones((2, 4), np.float32),
                 path=sys.argv[1], measure_compiled=False)
model = nbcompile.load(sys.argv[1])
caller = nbcompile.compile(lambda x: model(x) + 1, np.ones((3, 4), np.float32))
out["loaded"] = [len(fallback_html(caller.report())), sorted(caller._repr_mimebundle_())]
print(json.dumps(out))
"""


def test_displays_of_deeply_scoped_programs(tmp_path: Path) -> None:
    out = child_json(["-c", VIEW, str(tmp_path / "deep.nbc")], timeout=600)
    for which in ("own", "loaded"):
        size, bundle = out[which]
        assert size > 0 and "text/html" in bundle, which
