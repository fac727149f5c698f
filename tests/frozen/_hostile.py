"""The hostile-file corpus: one or more files per attack class, written from the format and
the loader's code, each with the outcomes a safe loader may give.

``build(folder)`` writes the files and returns the cases. A case expects an NBC code (or
"loaded"/"ran") for each step the worker runs: ``load``, then ``call`` and ``grad`` when it
loaded. ``fresh`` cases run alone in their own process (their point is a process in which
nothing was set up before, e.g. LAPACK).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

if __package__:  # imported by the tests; the worker imports this file as a module
    from ._craft import edit_manifest, program_file, repack, split
else:
    from _craft import edit_manifest, program_file, repack, split

from nbcompile.frozen import _jaxcompat, freeze

F32 = np.float32
MODULE = (
    "module @m attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}} {{\n{}\n}}"
)


@dataclass
class Case:
    id: str
    path: str
    load: set[str]
    call: set[str] = field(default_factory=lambda: {"ran"})
    grad: set[str] = field(default_factory=lambda: {"NBC507"})
    max_bytes: int | None = None
    fresh: bool = False
    seconds: float | None = None  # the load must answer within this (files before bytes)

    def job(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("load", "call", "grad"):
            data[key] = sorted(data[key])
        data["call"], data["grad"] = bool(self.call), bool(self.grad)
        return data


def _spec(shape: tuple[int, ...], dtype: Any = F32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


def _main(args: str, results: str, body: str) -> str:
    return MODULE.format(f"  func.func public @main({args}) -> ({results}) {{\n{body}\n  }}")


def _chain(n: int) -> str:
    lines = [
        f"    %v{i} = stablehlo.sine {'%arg0' if i == 0 else f'%v{i - 1}'} : tensor<f32>"
        for i in range(n)
    ]
    return _main(
        "%arg0: tensor<f32>",
        "tensor<f32>",
        "\n".join(lines) + f"\n    return %v{n - 1} : tensor<f32>",
    )


def _wide(n: int) -> str:
    """About ``n`` ops, every one used (serialisation drops dead ones), in a shallow tree."""
    lines = [f"    %s{i} = stablehlo.sine %arg0 : tensor<f32>" for i in range(n // 2 + 1)]
    level, names, k = 0, [f"%s{i}" for i in range(n // 2 + 1)], 0
    while len(names) > 1:
        pairs = []
        for a, b in zip(names[::2], names[1::2], strict=False):
            lines.append(f"    %a{k} = stablehlo.add {a}, {b} : tensor<f32>")
            pairs.append(f"%a{k}")
            k += 1
        names = pairs + (names[-1:] if len(names) % 2 else [])
        level += 1
    return _main(
        "%arg0: tensor<f32>",
        "tensor<f32>",
        "\n".join(lines) + f"\n    return {names[0]} : tensor<f32>",
    )


def _nested(depth: int) -> str:
    inner = "%s = stablehlo.sine %arg0 : tensor<f32>\nstablehlo.return %s : tensor<f32>"
    for level in range(depth):
        inner = (
            f'%r{level} = "stablehlo.case"(%i) ({{\n{inner}\n}}) : (tensor<i32>) -> tensor<f32>\n'
            f"stablehlo.return %r{level} : tensor<f32>"
        )
    body = "%i = stablehlo.constant dense<0> : tensor<i32>\n" + inner
    body = body[: body.rindex("stablehlo.return")] + f"return %r{depth - 1} : tensor<f32>"
    return _main("%arg0: tensor<f32>", "tensor<f32>", body)


def forever() -> str:
    """A program that loops for ever at run time (a valid while loop whose condition is true)."""
    body = """    %0 = stablehlo.while(%it = %arg0) : tensor<f32>
     cond {
      %c = stablehlo.constant dense<true> : tensor<i1>
      stablehlo.return %c : tensor<i1>
     } do {
      %1 = stablehlo.sine %it : tensor<f32>
      stablehlo.return %1 : tensor<f32>
     }
    return %0 : tensor<f32>"""
    return _main("%arg0: tensor<f32>", "tensor<f32>", body)


def _custom(target: str, operands: list[str], results: list[str], attrs: dict[str, str]) -> str:
    args = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(operands))
    names = ", ".join(f"%arg{i}" for i in range(len(operands)))
    body = ", ".join(f"{k} = {v}" for k, v in attrs.items() if k != "sdy.sharding_rule")
    many = f":{len(results)}" if len(results) > 1 else ""
    first = "%0#0" if len(results) > 1 else "%0"
    call = (
        f"    %0{many} = stablehlo.custom_call @{target}({names}) {{{body}}} : "
        f"({', '.join(operands)}) -> ({', '.join(results)})\n    return {first} : {results[0]}"
    )
    return _main(args, results[0], call)


def _genuine_call(fn: Any, specs: list[Any], target: str) -> dict[str, Any]:
    calls = _jaxcompat.lowered_custom_calls(fn, specs, "cpu")
    return next(c for c in calls if c["target"] == target)


def _lying_calls() -> dict[str, tuple[str, list[Any], list[Any]]]:
    """Allowlisted LAPACK calls whose declared results (or attributes) lie about the sizes."""
    out = {}
    for n in (512, 8):
        call = _genuine_call(jax.lax.linalg.lu, [_spec((n, n))], "lapack_sgetrf_ffi")
        attrs = {k: v for k, v in call["attributes"].items() if k != "output_operand_aliases"}
        results = ["tensor<1x1xf32>", "tensor<1xi32>", "tensor<i32>"]
        text = _custom("lapack_sgetrf_ffi", call["operands"], results, attrs)
        out[f"getrf_{n}x{n}_declares_1x1"] = (text, [_spec((n, n))], [_spec((1, 1))])
    a, b = _spec((4, 4)), _spec((4, 64))
    call = _genuine_call(
        lambda a, b: jax.lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
        [a, b],
        "lapack_strsm_ffi",
    )
    attrs = dict(call["attributes"])
    attrs["mhlo.backend_config"] = attrs["mhlo.backend_config"].replace("side = 76", "side = 82")
    text = _custom("lapack_strsm_ffi", call["operands"], call["results"], attrs)
    out["trsm_side_attribute_lies"] = (text, [a, b], [b])
    callback = _custom("xla_python_cpu_callback", ["tensor<f32>"], ["tensor<f32>"], {})
    out["python_callback_target"] = (callback, [_spec(())], [_spec(())])
    empty = _custom("AllocateBuffer", [], ["tensor<4xf32>"], {})
    out["allocate_buffer"] = (
        empty.replace("@main()", "@main(%arg9: tensor<f32>)"),
        [_spec(())],
        [_spec((4,))],
    )
    return out


def _special_paths(folder: Path) -> list[Case]:
    fifo = folder / "fifo.nbc"
    os.mkfifo(fifo)
    loop = folder / "loop.nbc"
    os.symlink(loop, loop)
    sparse = folder / "sparse_6gb.nbc"
    with open(sparse, "wb") as f:
        f.truncate(6 * 10**9)
    huge = folder / "sparse_1tb.nbc"
    with open(huge, "wb") as f:
        f.truncate(10**12)
    (folder / "empty.nbc").write_bytes(b"")
    quick = 1.0
    return [
        Case("fifo", str(fifo), {"NBC509"}, seconds=quick),
        Case("directory", str(folder), {"NBC509"}, seconds=quick),
        Case("symlink_loop", str(loop), {"NBC509"}, seconds=quick),
        Case("proc_self_environ", "/proc/self/environ", {"NBC500"}, seconds=quick),
        Case("missing", str(folder / "missing.nbc"), {"NBC509"}, seconds=quick),
        Case("empty", str(folder / "empty.nbc"), {"NBC500"}, seconds=quick),
        Case("sparse_6gb_zeros", str(sparse), {"NBC500", "NBC508"}, seconds=quick),
        Case("sparse_1tb", str(huge), {"NBC508"}, seconds=quick),
    ]


def build(folder: Path, mlp_file: Path) -> list[Case]:
    """Write the corpus into ``folder``; the cases, controls included."""
    cases = _special_paths(folder)

    def put(name: str, data: bytes, *load: str, **kw: Any) -> None:
        path = folder / f"{name}.nbc"
        path.write_bytes(data)
        cases.append(Case(name, str(path), set(load), **kw))

    for name, (text, ins, outs) in _lying_calls().items():
        put(name, program_file(text, ins, outs), "NBC505")
    scalar = [_spec(())]
    put("vjp_program_carried", program_file(_chain(3), scalar, scalar, vjp_order=1), "NBC500")
    put("chain_12000", program_file(_chain(12_000), scalar, scalar), "NBC508")
    put("ops_100001", program_file(_wide(100_001), scalar, scalar), "NBC508")
    put("nesting_80", program_file(_nested(80), scalar, scalar), "NBC508")
    put("chain_50_control", program_file(_chain(50), scalar, scalar), "loaded", grad={"NBC507"})
    no_main = _chain(3).replace("@main(", "@main2(")
    put("main_missing", program_file(no_main, scalar, scalar), "NBC500")
    put(
        "main_private",
        program_file(_chain(3).replace("public @main", "private @main"), scalar, scalar),
        "NBC500",
    )
    wrong = _chain(3).replace("tensor<f32>", "tensor<3xf32>")
    put(
        "main_types_differ",
        program_file(wrong, scalar, scalar),
        "loaded",
        call={"NBC500"},
        grad=set(),
    )
    out_8gb = _main(
        "%arg0: tensor<f32>",
        "tensor<2147483648xf32>",
        "    %0 = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> "
        "tensor<2147483648xf32>\n    return %0 : tensor<2147483648xf32>",
    )
    put(
        "output_8gb_budget_1gb",
        program_file(out_8gb, scalar, [_spec((2**31,))]),
        "NBC508",
        max_bytes=10**9,
    )
    out_1tb = out_8gb.replace("2147483648", str(2**38))
    put("output_1tb_default_budget", program_file(out_1tb, scalar, [_spec((2**38,))]), "NBC508")

    # Genuine files with one lie or one bound.
    mlp = mlp_file.read_bytes()
    put("mlp_control", mlp, "loaded")
    put(
        "manifest_ops_lie",
        edit_manifest(mlp, lambda m: m["program"].update(stablehlo_ops=1)),
        "NBC500",
    )
    _, _, program = split(mlp)
    bad_utf8 = program.replace(b"cpu", b"\xff\xfe\xfd", 1)
    put("platform_not_utf8", repack(mlp, program=bad_utf8), "NBC500")

    def mixed(m: dict[str, Any]) -> None:
        m["inputs"]["tree"] = {
            "type": "tuple",
            "children": [
                {"type": "dict", "keys": [1, "a"], "children": [{"type": "leaf"}, {"type": "none"}]}
            ],
        }

    put("input_keys_two_types", edit_manifest(mlp, mixed), "NBC500")

    solve = folder / "solve_genuine.nbc"
    a = np.eye(4, dtype=F32) * 3 + 0.1
    freeze(
        lambda p, b: jnp.linalg.solve(p, b),
        a,
        np.ones((4, 2), F32),
        path=solve,
        batch="static",
        measure_compiled=False,
    )
    cases.append(Case("lapack_genuine", str(solve), {"loaded"}, fresh=True))
    lie = edit_manifest(solve.read_bytes(), lambda m: m["program"].update(custom_calls=[]))
    put("lapack_manifest_says_none", lie, "NBC500", fresh=True)

    temp = folder / "temp_heavy.nbc"
    freeze(
        lambda x: jnp.sort(jnp.arange(2**25, dtype=F32) * x)[:1],
        np.float32(1.0),
        path=temp,
        weights_argnums=(),
        batch="static",
        measure_compiled=False,
    )
    cases.append(
        Case(
            "temp_128mb_budget_64mb",
            str(temp),
            {"loaded"},
            call={"NBC508"},
            grad=set(),
            max_bytes=64 * 2**20,
        )
    )
    return cases


def job_file(folder: Path, cases: list[Case]) -> Path:
    path = folder / "job.json"
    path.write_text(json.dumps({"cases": [c.job() for c in cases]}))
    return path
