"""What XLA made of the program: kernels, fusions and the compiled graph.

Definitions (used consistently by the tests against XLA's own dump):

* A *non-fused computation* is the ENTRY computation or a computation reachable from it through
  control flow (``while`` body/condition, ``conditional`` branches, ``call``), never through a
  ``fusion``'s ``calls=`` or a reducer's ``to_apply=``.
* A *fusion* is a ``fusion`` instruction in a non-fused computation (so fusions nested inside
  other fusions are members, not fusions of their own).
* A *kernel* is an instruction of a non-fused computation that runs code: everything but
  parameters, constants, tuples, get-tuple-element, bitcasts and control flow (whose bodies'
  kernels are counted instead).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from .._compat import LIBRARY_FUSION_KINDS
from ..capture._models_scopes import user_scopes
from ..capture.source import Location
from . import _jax
from .graph import Graph
from .hlo import (
    _NAME_REF,
    Computation,
    HloModule,
    Instruction,
    array_shapes,
    parse_replica_groups,
    shape_bytes,
)
from .hlo import shape_elements as _elements
from .lines import Locator
from .namestack import shown, strip_transforms, unrepeated

__all__ = [
    "CompiledInfo",
    "Fusion",
    "analyse_compiled",
    "fusion_library",
    "infer_missing_sites",
    "is_scalar_kernel",
    "op_name_phase",
]

FREE_OPS = {
    "parameter",
    "constant",
    "tuple",
    "get-tuple-element",
    "bitcast",
    "after-all",
    "add-dependency",
    "opt-barrier",
    "domain",
    "partition-id",
    "replica-id",
}
CONTROL_OPS = {"while": "loop", "conditional": "branch", "call": "function"}
COLLECTIVES = {
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "all-reduce-start",
    "all-gather-start",
    "collective-permute-start",
    "ragged-all-to-all",
    "collective-broadcast",
}
_TRANSCENDENTAL = {
    "exponential",
    "log",
    "tanh",
    "logistic",
    "rsqrt",
    "sqrt",
    "power",
    "sine",
    "cosine",
    "tan",
    "atan2",
    "exponential-minus-one",
    "log-plus-one",
    "erf",
    "cbrt",
}
_NO_FLOPS = FREE_OPS | {
    "broadcast",
    "reshape",
    "transpose",
    "copy",
    "slice",
    "concatenate",
    "dynamic-slice",
    "dynamic-update-slice",
    "pad",
    "iota",
    "gather",
    "convert",
    "reverse",
}


def op_name_phase(op_name: str | None) -> str | None:
    """forward / backward / None from an HLO ``op_name`` (``;``-joined names: any backward wins
    unless some part is forward too, which makes it ``mixed``)."""
    if not op_name:
        return None
    phases = set()
    for part in op_name.split(";"):
        if "transpose(" in part:
            phases.add("backward")
        elif "jvp(" in part:
            phases.add("forward")
    if len(phases) == 2:
        return "mixed"
    return phases.pop() if phases else None


@functools.lru_cache(maxsize=1 << 16)
def _module_path(op_name: str | None) -> str | None:
    if not op_name:
        return None
    stack = unrepeated(op_name.split(";", 1)[0])
    parts = [scope for part in stack.split("/")[:-1] if (scope := _module_scope(part))]
    return "/".join(user_scopes(parts)) or None


@functools.lru_cache(maxsize=1 << 14)
def _module_scope(part: str) -> str:
    """One scope of an op name as a module path shows it ("" for none): the same few scopes
    (``jit(train_step)``, ``transpose(jvp(GPT2))``, ``Block_0``) recur in every op name."""
    if _JITTED.search(part):
        return ""  # a jitted function (the program's own jit(NAME), jit(relu)): no module
    part = strip_transforms(part, dotted=True)  # linear (a regex was quadratic on ")))")
    return shown(part) if part else ""


# ``jit(NAME)``, also under transforms (``transpose(jvp(jit(relu)))``); ``jvp(MLP)`` is a module
# under a transform and stays
_JITTED = re.compile(r"(?:^|\()p?jit\([^()]*\)+$")


@dataclass
class Fusion:
    """One fusion kernel. ``locations`` are the nearest user frames (a cell of this kernel or a
    user file) of every member op; ``source_lines`` the lines of the compiling cell among their
    stacks (kept for compatibility: empty when the model is defined elsewhere)."""

    name: str
    kind: str
    ops: list[str]
    source_lines: list[int]
    locations: list[Location]
    modules: list[str]
    flops: float | None
    bytes: float | None
    bytes_saved: int
    phase: str | None = None
    computation: str = ""
    node: str | None = None
    op_names: list[str] = field(default_factory=list)
    lines_inferred: bool = False
    cost_from: str = "XLA"  # "XLA" (its HLO cost model) or "estimate" (from shapes)
    functions: list[str] = field(default_factory=list)  # the user's call paths (analysis/calls)
    library: str | None = None  # the library XLA handed the fusion to (YNNPACK), else None

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.name,
            "name": self.name,
            "kind": self.kind,
            "ops": list(self.ops),
            "nodes": [self.node] if self.node else [],
            "lines": list(self.source_lines),
            "locations": [loc.to_json() for loc in self.locations],
            "modules": list(self.modules),
            "functions": list(self.functions),
            "flops": self.flops,
            "bytes": self.bytes,
            "bytes_saved": self.bytes_saved,
            "phase": self.phase,
            "computation": self.computation,
            "lines_inferred": self.lines_inferred,
            "from": {"flops": self.cost_from, "bytes": self.cost_from, "bytes_saved": "estimate"},
        }
        if self.library:  # only where a library runs it (most kernels are XLA's own)
            out["library"] = self.library
        return out


Sites = tuple[list[int], list[Location]]  # compiling-cell lines, nearest user locations


@dataclass
class CompiledInfo:
    graph: Graph
    fusions: list[Fusion]
    kernels: list[Instruction]
    unit_costs: dict[str, dict[str, float]]  # entry kernels + control ops -> XLA / shape figures
    phases: dict[str, str]  # "computation/instruction" -> forward | backward (grad only)
    collectives: list[dict[str, Any]]
    non_fused: list[str]
    sites: dict[str, Sites] = field(default_factory=dict)  # instruction name -> its sources
    modules: dict[str, list[str]] = field(default_factory=dict)  # instruction -> module paths
    # (primitive, location) -> fusion it landed in, from every member op (traced-graph overlay)
    landed: dict[tuple[str, Location | None], str] = field(default_factory=dict)


def _non_fused(module: HloModule) -> list[Computation]:
    out, seen, todo = [], set(), [module.entry]
    while todo:
        name = todo.pop()
        comp = module.computations.get(name) if name else None
        if comp is None or name in seen:
            continue
        seen.add(name)
        out.append(comp)
        for instr in comp.instructions:
            if instr.opcode in CONTROL_OPS:
                todo.extend(instr.called)
    return out


def _members(module: HloModule, instr: Instruction) -> list[Instruction]:
    """The instructions of the computations ``instr`` calls, nested ones included (memoised
    on the module by the instruction's name; treat the list as read-only)."""
    hit = module._members.get(instr.name)
    if hit is None or hit[0] is not instr:
        hit = module._members[instr.name] = (instr, _walk_members(module, instr))
    return hit[1]


def _walk_members(module: HloModule, instr: Instruction) -> list[Instruction]:
    out, seen, todo = [], set(), list(instr.called)
    while todo:
        comp = module.computations.get(todo.pop())
        if comp is None or comp.name in seen:
            continue
        seen.add(comp.name)
        for member in comp.instructions:
            out.append(member)
            todo.extend(member.called)
    return out


_CONST_LIKE = ("broadcast", "reshape", "bitcast", "convert", "copy")


def _call_op_names(members: list[Instruction]) -> list[str]:
    """The ``op_name``s that say which of the user's calls a fusion's ops came from (sorted,
    unique). Constants and broadcasts of them are left out: XLA merges equal constants of
    different calls into one that keeps the first call's name (``block#1``), which would make
    every fusion using it look like it spans two calls."""
    const: set[tuple[str, str]] = set()
    for m in members:  # a computation's operands come before their users
        if m.opcode == "constant" or (
            m.opcode in _CONST_LIKE
            and m.operands
            and all((m.computation, o) in const for o in m.operands)
        ):
            const.add((m.computation, m.name))
    return sorted(
        {m.op_name for m in members if m.op_name and (m.computation, m.name) not in const}
    )


def _module_text(module: HloModule, instr: Instruction, shapes: dict[str, str]) -> str | None:
    """A one-kernel module: the kernel with its operands as parameters, for XLA's cost model."""
    if any(o not in shapes for o in instr.operands):
        return None
    if instr.opcode.endswith(("-done", "-update")):
        # the second half of an async pair is no module without its start: XLA 0.10 refuses
        # the text, jaxlib 0.12's parser crashes the process on it (``slice-done`` on TPU)
        return None
    texts, seen, todo = [], set(), list(instr.called)
    while todo:
        name = todo.pop()
        sub = module.computations.get(name)
        if sub is None:
            return None
        if name in seen:
            continue
        seen.add(name)
        # metadata left out: XLA does not cost it, and it is most of the text to parse
        lines = [
            ("ROOT " if i.is_root and not i.text.startswith("ROOT") else "")
            + i.text[: len(i.text) - len(i.tail)]
            + i.bare_tail
            for i in sub.instructions
        ]
        header = sub.header.removeprefix("ENTRY").strip()
        texts.append(header + "\n" + "\n".join(lines) + "\n}\n")
        todo.extend(c for i in sub.instructions for c in i.called)
    params = [f"%p{k} = {shapes[o]} parameter({k})" for k, o in enumerate(instr.operands)]
    ops = ", ".join(f"%p{k}" for k in range(len(instr.operands)))
    root = f"ROOT %kernel = {instr.shape} {instr.opcode}({ops}){instr.bare_tail}"
    body = "\n".join([*params, root])
    return "HloModule kernel\n\n" + "\n".join(reversed(texts)) + "\nENTRY %e {\n" + body + "\n}\n"


def _shape_cost(module: HloModule, instr: Instruction, shapes: dict[str, str]) -> dict[str, float]:
    """Fallback figures from shapes: flops of member ops, bytes of operands plus result."""
    members = _members(module, instr) or [instr]
    flops = trans = 0.0
    for m in members:
        if m.opcode in _TRANSCENDENTAL:
            trans += _elements(m.shape)
        elif m.opcode == "dot":
            flops += 2.0 * _elements(m.shape) * _contracted(m, module)
        elif m.opcode not in _NO_FLOPS and m.opcode != "fusion":
            flops += _elements(m.shape)
    nbytes = shape_bytes(instr.shape) + sum(shape_bytes(shapes.get(o, "")) for o in instr.operands)
    return {"flops": flops, "bytes accessed": float(nbytes), "transcendentals": trans}


def _contracted(dot: Instruction, module: HloModule) -> int:
    dims = re.findall(r"\d+", dot.attrs.get("lhs_contracting_dims", ""))
    comp = module.computations.get(dot.computation)
    lhs = next((i for i in comp.instructions if dot.operands and i.name == dot.operands[0]), None)
    if lhs is None:
        return 1
    sizes = [int(d) for d in re.findall(r"\[([\d,]*)\]", lhs.shape)[0].split(",") if d] or [1]
    n = 1
    for d in dims:
        n *= sizes[int(d)] if int(d) < len(sizes) else 1
    return n


class _Structure:
    """Structural fingerprints: two kernels with equal keys are the same computation up to
    instruction names and metadata, so XLA's cost model gives them the same figures. A
    transformer's layers repeat the same kernels (a 12-layer train step has ~80 distinct
    kernels among ~1,000), so each distinct one is costed once."""

    def __init__(self, module: HloModule) -> None:
        self.module = module
        self.ids: dict[tuple, int] = {}  # exact keys -> small ints (no hash collisions)
        self.computations: dict[str, int | None] = {}
        self.costs: dict[tuple, dict | None] = {}

    def _tail(self, instr: Instruction, local: dict[str, int]) -> str:
        tail = instr.bare_tail
        if "%" not in tail:
            return tail

        def name(m: re.Match[str]) -> str:
            ref = m.group(1)
            if ref in local:
                return f"#{local[ref]}"
            key = self.computation(ref) if ref in self.module.computations else None
            return f"@{key}" if key is not None else m.group(0)

        return _NAME_REF.sub(name, tail)

    def computation(self, name: str) -> int | None:
        if name in self.computations:
            return self.computations[name]
        self.computations[name] = None  # a cycle (malformed module) keys to None
        comp = self.module.computations.get(name)
        if comp is None:
            return None
        local: dict[str, int] = {}
        parts = []
        for k, i in enumerate(comp.instructions):
            local[i.name] = k
            parts.append(
                (
                    i.opcode,
                    i.shape,
                    tuple(local.get(o, o) for o in i.operands),
                    i.literal,
                    i.is_root,
                    self._tail(i, local),
                )
            )
        key = self.ids.setdefault(tuple(parts), len(self.ids))
        self.computations[name] = key
        return key

    def kernel(self, instr: Instruction, shapes: dict[str, str]) -> tuple:
        return (
            instr.opcode,
            instr.shape,
            tuple(shapes.get(o) for o in instr.operands),
            self._tail(instr, {}),
        )


def _cost(
    module: HloModule,
    instr: Instruction,
    shapes: dict[str, str],
    use_xla: bool,
    structure: _Structure | None = None,
) -> dict:
    key = structure.kernel(instr, shapes) if structure is not None and use_xla else None
    if key is not None and key in structure.costs:
        figures = structure.costs[key]
    else:
        text = _module_text(module, instr, shapes) if use_xla else None
        figures = _jax.xla_cost(text) if text is not None else None
        if figures is not None:
            for k in ("flops", "bytes accessed", "transcendentals"):
                figures.setdefault(k, 0.0)  # XLA leaves out figures that are zero
            figures["source"] = "xla"
        if key is not None:
            structure.costs[key] = figures
    if figures is None:
        figures = _shape_cost(module, instr, shapes)
        figures["source"] = "shapes"
        return figures
    return dict(figures)


def _sites(
    module: HloModule,
    instrs: list[Instruction],
    source: Locator,
    landed: dict | None = None,
    fusion: str = "",
) -> Sites:
    """The sources of ``instrs``; with ``landed``, also record (primitive, location) -> the
    fusion they are in, for the traced-graph overlay."""
    lines: set[int] = set()
    locations: set[Location] = set()
    for m in instrs:
        location, visible = source.of_instruction(module, m)
        if location is not None:
            locations.add(location)
        if visible is not None:
            lines.add(visible)
        if landed is not None and m.op_name:
            landed.setdefault((_primitive(m.op_name), location), fusion)
    return sorted(lines), sorted(locations, key=Location.sort_key)


def is_scalar_kernel(instr: Instruction) -> bool:
    """An unfused op on one-element values (``u32[1]``, ``s32[]``): on TPU, XLA leaves the
    threefry fold-in of every random-number stream as dozens of these, which run as a few
    scalar-unit instructions inside the program, not as vector kernels."""
    if instr.opcode in ("fusion", "custom-call") or instr.shape.startswith("("):
        return False
    arrays = array_shapes(instr.shape)
    return len(arrays) == 1 and all(d <= 1 for d in arrays[0][1])


#: a library fusion's ``backend_config`` (``"fusion_config":{"kind":"__ynn_fusion"}``)
_LIBRARY_KIND = re.compile(r'"fusion_config"\s*:\s*\{[^{}]*"kind"\s*:\s*"(__\w+)"')


def fusion_library(instr: Instruction) -> str | None:
    """The library XLA:CPU hands fusion ``instr`` to (``YNNPACK`` for a ``ynn_fusion``: a
    ``kind=kCustom`` fusion whose ``backend_config`` names it; docs/metal.md), else None."""
    if instr.opcode != "fusion" or instr.kind != "custom":
        return None
    match = _LIBRARY_KIND.search(instr.text)
    if match is None:
        return None
    return LIBRARY_FUSION_KINDS.get(match.group(1), f"a library ({match.group(1)})")


def _primitive(op_name: str) -> str:
    return op_name.split(";", 1)[0].rsplit("/", 1)[-1]


def analyse_compiled(
    module: HloModule, source: Locator, grad: bool, use_xla_cost: bool = True, infer: bool = True
) -> CompiledInfo:
    """Fusions, kernels, per-kernel cost and the compiled graph of an optimised module; with
    ``infer`` also the sources of XLA-made kernels (else call :func:`infer_missing_sites`)."""
    graph = Graph()
    fusions: list[Fusion] = []
    kernels: list[Instruction] = []
    unit_costs: dict[str, dict[str, float]] = {}
    phases: dict[str, str] = {}
    collectives: list[dict[str, Any]] = []
    comps = _non_fused(module)
    structure = _Structure(module)
    groups: dict[str, str | None] = {module.entry or "": None}
    for comp in comps:
        for instr in comp.instructions:
            if instr.opcode in CONTROL_OPS:
                for called in instr.called:
                    groups.setdefault(
                        called,
                        graph.group(
                            groups.get(comp.name),
                            f"{instr.name} {called}",
                            CONTROL_OPS[instr.opcode],
                            unique=True,
                        ),
                    )
    sites: dict[str, Sites] = {}
    paths: dict[str, list[str]] = {}
    landed: dict[tuple[str, Location | None], str] = {}
    for comp in comps:
        ids: dict[str, str] = {}
        shapes = {i.name: i.shape for i in comp.instructions}
        group = groups.get(comp.name)
        for instr in comp.instructions:
            members = _members(module, instr) if instr.opcode == "fusion" else [instr]
            line_list, locs = sites[instr.name] = _sites(
                module,
                [instr, *members],
                source,
                landed if instr.opcode == "fusion" else None,
                instr.name,
            )
            phase = _kernel_phase(instr, members) if grad else None
            kind = (
                "param"
                if instr.opcode == "parameter"
                else "const"
                if instr.opcode == "constant"
                else "fusion"
                if instr.opcode == "fusion"
                else "call"
                if instr.opcode in CONTROL_OPS
                else "op"
            )
            # an argument of the program is named as the user named it (``params[0]['w']``,
            # JAX's op_name for it), not as XLA does (``params_0___w__.1``, kept in ``hlo``)
            user = instr.op_name if kind == "param" and comp.is_entry and instr.op_name else None
            node = graph.add_node(
                instr.kind if kind == "fusion" else instr.opcode,
                kind,
                prefix="c",
                label=user or instr.name,
                shape=instr.shape,
                bytes=shape_bytes(instr.shape),
                group=group,
                line=line_list[0] if line_list else None,
                location=locs[0] if locs else None,
                file=locs[0].file if locs else None,
                file_line=locs[0].line if locs else None,
                path=_module_path(instr.op_name) or "",
                phase=phase,
            )
            node.extra["opcode"] = instr.opcode
            if user:
                node.extra["hlo"] = instr.name
            ids[instr.name] = node.id
            for operand in instr.operands:
                src = graph.node(ids.get(operand, ""))
                if src is not None:
                    graph.add_edge(src.id, node.id, src.bytes, src.shape)
            if grad:
                for m in members:
                    phases[f"{m.computation}/{m.name}"] = (
                        op_name_phase(m.op_name) or phase or "forward"
                    )
                    if phases[f"{m.computation}/{m.name}"] == "mixed":
                        phases[f"{m.computation}/{m.name}"] = "backward"
                phases[f"{comp.name}/{instr.name}"] = (
                    "backward" if phase == "backward" else "forward"
                )
            if instr.opcode in COLLECTIVES:
                groups_ = parse_replica_groups(instr.attrs.get("replica_groups"))
                collectives.append(
                    {
                        "name": instr.name,
                        "opcode": instr.opcode,
                        "node": node.id,
                        "replica_groups": groups_,
                        "bytes": node.bytes,
                    }
                )
                node.extra["replica_groups"] = groups_
            runs = instr.opcode not in FREE_OPS and instr.opcode not in CONTROL_OPS
            if runs:
                kernels.append(instr)
            unit = comp.is_entry and instr.opcode not in ("parameter", "constant")
            if unit or instr.opcode == "fusion":
                cost = _cost(module, instr, shapes, use_xla_cost, structure)
                node.flops = cost.get("flops")
                if cost.get("source") != "xla":
                    node.extra["from"] = {"flops": "estimate"}
                if comp.is_entry:
                    unit_costs[instr.name] = cost
            modules = sorted({p for m in members if (p := _module_path(m.op_name))})
            if modules and instr.opcode not in ("parameter", "constant"):
                paths[instr.name] = modules
            if instr.opcode == "fusion":
                node.fusion = instr.name
                fusions.append(
                    Fusion(
                        name=instr.name,
                        kind=instr.kind or "loop",
                        ops=[m.opcode for m in members if m.opcode != "parameter"],
                        source_lines=line_list,
                        locations=locs,
                        modules=modules,
                        flops=cost.get("flops"),
                        bytes=cost.get("bytes accessed"),
                        bytes_saved=_bytes_saved(module, instr),
                        phase=phase,
                        computation=comp.name,
                        node=node.id,
                        op_names=_call_op_names(members),
                        cost_from="XLA" if cost.get("source") == "xla" else "estimate",
                        library=fusion_library(instr),
                    )
                )
            if instr.is_root and comp.is_entry:
                out = graph.add_node(
                    "output",
                    "output",
                    prefix="c",
                    label="output",
                    shape=instr.shape,
                    bytes=node.bytes,
                )
                graph.add_edge(node.id, out.id, node.bytes, instr.shape)
    info = CompiledInfo(
        graph,
        fusions,
        kernels,
        unit_costs,
        phases,
        collectives,
        [c.name for c in comps],
        sites,
        paths,
        landed,
    )
    if infer:
        infer_missing_sites(module, info)
    return info


def infer_missing_sites(module: HloModule, info: CompiledInfo) -> None:
    """Sources for the fusions and other kernels XLA made without any (see
    :func:`_infer_missing_sites`)."""
    _infer_missing_sites(module, info.fusions, info.graph, info.sites, info.kernels)


_NEAR_HOPS = 8  # how far to look for the code of an XLA-made kernel
_NEAR_CAP = 64  # locations kept per inferred kernel (keeps the search linear)
_Near = tuple[int, frozenset, frozenset]  # hops, compiling-cell lines, locations


def _infer_missing_sites(
    module: HloModule,
    fusions: list[Fusion],
    graph: Graph,
    sites: dict[str, Sites],
    kernels: list[Instruction] | None = None,
) -> None:
    """XLA-made fusions without metadata (a wrapped convert, iota, broadcast, layout copy) take
    the sources of the nearest kernels that consume them, else of those that feed them (up to
    eight hops through tuples and control flow of the same computation); ``lines_inferred``
    says so. The same for unfused kernels whose metadata XLA dropped (XLA:CPU's layout pass
    rewrites a ``convolution`` or ``dot`` without it): their graph node's
    ``extra["lines_inferred"]`` says so.

    "Nearest" is breadth-first distance, computed for every instruction of a computation in
    one pass over its (topologically ordered) instructions: the sources at the smallest
    distance from an instruction are the union of those of its neighbours at the smallest
    distance, one hop further. Linear in the computation's size (a search per kernel was
    quadratic: minutes for a 4,500-kernel program whose model is defined in another cell)."""
    missing: dict[str, list[Fusion | Instruction]] = {}
    for fusion in fusions:
        if not fusion.locations and not fusion.source_lines:
            missing.setdefault(fusion.computation, []).append(fusion)
    for kernel in kernels or ():
        if kernel.opcode != "fusion" and not any(sites.get(kernel.name, ((), ()))):
            missing.setdefault(kernel.computation, []).append(kernel)
    by_label = {n.label: n for n in graph.nodes} if kernels and missing else {}
    for comp_name, todo in missing.items():
        comp = module.computations.get(comp_name)
        if comp is None:
            continue
        instrs = comp.instructions
        users: dict[str, list[str]] = {}
        for instr in instrs:
            for operand in instr.operands:
                users.setdefault(operand, []).append(instr.name)
        by_users = _nearest(reversed(instrs), lambda i, users=users: users.get(i.name, ()), sites)
        by_operands = _nearest(iter(instrs), lambda i: i.operands, sites)
        for item in todo:
            found = by_users.get(item.name) or by_operands.get(item.name)
            if found is None:
                continue
            _, lines, locations = found
            inferred = (sorted(lines), sorted(locations, key=Location.sort_key))
            sites[item.name] = inferred
            if isinstance(item, Fusion):
                item.source_lines, item.locations = inferred
                item.lines_inferred = True
                node = graph.node(item.node or "")
            else:
                node = by_label.get(item.name)
                if node is not None:
                    node.extra["lines_inferred"] = True
            if node is not None:
                node.line = inferred[0][0] if inferred[0] else None
                node.location = inferred[1][0] if inferred[1] else None
                node.file = node.location.file if node.location else None
                node.file_line = node.location.line if node.location else None


def _nearest(order: Any, neighbours: Any, sites: dict[str, Sites]) -> dict[str, _Near]:
    """Instruction name -> (hops, lines, locations) of the nearest instructions with sources,
    following ``neighbours``; ``order`` visits every neighbour before the instructions that
    refer to it. Instructions with sources of their own are at distance 0."""
    near: dict[str, _Near] = {}
    for instr in order:
        own = sites.get(instr.name)
        if own is not None and own[1]:
            near[instr.name] = (0, frozenset(own[0]), frozenset(own[1]))
            continue
        best: _Near | None = None
        for name in neighbours(instr):
            candidate = near.get(name)
            if candidate is None or candidate[0] >= _NEAR_HOPS:
                continue
            if best is None or candidate[0] + 1 < best[0]:
                best = (candidate[0] + 1, candidate[1], candidate[2])
            elif candidate[0] + 1 == best[0] and len(best[2]) < _NEAR_CAP:
                best = (best[0], best[1] | candidate[1], best[2] | candidate[2])
        if best is not None:
            near[instr.name] = best
    return near


def _kernel_phase(instr: Instruction, members: list[Instruction]) -> str:
    found = {op_name_phase(m.op_name) for m in (members or [instr])} - {None}
    if "mixed" in found or {"forward", "backward"} <= found:
        return "mixed"
    if found:
        return found.pop()
    return op_name_phase(instr.op_name) or "forward"


def _bytes_saved(module: HloModule, fusion: Instruction) -> int:
    """Bytes of values computed inside the fusion that an unfused program would write out."""
    comp = module.computations.get(fusion.called[0]) if fusion.called else None
    if comp is None:
        return 0
    root = comp.root
    outputs = set(root.operands) if root is not None and root.opcode == "tuple" else set()
    total = 0
    for m in comp.instructions:
        if m.is_root or m.name in outputs or m.opcode in ("parameter", "constant", "bitcast"):
            continue
        total += shape_bytes(m.shape)
    return total
