"""Acceptance zoo: fusions match XLA's own dump, have source lines, and costs add up."""

from __future__ import annotations

import glob
import json
import os
import re

import jax
import jax.numpy as jnp
import pytest

from nbcompile.analysis import analyse

from .helpers import make_artifacts

KEY = jax.random.key(0)


def _normal(shape, i, dtype=jnp.float32):
    return jax.random.normal(jax.random.fold_in(KEY, i), shape, dtype)


def mlp(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"][None, :])
    return jnp.sum((h @ params["w2"]) ** 2)


def conv_pool(w, x):
    dn = ("NCHW", "OIHW", "NCHW")
    h = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)
    h = jax.nn.relu(h)
    h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return jnp.mean(h)


def attention(p, x):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    xn = (x - mu) * jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-5)
    q, k, v = xn @ p["wq"], xn @ p["wk"], xn @ p["wv"]
    att = jax.nn.softmax(q @ k.T / 4.0, axis=-1)
    return jnp.sum((att @ v) @ p["wo"])


def scan_rnn(w, xs):
    def cell(h, x):
        h = jnp.tanh(h @ w + x)
        return h, jnp.sum(h)

    h, ys = jax.lax.scan(cell, jnp.zeros((xs.shape[1],)), xs)
    return jnp.sum(h) + jnp.sum(ys)


def while_cond(x):
    def body(state):
        i, v = state
        v = jax.lax.cond(jnp.sum(v) > 0, lambda u: u * 0.5 - 1.0, lambda u: jnp.sin(u) + 2.0, v)
        return i + 1, v

    _, v = jax.lax.while_loop(lambda s: s[0] < 5, body, (0, x))
    return jnp.sum(v * v)


@jax.custom_vjp
def clip_grad(x):
    return jnp.tanh(x)


clip_grad.defvjp(
    lambda x: (jnp.tanh(x), x), lambda x, g: (jnp.clip(g * (1 - jnp.tanh(x) ** 2), -1, 1),)
)


def custom_vjp_model(w, x):
    return jnp.sum(clip_grad(x @ w) * 3.0)


def remat_model(w, x):
    layer = jax.checkpoint(lambda h: jnp.sin(h @ w) * jnp.cos(h))
    return jnp.sum(layer(layer(x)))


def bf16_model(w, x):
    h = jax.nn.gelu(x.astype(jnp.bfloat16) @ w)
    return jnp.sum(h.astype(jnp.float32))


@jax.jit
def _inner(x):
    return jnp.exp(x) / (1.0 + jnp.exp(x))


def nested_jit(x):
    return jnp.sum(_inner(x * 2.0) - 1.0)


ZOO = {
    "mlp": (
        mlp,
        lambda: (
            {"w1": _normal((16, 32), 1), "b1": _normal((32,), 2), "w2": _normal((32, 8), 3)},
            _normal((4, 16), 4),
        ),
        0,
    ),
    "conv_pool": (conv_pool, lambda: (_normal((4, 3, 3, 3), 5), _normal((2, 3, 8, 8), 6)), 0),
    "attention": (
        attention,
        lambda: (
            {n: _normal((16, 16), i) for i, n in enumerate(["wq", "wk", "wv", "wo"])},
            _normal((8, 16), 9),
        ),
        0,
    ),
    "scan_rnn": (scan_rnn, lambda: (_normal((8, 8), 10), _normal((5, 8), 11)), 0),
    "while_cond": (while_cond, lambda: (_normal((8,), 12),), None),
    "custom_vjp": (custom_vjp_model, lambda: (_normal((8, 8), 13), _normal((4, 8), 14)), 0),
    "remat": (remat_model, lambda: (_normal((8, 8), 15), _normal((4, 8), 16)), 0),
    "bf16": (bf16_model, lambda: (_normal((16, 16), 17, jnp.bfloat16), _normal((4, 16), 18)), 0),
    "nested_jit": (nested_jit, lambda: (_normal((4, 4), 19),), None),
}


def _dump_fusion_count(dump_dir: str) -> int:
    """XLA's own dump, counted independently: `fusion` instructions in computations that no
    fusion calls (i.e. not inside a fused computation)."""
    (path,) = glob.glob(os.path.join(dump_dir, "*after_optimizations.txt"))
    with open(path) as fh:
        text = fh.read()
    fused = set(re.findall(r"calls=%?([\w.\-]+)", text))
    count, current = 0, None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            current = head.group(1)
        elif re.match(r"^\s*(?:ROOT )?%?\S+ = .*? fusion\(", line) and current not in fused:
            count += 1
    return count


@pytest.fixture(scope="module", params=sorted(ZOO))
def zoo(request, tmp_path_factory):
    fn, make_args, grad = ZOO[request.param]
    dump = tmp_path_factory.mktemp(request.param)
    art = make_artifacts(
        fn, *make_args(), grad_argnums=grad, compiler_options={"xla_dump_to": str(dump)}
    )
    return request.param, art, analyse(art), str(dump)


def test_fusion_count_matches_xla_dump(zoo):
    _, _, a, dump = zoo
    expected = _dump_fusion_count(dump)
    assert expected > 0
    assert len(a.fusions) == expected


def test_every_fusion_has_a_source_line_in_the_model(zoo):
    name, art, a, _ = zoo
    n_lines = len(art.source.lines)
    for fusion in a.fusions:
        assert fusion.source_lines, (name, fusion.name, fusion.ops)
        assert all(1 <= line <= n_lines for line in fusion.source_lines)
        assert fusion.kind in ("loop", "input", "output", "custom")
        assert fusion.ops and "parameter" not in fusion.ops


def test_kernel_costs_sum_to_xla_total(zoo):
    """Per-kernel figures (XLA's cost model on each kernel alone) add up to the module's total
    within 0.1% (XLA counts a few scalar ops outside kernels)."""
    name, _, a, _ = zoo
    # every kernel module nbcompile cuts out (metadata stripped) is one XLA parses and costs
    assert {c["source"] for c in a.kernel_costs.values()} == {"xla"}, name
    for key, xla_key in (("flops", "flops"), ("bytes accessed", "bytes_accessed")):
        total = a.cost[xla_key]
        parts = sum(c[key] for c in a.kernel_costs.values())
        assert parts == pytest.approx(total, rel=1e-3, abs=64)
    for fusion in a.fusions:
        assert fusion.flops is not None and fusion.bytes is not None and fusion.bytes > 0


def test_graph_json_follows_schema(zoo):
    _, _, a, _ = zoo
    report = json.loads(json.dumps(a.to_json()))
    for key in ("graphs", "fusions", "folded", "gradient", "cost", "memory", "lines", "summary"):
        assert key in report
    for graph in (report["graphs"]["traced"], report["graphs"]["compiled"]):
        ids = [n["id"] for n in graph["nodes"]]
        assert len(ids) == len(set(ids))
        group_ids = {g["id"] for g in graph["groups"]}
        for node in graph["nodes"]:
            assert node["kind"] in ("op", "param", "const", "output", "fusion", "call")
            assert node["group"] is None or node["group"] in group_ids
            for key in (
                "op",
                "label",
                "shape",
                "bytes",
                "line",
                "file",
                "file_line",
                "path",
                "fusion",
                "phase",
                "flops",
                "folded",
            ):
                assert key in node
        for edge in graph["edges"]:
            assert edge["src"] in ids and edge["dst"] in ids
        for group in graph["groups"]:
            assert group["parent"] is None or group["parent"] in group_ids
    kinds = {n["kind"] for n in report["graphs"]["traced"]["nodes"]}
    assert {"param", "output", "op"} <= kinds
    fusion_nodes = {n["id"] for n in report["graphs"]["compiled"]["nodes"] if n["kind"] == "fusion"}
    assert {f["nodes"][0] for f in report["fusions"]} == fusion_nodes


def test_summary_and_lines(zoo):
    _, art, a, _ = zoo
    s = a.summary()
    assert s["fusions"] == len(a.fusions)
    assert s["eager_kernels"] > 0  # op by op: a scan body per iteration, so it may exceed eqns
    assert s["hlo_ops_after"] == sum(
        len(c.instructions) for c in _parsed(art).computations.values()
    )
    assert 0 < s["kernels"] <= s["hlo_ops_after"]
    assert s["bytes_saved_by_fusion"] == sum(f.bytes_saved for f in a.fusions)
    shares = [v["cost_share"] for v in a.lines.values()]
    assert all(0.0 <= x <= 1.0 + 1e-9 for x in shares)
    assert sum(shares) == pytest.approx(1.0, abs=0.05) or sum(shares) <= 1.0
    for fusion in a.fusions:
        for line in fusion.source_lines:
            assert fusion.name in a.lines[line]["fusions"]


def _parsed(art):
    from nbcompile.analysis import parse_hlo

    return parse_hlo(art.hlo_text)


def test_nested_programs_become_groups():
    from nbcompile.analysis.traced import trace_graph

    for name, kind in (
        ("scan_rnn", "loop"),
        ("while_cond", "branch"),
        ("custom_vjp", "custom"),
        ("remat", "remat"),
        ("nested_jit", "function"),
    ):
        fn, make_args, _ = ZOO[name]
        jaxpr = jax.make_jaxpr(fn)(*make_args())
        from nbcompile.analysis.lines import Locator as LineMap
        from nbcompile.capture.source import SourceInfo

        with open(__file__) as fh:
            t = trace_graph(jaxpr, LineMap(SourceInfo(__file__, fh.read())), name)
        assert kind in {g.kind for g in t.graph.groups}, name
        assert any(n.line is not None for n in t.graph.nodes if n.group is not None)
