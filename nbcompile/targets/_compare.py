"""Side by side: what the same program became on several targets (CPU vs TPU v5e vs H100 ...).

A *kernel* is a top-level instruction of the entry computation (and of the loop / branch bodies
it calls) that does work on the device: fusions, custom calls (cuBLAS, oneDNN), collectives,
copies, unfused dots/reduces. Bookkeeping ops (parameters, tuples, bitcasts, ``-done`` halves of
async pairs, constants) are not kernels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..analysis.compiled import FREE_OPS as _NOT_KERNELS  # one definition of bookkeeping ops
from ..analysis.hlo import Computation, HloModule, parse_hlo

__all__ = ["Comparison", "compare", "hlo_summary"]

_CONTROL = {"while", "conditional", "call"}
_MEMORY_FIELDS = ("argument", "output", "temp", "alias", "generated_code")


def _kernel_ops(module: HloModule) -> list[str]:
    """Opcodes of the kernels: the entry's, and those of the loop / branch bodies it calls."""
    ops: list[str] = []
    seen: set[str] = set()

    def walk(comp: Computation) -> None:
        if comp.name in seen:
            return
        seen.add(comp.name)
        for inst in comp.instructions:
            if inst.opcode in _CONTROL:
                for name in inst.called:
                    if name in module.computations:
                        walk(module.computations[name])
                continue
            if inst.opcode in _NOT_KERNELS or inst.opcode.endswith("-done"):
                continue
            ops.append(inst.opcode)

    entry = module.entry_computation
    if entry is not None:
        walk(entry)
    return ops


def _memory_dict(memory: Any) -> dict[str, int] | None:
    if memory is None:
        return None
    if isinstance(memory, dict):
        return {k: int(v) for k, v in memory.items() if isinstance(v, int | float)}
    out = {}
    for name in _MEMORY_FIELDS:
        value = getattr(memory, f"{name}_size_in_bytes", None)
        if value is not None:
            out[name] = int(value)
    return out or None


def hlo_summary(hlo_text: str) -> dict[str, Any]:
    """Kernels, fusions and the distinct HLO ops of one optimised module."""
    module = parse_hlo(hlo_text)
    kernel_ops = _kernel_ops(module)
    computations = module.computations.values()
    ops = {inst.opcode for c in computations for inst in c.instructions} - {"parameter"}
    return {
        "kernels": len(kernel_ops),
        "fusions": sum(op == "fusion" for op in kernel_ops),
        "custom_calls": sum(op == "custom-call" for op in kernel_ops),
        "ops": sorted(ops),
        "instructions": module.instruction_count(),
    }


class Comparison(dict):
    """``{"rows": [...], "only_in": {label: [ops]}}`` with a readable :meth:`text`."""

    def text(self) -> str:
        rows = self["rows"]
        made = [
            f"{r['label']} makes {r['kernels']} kernel{'s' * (r['kernels'] != 1)}"
            for r in rows
            if r["kernels"] is not None
        ]
        lines = [", ".join(made) if made else "no compiled program to compare"]
        header = ("target", "kernels", "fusions", "ops", "flops", "XLA est. time", "temp bytes")
        table = [header]
        for r in rows:
            est = r.get("optimal_seconds")
            table.append(
                (
                    r["label"],
                    _fmt(r["kernels"]),
                    _fmt(r["fusions"]),
                    _fmt(len(r["ops"]) if r["ops"] is not None else None),
                    _fmt(r.get("flops")),
                    f"{est * 1e6:.2f} µs" if est is not None else "—",
                    _fmt((r.get("memory") or {}).get("temp")),
                )
            )
        widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
        lines += [
            "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in table
        ]
        for label, ops in self["only_in"].items():
            if ops:
                lines.append(f"only in {label}: {', '.join(ops)}")
        return "\n".join(line.rstrip() for line in lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def compare(entries: Iterable[tuple[str, str | None, Any, Any]]) -> Comparison:
    """Compare ``(label, hlo_text | None, cost | None, memory | None)`` rows side by side.

    ``cost`` is a ``cost_analysis()`` dict (``flops``, ``bytes accessed``, ``optimal_seconds``
    where the backend estimates time: TPU); ``memory`` a ``memory_analysis()`` result or dict.
    A row without HLO (a lower-only target) keeps ``None`` figures.
    """
    rows: list[dict[str, Any]] = []
    for label, hlo_text, cost, memory in entries:
        row: dict[str, Any] = {"label": label, "kernels": None, "fusions": None, "ops": None}
        if hlo_text:
            row.update(hlo_summary(hlo_text))
        cost = cost[0] if isinstance(cost, list | tuple) and cost else cost
        if isinstance(cost, dict):
            # raw cost_analysis() keys, or nbcompile's normalised ones (Compilation.cost)
            for keys, name in (
                (("flops",), "flops"),
                (("bytes accessed", "bytes_accessed"), "bytes_accessed"),
                (("optimal_seconds",), "optimal_seconds"),
            ):
                value = next((cost[k] for k in keys if cost.get(k) is not None), None)
                if value is not None and value >= 0:
                    row[name] = float(value)
        row["memory"] = _memory_dict(memory)
        rows.append(row)
    op_sets = {r["label"]: set(r["ops"]) for r in rows if r["ops"] is not None}
    only_in = {
        label: sorted(ops - set().union(*(o for other, o in op_sets.items() if other != label)))
        for label, ops in op_sets.items()
    }
    return Comparison(rows=rows, only_in=only_in if len(op_sets) > 1 else {})
