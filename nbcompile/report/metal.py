"""The report's ``extras["passes"]``: XLA's pass log and its kernels' code, ready for the view.

Built from what one dumped compile left (``c.passes``, ``c.kernel_code``; docs/metal.md), only
when the compilation has that dump (``%%compile --passes``, or after ``c.passes`` was read):
the passes that changed the module with their counts, what they added and removed and their
diff (without XLA's op metadata, each cut at :data:`DIFF_CHARS`, saying so), and the machine code of the costliest
kernels (at most :data:`MAX_KERNELS`, each cut at :data:`CODE_LINES` instructions), each
instruction with the index of the source locations it came from. Pure data: the pass log and
the kernel code come in duck-typed (``.steps`` / ``.diff(i)``; ``KernelCode``'s fields).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "CODE_LINES",
    "DIFF_CHARS",
    "DUMP_SOURCE",
    "MAX_FORMED",
    "MAX_KERNELS",
    "costliest_kernels",
    "kernel_json",
    "metal_json",
    "passes_json",
    "without_code",
]

#: a step's diff is shipped up to this many characters (the rest: ``c.passes.diff(i)``)
DIFF_CHARS = 12_000
#: kernels whose code the report carries (the costliest)
MAX_KERNELS = 8
#: instructions of one kernel's code the report carries
CODE_LINES = 1_000
#: where every figure of ``extras["passes"]`` comes from
DUMP_SOURCE = (
    "XLA's dump of this program's compile (with --passes) or of one more compile "
    "(xla_dump_to, xla_dump_hlo_pass_re=.*)"
)
#: kernels formed at one step the report names (the rest are counted)
MAX_FORMED = 50
#: op metadata (source locations, op names) XLA writes on every instruction: left out of the
#: shipped diffs, which then show several times more of what a pass changed
_METADATA = re.compile(r",? metadata=\{[^{}]*\}")
#: a fusion defined on a diff line, read after its ``+``/``-`` (``match(line, 1)``)
_FUSION_DEF = re.compile(r"\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?\bfusion\(")


def _cut(text: str, limit: int) -> tuple[str, int | None]:
    """(text up to ``limit`` characters at a line end, its full length when cut else None)."""
    if len(text) <= limit:
        return text, None
    end = text.rfind("\n", 0, limit)
    return text[: end + 1 if end > 0 else limit], len(text)


def _formed(diff: str) -> list[str]:
    """Names of the fusions a step's diff adds: defined on its ``+`` lines and not on its ``-``
    lines (a fusion whose operands changed is removed and added back). Only lines that call a
    fusion are matched (a diff's lines are whole instructions, most of them no fusion's)."""
    gone, added = set(), []
    for line in diff.splitlines():
        if "fusion(" not in line or line[:1] not in ("+", "-"):
            continue
        found = _FUSION_DEF.match(line, 1)
        if found is None:
            continue
        if line[0] == "+":
            added.append(found[1])
        else:
            gone.add(found[1])
    return [name for name in dict.fromkeys(added) if name not in gone]


def passes_json(log: Any, kernels: Sequence[str] = ()) -> dict[str, Any]:
    """The steps of pass log ``log`` that changed the module (with the first step, the module
    as XLA received it): counts, opcodes added/removed, the fusions formed (``kernels``: those
    of them still kernels of the optimised program) and the diff, cut at :data:`DIFF_CHARS`."""
    final = set(kernels)
    steps = []
    for s in log.steps:
        if not (s.changed or s.index == 0):
            continue
        whole = _METADATA.sub("", log.diff(s.index)) if s.changed else ""
        diff, full = _cut(whole, DIFF_CHARS)
        formed = _formed(whole) if "fusion" in s.added or "fusion" in s.removed else []
        steps.append(
            {
                "index": s.index,
                "name": s.name,
                "pipeline": s.pipeline,
                "changed": bool(s.changed),
                "instructions": s.instructions,
                "fusions": s.fusions,
                "added": dict(s.added),
                "removed": dict(s.removed),
                "formed": formed[:MAX_FORMED],
                "formed_total": len(formed),
                "kernels": [k for k in formed[:MAX_FORMED] if k in final],
                "diff": diff,
                "diff_chars": full,  # the whole diff's length when cut, else null
            }
        )
    return {
        "module": log.module,
        "total_steps": len(log.steps),
        "steps": steps,
        "diff_limit": DIFF_CHARS,
        "source": DUMP_SOURCE,
        "from": "XLA",
    }


def _line_key(location: Any, lines: Any) -> str:
    """The key of a location in ``report["lines"]``: its label, or the compiling cell's plain
    line number."""
    label = location.label
    if label in lines or not location.is_cell:
        return label
    return str(location.line) if str(location.line) in lines else label


def kernel_json(code: Any, lines: Any = ()) -> dict[str, Any]:
    """One :class:`~nbcompile.measure.metal.KernelCode` for the view: its instructions (cut at
    :data:`CODE_LINES`), the source locations they came from (``locations``, with their key in
    ``report["lines"]``) and, per instruction, the indices of its locations (``at``: runs of
    ``[first instruction, count, [location indices]]``)."""
    index: dict[Any, int] = {}
    locations: list[dict[str, Any]] = []
    runs: list[list[Any]] = []
    shown = code.lines[:CODE_LINES]
    for n, (_, where) in enumerate(shown):
        ids = []
        for loc in where:
            if loc not in index:
                index[loc] = len(locations)
                locations.append({"label": loc.label, "key": _line_key(loc, lines)})
            ids.append(index[loc])
        if runs and runs[-1][2] == ids and runs[-1][0] + runs[-1][1] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1, ids])
    return {
        "name": code.name,
        "symbol": code.symbol,
        "isa": code.isa,
        "instructions": code.instructions,
        "vector_width": code.vector_width,
        "asm": [line for line, _ in shown],
        "cut": len(code.lines) > len(shown),
        "locations": locations,
        "at": runs,
        "mapping": code.mapping,
        "shared_with": code.shared_with,
        "source": getattr(code, "source", None)
        or "XLA's object file of the dumped compile, disassembled by Capstone",
        # a library fusion (ynn_fusion): the library runs it, and ``asm`` is XLA's own code for
        # the same ops compiled with the library off (``stand_in``: that compile's kernels)
        "library": getattr(code, "library", None),
        "stand_in": list(getattr(code, "stand_in", None) or []) or None,
    }


def costliest_kernels(
    fusions: Sequence[dict[str, Any]], profile: dict[str, Any] | None = None
) -> list[str]:
    """Fusion names, costliest first: by measured time share when profiled, else by XLA's
    flops, then bytes."""
    share = {k["name"]: k.get("share") or 0.0 for k in (profile or {}).get("kernels") or []}

    def cost(f: dict[str, Any]) -> tuple[float, float, float]:
        name = f.get("name") or f.get("id")
        return (-(share.get(name) or 0.0), -(f.get("flops") or 0.0), -(f.get("bytes") or 0.0))

    return [f.get("name") or f["id"] for f in sorted(fusions, key=cost)]


def metal_json(
    log: Any,
    fusions: Sequence[dict[str, Any]],
    code_of: Callable[[str], Any],
    *,
    library_of: Callable[[str], dict[str, str] | None] | None = None,
    lines: Any = (),
    profile: dict[str, Any] | None = None,
    errors: tuple[type[BaseException], ...] = (Exception,),
) -> dict[str, Any]:
    """``extras["passes"]``: :func:`passes_json` of ``log`` (None: no steps) and the code
    (:func:`kernel_json`) of the :data:`MAX_KERNELS` costliest kernels that have code of
    XLA's own (``code_of(name)`` raising one of ``errors``: a library call, skipped), and
    ``library_calls``: what ``library_of(name)`` says of the costliest kernels a library runs
    (``{"name", "library", "what", "code", "rank"}``), so the view names them plainly instead
    of "no code" (``rank``: place among all kernels by cost, as on each kernel with code)."""
    names = costliest_kernels(fusions, profile)
    rank = {name: i for i, name in enumerate(names)}
    library = {f.get("name") or f["id"] for f in fusions if f.get("kind") == "custom"}
    # kernels XLA generated code for first: a custom fusion is a library call (no code)
    candidates = [n for n in names if n not in library] + [n for n in names if n in library]
    out = (
        passes_json(log, names)
        if log is not None
        else {"module": None, "total_steps": 0, "steps": [], "source": DUMP_SOURCE, "from": "XLA"}
    )
    codes, skipped = [], []
    for name in candidates[: 3 * MAX_KERNELS]:
        if len(codes) >= MAX_KERNELS:
            break
        try:
            codes.append({**kernel_json(code_of(name), lines), "rank": rank[name]})
        except errors as err:  # no code of XLA's own (library calls), or none on this platform
            skipped.append({"name": name, "why": without_code(str(err).split("\n", 1)[0])})
    calls = []
    for name in [n for n in names if n in library][: 3 * MAX_KERNELS] if library_of else []:
        try:
            note = library_of(name)
        except errors:  # the dump cannot say (another platform): the fusion's own fields do
            note = None
        if note:
            calls.append({"name": name, **note, "rank": rank[name]})
    out["kernel_code"] = codes
    out["kernels_without_code"] = skipped[:20]
    out["library_calls"] = calls
    out["kernels_total"] = len(names)
    changed = sum(1 for s in out["steps"] if s["changed"])
    out["text"] = (
        f"passes: {out['total_steps']} steps of XLA's pipeline, {changed} changed the module; "
        f"code of {len(codes)} kernels (XLA's dump)"
    )
    return out


_CODE = re.compile(r"^\[NBC\d+\]\s*")


def without_code(message: str) -> str:
    """An error's message for a panel: without its ``[NBC600]`` code (the panel says it
    plainly; the code is for the exception a user's call raises)."""
    return _CODE.sub("", message)
