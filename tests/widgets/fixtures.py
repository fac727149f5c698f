"""Schema-conformant Report fixtures for the view (docs/report-schema.md).

``small_report()`` is a two-layer MLP; ``big_report()`` is shaped like a real 12-layer transformer
train step (≈2,300 traced nodes, ≈1,100 compiled nodes / 7,000 edges, a fusion with 210 operands,
one scalar constant used 142×, groups per layer). ``check_report()`` asserts the schema so the same
check runs on real reports from ``nbcompile.analysis``.
"""

from __future__ import annotations

import random
from typing import Any

SCHEMA = "nbcompile.report/1"
NODE_KINDS = {"op", "param", "const", "output", "fusion", "call"}
GROUP_KINDS = {
    "function",
    "module",
    "scope",
    "loop",
    "branch",
    "custom",
    "remat",
    "shard_map",
    "fusion",
}
PHASES = {"forward", "backward", "mixed", None}


class _GraphBuilder:
    """Accumulates nodes / edges / groups with unique ids."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.nodes: list[dict[str, Any]] = []
        self.edges: list[dict[str, Any]] = []
        self.groups: list[dict[str, Any]] = []

    def group(self, label: str, kind: str, parent: str | None) -> str:
        gid = f"{self.prefix}g{len(self.groups)}"
        self.groups.append({"id": gid, "label": label, "kind": kind, "parent": parent})
        return gid

    def node(
        self,
        op: str,
        kind: str = "op",
        *,
        shape: str = "f32[]",
        inputs: tuple[str, ...] = (),
        group: str | None = None,
        line: int | None = None,
        path: str = "",
        fusion: str | None = None,
        phase: str | None = None,
        flops: float | None = None,
        label: str | None = None,
    ) -> str:
        nid = f"{self.prefix}{len(self.nodes)}"
        nbytes = _bytes(shape)
        self.nodes.append(
            {
                "id": nid,
                "op": op,
                "label": label or op,
                "kind": kind,
                "shape": shape,
                "bytes": nbytes,
                "group": group,
                "line": line,
                "file": "<cell>" if line is not None else None,
                "file_line": line,
                "path": path,
                "fusion": fusion,
                "phase": phase,
                "flops": flops,
                "folded": False,
            }
        )
        for src in inputs:
            self.edges.append(
                {"src": src, "dst": nid, "bytes": self._bytes_of(src), "shape": self._shape_of(src)}
            )
        return nid

    def _node(self, nid: str) -> dict[str, Any]:
        return self.nodes[int(nid[len(self.prefix) :])]

    def _bytes_of(self, nid: str) -> int:
        return self._node(nid)["bytes"]

    def _shape_of(self, nid: str) -> str:
        return self._node(nid)["shape"]

    def graph(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "edges": self.edges, "groups": self.groups}


def _bytes(shape: str) -> int:
    total = 0
    for part in shape.split(", "):
        dims = part[part.index("[") + 1 : part.index("]")]
        count = 1
        for d in dims.split(","):
            if d:
                count *= int(d)
        total += count * (2 if part.startswith(("bf16", "f16")) else 4)
    return total


def _report(
    name: str,
    lines: list[str],
    traced: dict,
    compiled: dict | None,
    fusions: list[dict],
    gradient: dict | None,
    cost: dict,
) -> dict[str, Any]:
    by_line: dict[str, dict[str, Any]] = {}
    for node in traced["nodes"]:
        if node["line"] is not None:
            entry = by_line.setdefault(
                str(node["line"]), {"fusions": [], "nodes": [], "cost_share": 0.0}
            )
            entry["nodes"].append(node["id"])
    total_flops = sum(f["flops"] or 0 for f in fusions) or 1.0
    for fusion in fusions:
        for line in fusion["lines"]:
            entry = by_line.setdefault(str(line), {"fusions": [], "nodes": [], "cost_share": 0.0})
            entry["fusions"].append(fusion["id"])
            entry["cost_share"] += (
                (fusion["flops"] or 0) / total_flops / max(len(fusion["lines"]), 1)
            )
    for entry in by_line.values():
        entry["cost_share"] = round(entry["cost_share"], 4)
    n_traced = sum(1 for n in traced["nodes"] if n["kind"] == "op")
    kernels = sum(
        1 for n in (compiled or {"nodes": []})["nodes"] if n["kind"] in ("op", "fusion", "call")
    )
    return {
        "schema": SCHEMA,
        "name": name,
        "backend": "cpu",
        "source": {"filename": "<ipython-input-3-abc>", "lines": lines},
        "summary": {
            "jaxpr_eqns": n_traced,
            "stablehlo_ops": int(n_traced * 1.4),
            "hlo_ops_before": int(n_traced * 1.2),
            "hlo_ops_after": int(n_traced * 1.6),
            "kernels": kernels,
            "eager_kernels": n_traced,
            "fusions": len(fusions),
            "folded_constants": 1,
            "flops": cost["flops"],
            "bytes_accessed": cost["bytes_accessed"],
            "compile_seconds": 0.12,
        },
        "graphs": {"traced": traced, "compiled": compiled},
        "fusions": fusions,
        "folded": [
            {
                "what": "jnp.arange(8) iota",
                "stage": "xla",
                "bytes": 32,
                "shape": "f32[8]",
                "line": 2,
                "hint": "already folded at compile time; nothing to do",
            }
        ],
        "gradient": gradient,
        "cost": cost,
        "memory": {
            "argument_bytes": 4096,
            "output_bytes": 512,
            "temp_bytes": 2048,
            "generated_code_bytes": 10240,
        },
        "timings": {"trace": 0.01, "lower": 0.01, "compile": 0.12, "analyse": 0.02},
        "lines": by_line,
        "notes": ["synthetic fixture report"],
        "extras": {},
    }


def small_report() -> dict[str, Any]:
    """A two-layer MLP forward pass: 5 params, 5 ops, 2 fusions, source lines 3 and 4."""
    lines = [
        "%%compile",
        "def predict(params, x):",
        "    h = jnp.tanh(x @ params['w1'] + params['b1'])",
        "    return h @ params['w2'] + params['b2']",
        "predict(params, x)",
    ]
    t = _GraphBuilder("n")
    g = t.group("predict", "function", None)
    x = t.node("x", "param", shape="f32[8,16]", label="x")
    w1 = t.node("w1", "param", shape="f32[16,32]", label="params['w1']")
    b1 = t.node("b1", "param", shape="f32[32]", label="params['b1']")
    w2 = t.node("w2", "param", shape="f32[32,4]", label="params['w2']")
    b2 = t.node("b2", "param", shape="f32[4]", label="params['b2']")
    kw = {"group": g, "path": "predict"}
    d1 = t.node(
        "dot_general",
        shape="f32[8,32]",
        inputs=(x, w1),
        line=3,
        fusion="fusion.0",
        flops=8192,
        **kw,
    )
    a1 = t.node(
        "add", shape="f32[8,32]", inputs=(d1, b1), line=3, fusion="fusion.0", flops=256, **kw
    )
    h = t.node("tanh", shape="f32[8,32]", inputs=(a1,), line=3, fusion="fusion.0", flops=256, **kw)
    d2 = t.node(
        "dot_general", shape="f32[8,4]", inputs=(h, w2), line=4, fusion="fusion.1", flops=2048, **kw
    )
    a2 = t.node("add", shape="f32[8,4]", inputs=(d2, b2), line=4, fusion="fusion.1", flops=32, **kw)
    t.node("output", "output", shape="f32[8,4]", inputs=(a2,), label="out")
    c = _GraphBuilder("c")
    cp = [
        c.node(f"parameter.{i}", "param", shape=t.nodes[i]["shape"], label=t.nodes[i]["label"])
        for i in range(5)
    ]
    f0 = c.node(
        "fusion",
        "fusion",
        shape="f32[8,32]",
        inputs=(cp[0], cp[1], cp[2]),
        line=3,
        path="predict",
        fusion="fusion.0",
        flops=8704,
        label="fusion.0",
    )
    f1 = c.node(
        "fusion",
        "fusion",
        shape="f32[8,4]",
        inputs=(f0, cp[3], cp[4]),
        line=4,
        path="predict",
        fusion="fusion.1",
        flops=2080,
        label="fusion.1",
    )
    c.node("output", "output", shape="f32[8,4]", inputs=(f1,), label="out")
    fusions = [
        {
            "id": "fusion.0",
            "name": "fusion.0",
            "kind": "custom",
            "ops": ["dot", "add", "tanh"],
            "nodes": [f0],
            "lines": [3],
            "locations": [["<cell>", 3]],
            "modules": ["predict"],
            "flops": 8704,
            "bytes": 3712,
            "bytes_saved": 2048,
            "phase": None,
        },
        {
            "id": "fusion.1",
            "name": "fusion.1",
            "kind": "loop",
            "ops": ["dot", "add"],
            "nodes": [f1],
            "lines": [4],
            "locations": [["<cell>", 4]],
            "modules": ["predict"],
            "flops": 2080,
            "bytes": 1680,
            "bytes_saved": 256,
            "phase": None,
        },
    ]
    cost = {
        "flops": 10784.0,
        "bytes_accessed": 5392.0,
        "transcendentals": 256.0,
        "optimal_seconds": None,
    }
    return _report("predict", lines, t.graph(), c.graph(), fusions, None, cost)


_LAYER_OPS = [  # (scope, op, line): one transformer block's forward ops
    ("ln1", "reduce_sum", 6),
    ("ln1", "div", 6),
    ("ln1", "sub", 6),
    ("ln1", "integer_pow", 6),
    ("ln1", "reduce_sum", 6),
    ("ln1", "rsqrt", 6),
    ("ln1", "mul", 6),
    ("ln1", "mul", 6),
    ("ln1", "add", 6),
    ("attn", "dot_general", 9),
    ("attn", "reshape", 9),
    ("attn", "dot_general", 10),
    ("attn", "reshape", 10),
    ("attn", "dot_general", 11),
    ("attn", "reshape", 11),
    ("attn", "transpose", 12),
    ("attn", "dot_general", 12),
    ("attn", "mul", 12),
    ("attn", "reduce_max", 13),
    ("attn", "sub", 13),
    ("attn", "exp", 13),
    ("attn", "reduce_sum", 13),
    ("attn", "div", 13),
    ("attn", "dot_general", 14),
    ("attn", "transpose", 14),
    ("attn", "reshape", 14),
    ("attn", "dot_general", 15),
    ("attn", "add", 16),
    ("ln2", "reduce_sum", 18),
    ("ln2", "div", 18),
    ("ln2", "sub", 18),
    ("ln2", "integer_pow", 18),
    ("ln2", "reduce_sum", 18),
    ("ln2", "rsqrt", 18),
    ("ln2", "mul", 18),
    ("ln2", "mul", 18),
    ("ln2", "add", 18),
    ("mlp", "dot_general", 20),
    ("mlp", "add", 20),
    ("mlp", "mul", 21),
    ("mlp", "tanh", 21),
    ("mlp", "add", 21),
    ("mlp", "mul", 21),
    ("mlp", "dot_general", 22),
    ("mlp", "add", 22),
    ("mlp", "add", 23),
]
BIG_LINES = [
    "%%compile -g",
    "def train_step(params, x, y):",
    "    def block(p, h):",
    "        # pre-norm transformer block",
    "        b, t, d = h.shape",
    "        a = layer_norm(h, p['ln1'])",
    "        heads = 8",
    "        # attention",
    "        q = (a @ p['wq']).reshape(b, t, heads, -1)",
    "        k = (a @ p['wk']).reshape(b, t, heads, -1)",
    "        v = (a @ p['wv']).reshape(b, t, heads, -1)",
    "        s = jnp.einsum('bthd,bshd->bhts', q, k) / jnp.sqrt(d / heads)",
    "        s = jax.nn.softmax(s, axis=-1)",
    "        o = jnp.einsum('bhts,bshd->bthd', s, v).reshape(b, t, d)",
    "        o = o @ p['wo']",
    "        h = h + o",
    "        # mlp",
    "        m = layer_norm(h, p['ln2'])",
    "        # gelu",
    "        m = m @ p['w1'] + p['b1']",
    "        m = jax.nn.gelu(m)",
    "        m = m @ p['w2'] + p['b2']",
    "        return h + m",
    "    def loss_fn(params):",
    "        h = params['embed'][x]",
    "        for p in params['layers']:",
    "            h = block(p, h)",
    "        logits = h @ params['embed'].T",
    "        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()",
    "    loss, grads = jax.value_and_grad(loss_fn)(params)",
    "    params = jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)",
    "    return params, loss",
    "train_step(params, x, y)",
]


def big_report(layers: int = 12, seed: int = 0) -> dict[str, Any]:
    """A synthetic train step shaped like the measured 12-layer transformer (FACTS.md)."""
    rng = random.Random(seed)
    act = "f32[8,128,512]"
    t = _GraphBuilder("n")
    top = t.group("train_step", "function", None)
    loss_g = t.group("loss_fn", "function", top)
    params: list[str] = []
    for i in range(layers):
        for p in ("ln1", "wq", "wk", "wv", "wo", "ln2", "w1", "b1", "w2", "b2", "ln1_b", "ln2_b"):
            shape = "f32[512,512]" if p.startswith("w") else "f32[512]"
            params.append(t.node(p, "param", shape=shape, label=f"params['layers'][{i}]['{p}']"))
    xs = t.node("x", "param", shape="s32[8,128]", label="x")
    embed = t.node("embed", "param", shape="f32[32000,512]", label="params['embed']")
    h = t.node(
        "gather", shape=act, inputs=(embed, xs), group=loss_g, line=25, path="train_step/loss_fn"
    )
    forward: list[list[str]] = []
    for i in range(layers):
        lg = t.group(f"layer_{i}", "module", loss_g)
        scopes = {s: t.group(s, "scope", lg) for s in ("ln1", "attn", "ln2", "mlp")}
        ids, prev = [], h
        for j, (scope, op, line) in enumerate(_LAYER_OPS):
            ins = [prev]
            if op in ("dot_general", "add", "mul") and j % 3 == 0:
                ins.append(params[i * 12 + (j % 12)])
            if j > 4 and j % 5 == 0:
                ins.append(ids[j - 4])
            prev = t.node(
                op,
                shape=act,
                inputs=tuple(ins),
                group=scopes[scope],
                line=line,
                path=f"train_step/loss_fn/layer_{i}/{scope}",
                phase="forward",
                fusion=f"fusion.{i * 40 + j // 2}",
                flops=float(2 * 8 * 128 * 512 * 512 if op == "dot_general" else 8 * 128 * 512),
            )
            ids.append(prev)
        forward.append(ids)
        h = prev
    logits = t.node(
        "dot_general",
        shape="f32[8,128,32000]",
        inputs=(h, embed),
        group=loss_g,
        line=28,
        path="train_step/loss_fn",
        phase="forward",
        flops=2.0 * 8 * 128 * 512 * 32000,
    )
    loss = t.node(
        "reduce_sum",
        shape="f32[]",
        inputs=(logits,),
        group=loss_g,
        line=29,
        path="train_step/loss_fn",
        phase="forward",
    )
    grad_g = t.group("transpose(jvp(loss_fn))", "custom", top)
    g = loss
    grads: list[str] = []
    for i in reversed(range(layers)):
        lg = t.group(f"layer_{i} (backward)", "module", grad_g)
        for rep in range(3):
            for j, (_scope, op, line) in enumerate(
                reversed(_LAYER_OPS[: 30 if rep == 2 else None])
            ):
                src = forward[i][-1 - j]
                g = t.node(
                    op if rep == 0 else "mul",
                    shape=act,
                    inputs=(g, src),
                    group=lg,
                    line=line,
                    path=f"train_step/transpose(jvp(loss_fn))/layer_{i}",
                    phase="backward",
                    fusion=f"fusion.{500 + i * 40 + j // 2}",
                )
                if rep == 1 and op == "dot_general":
                    grads.append(g)
    upd_g = t.group("update", "function", top)
    for k, p in enumerate(params):
        gk = grads[k % len(grads)]
        t.node(
            "sub",
            shape=t.nodes[int(p[1:])]["shape"],
            inputs=(p, gk),
            group=upd_g,
            line=31,
            path="train_step/update",
            phase="backward",
            fusion="fusion.999",
        )
    t.node("output", "output", shape="f32[]", inputs=(loss,), label="loss")
    compiled, fusions = _big_compiled(rng, layers)
    grad = {
        "argnums": [0],
        "forward_ops": sum(len(f) for f in forward) + 3,
        "backward_ops": layers * 2 * len(_LAYER_OPS) + len(params),
        "mixed_kernels": 24,
        "kernels": {"forward": 400, "backward": 500, "mixed": 24},
        "residuals": [
            {"shape": act, "bytes": _bytes(act), "line": line, "primitive": op}
            for (_s, op, line) in _LAYER_OPS[:10]
            for _ in range(layers)
        ],
        "residual_bytes": 10 * layers * _bytes(act),
    }
    cost = {
        "flops": 3.1e11,
        "bytes_accessed": 9.8e9,
        "transcendentals": 4.2e7,
        "optimal_seconds": None,
    }
    return _report("train_step", BIG_LINES, t.graph(), compiled, fusions, grad, cost)


def _big_compiled(rng: random.Random, layers: int) -> tuple[dict, list[dict]]:
    """≈1,100 top-level kernels / ≈7,000 edges; fusion.999 has 210 operands; c0 is used 142×."""
    c = _GraphBuilder("c")
    scalar = c.node("constant", "const", shape="f32[]", label="0.0")
    params = [
        c.node(f"parameter.{i}", "param", shape="f32[512,512]", label=f"p{i}") for i in range(150)
    ]
    fusions: list[dict] = []
    kernels: list[str] = []
    groups = {}
    for phase in ("forward", "backward"):
        for i in range(layers):
            groups[(phase, i)] = c.group(
                f"layer_{i}" + (" (backward)" if phase == "backward" else ""), "module", None
            )
    scalar_uses = 0
    for phase, base in (("forward", 0), ("backward", 500)):
        for i in range(layers):
            for j in range(40 if phase == "forward" else 45):
                fid = f"fusion.{base + i * 40 + j}"
                recent = kernels[-60:]
                ins = set(rng.sample(recent, min(len(recent), rng.randint(4, 9))))
                if j % 4 == 0:
                    ins.add(params[(i * 12 + j) % 150])
                if scalar_uses < 141 and j % 7 == 0:
                    ins.add(scalar)
                    scalar_uses += 1
                line = _LAYER_OPS[min(j, len(_LAYER_OPS) - 1)][2]
                kind = "custom" if j % 9 == 0 else "loop"
                nid = c.node(
                    "fusion",
                    "fusion",
                    shape="f32[8,128,512]",
                    inputs=tuple(sorted(ins)),
                    group=groups[(phase, i)],
                    line=line,
                    path=f"train_step/layer_{i}",
                    fusion=fid,
                    phase=phase,
                    flops=float(rng.randint(1, 400) * 1e6),
                    label=fid,
                )
                kernels.append(nid)
                ops = rng.sample(
                    [
                        "multiply",
                        "add",
                        "subtract",
                        "exp",
                        "tanh",
                        "divide",
                        "reduce",
                        "broadcast",
                        "dot",
                        "rsqrt",
                        "maximum",
                        "select",
                    ],
                    rng.randint(2, 7),
                )
                fusions.append(
                    {
                        "id": fid,
                        "name": fid,
                        "kind": kind,
                        "ops": ops,
                        "nodes": [nid],
                        "lines": sorted({line, line + (j % 2)}),
                        "locations": [["<cell>", line]],
                        "modules": [f"train_step/layer_{i}"],
                        "flops": c.nodes[-1]["flops"],
                        "bytes": rng.randint(1, 90) * 65536,
                        "bytes_saved": rng.randint(0, 40) * 65536,
                        "phase": phase,
                    }
                )
    big_ins = tuple(params) + tuple(kernels[-59:]) + (scalar,)
    fid = "fusion.999"
    nid = c.node(
        "fusion",
        "fusion",
        shape=", ".join(["f32[512,512]"] * 4),
        inputs=big_ins,
        line=31,
        path="train_step/update",
        fusion=fid,
        phase="backward",
        flops=1.6e8,
        label=fid,
    )
    fusions.append(
        {
            "id": fid,
            "name": fid,
            "kind": "loop",
            "ops": ["multiply", "subtract"],
            "nodes": [nid],
            "lines": [31],
            "locations": [["<cell>", 31]],
            "modules": ["train_step/update"],
            "flops": 1.6e8,
            "bytes": 1 << 26,
            "bytes_saved": 1 << 24,
            "phase": "backward",
        }
    )
    c.node("tuple", "output", shape="f32[]", inputs=(nid, kernels[-1]), label="out")
    return c.graph(), fusions


def check_report(report: dict[str, Any]) -> None:
    """Assert that ``report`` follows docs/report-schema.md (keys present, ids resolve)."""
    keys = {
        "schema",
        "name",
        "backend",
        "source",
        "summary",
        "graphs",
        "fusions",
        "folded",
        "gradient",
        "cost",
        "memory",
        "timings",
        "lines",
        "notes",
        "extras",
    }
    assert keys <= set(report), keys - set(report)
    assert report["schema"] == SCHEMA
    assert isinstance(report["source"]["lines"], list)
    assert report["graphs"]["traced"] is not None
    for graph in report["graphs"].values():
        if graph is None:
            continue
        ids = {n["id"] for n in graph["nodes"]}
        assert len(ids) == len(graph["nodes"]), "node ids must be unique"
        gids = {g["id"] for g in graph["groups"]}
        for node in graph["nodes"]:
            assert node["kind"] in NODE_KINDS, node
            assert node["group"] is None or node["group"] in gids, node
            assert node.get("phase") in PHASES, node
        for edge in graph["edges"]:
            assert edge["src"] in ids and edge["dst"] in ids, edge
        for group in graph["groups"]:
            assert group["kind"] in GROUP_KINDS and (
                group["parent"] is None or group["parent"] in gids
            )
    for fusion in report["fusions"]:
        assert {"id", "kind", "ops", "nodes", "lines", "flops", "bytes"} <= set(fusion), fusion
    for line, entry in report["lines"].items():
        assert int(line) >= 1 and {"fusions", "nodes", "cost_share"} <= set(entry)
