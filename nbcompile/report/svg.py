"""A static SVG picture of a report graph: the same boxes, layout and edge routes as the widget.

Used for the static fallback (an ``<img>`` data URI that survives untrusted notebooks and
offline exports). The scene comes from :mod:`.scene`, the port of the front end's
``js/scene.js``: parameters and scalar constants drawn as labels on their consumers, groups
expanded a whole depth level at a time while the view's first budget allows (``LIMIT`` boxes),
a layered layout with crossing reduction whose edges run only between boxes. Work is bounded by
the number of drawn boxes, whatever the graph size (the layout gives boxes with many dummy
nodes fewer passes).
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from .charts import fmt_bytes
from .graphmodel import ancestors, group_phase, kernel_title, prepare_graph
from .scene import (
    FIRST_LIMIT,
    HEADER,
    INITIAL_LIMIT,
    LINE,
    PAD,
    Scene,
    build_scene,
    initial_expansion,
    path_data,
)

__all__ = [
    "BUDGET",
    "GRADIENT_LIMIT",
    "LIMIT",
    "STATUS_COLOURS",
    "graph_scene",
    "graph_svg",
    "heat_colour",
]

#: the widget's first expansion: the user's calls and modules, whole levels while at most LIMIT
#: boxes (one group: BUDGET); the Gradient tab's facing columns: GRADIENT_LIMIT
LIMIT = FIRST_LIMIT
GRADIENT_LIMIT = INITIAL_LIMIT
BUDGET = 400
_FILL = {
    "op": ("#e3effa", "#1e6fbf"),
    "call": ("#e3effa", "#1e6fbf"),
    "fusion": ("#fdebd9", "#d9660b"),
    "group": ("#eeeeee", "#777777"),
    "output": ("#e2f2e3", "#3b8b3f"),
    "const": ("#f2f2f2", "#888888"),
    "param": ("#f2f2f2", "#888888"),
}
_PHASE = {
    "forward": ("#d3e8fb", "#1e88e5"),
    "backward": ("#ffe0d6", "#f4511e"),
    "mixed": ("#efd7f4", "#8e24aa"),
}
#: diff statuses, as the widget's CSS (.nbc-d-*)
STATUS_COLOURS = {
    "added": ("#b4dbb5", "#2e7d32"),
    "removed": ("#f5b3b2", "#c62828"),
    "changed": ("#ffe0a3", "#ef6c00"),
    "same": ("#f4f4f4", "#bdbdbd"),
}
_STYLE = (
    "text{font-family:DejaVu Sans Mono,Menlo,Consolas,monospace;font-size:11px;fill:#555}"
    "text.m{font-weight:bold;fill:#111}text.t{font-size:13px;font-weight:bold;fill:#222}"
    "text.n{font-size:10px;fill:#666}.E path{fill:none;stroke:#777;stroke-opacity:.6;"
    "marker-end:url(#a)}.E path.u{stroke-opacity:.3;stroke-dasharray:3 3;marker-end:none}"
    ".E path.b{stroke:#f4511e;marker-end:none;marker-start:url(#a)}"
    ".E path.r{stroke:#8e24aa;stroke-opacity:.5}.E text{font-size:10px;fill:#8e24aa}"
    "rect.c{fill:#80808012;stroke:#bdbdbd}"
    "rect.h{fill:#80808029}"
)


def residual_width(nbytes: float, most: float) -> float:
    """A residual edge's stroke width (``residualWidth``): 1.5 to 7 px by its share of the
    largest residual."""
    return 1.5 + 5.5 * (max(0.0, nbytes) / max(1.0, most)) ** 0.5


def _group_phase(group: Any) -> str | None:
    if group is None:
        return None
    return "backward" if group.label.endswith(" (backward)") else group_phase(group)


def box_hooks(pg: Any, node: dict[str, Any] | None, group: Any, phases: bool) -> str:
    """The test hooks of a drawn box (``boxHooks``, SPEC §8.1) as SVG attributes: data-kind
    (group | op | fusion | output | input), data-name (its label; a kernel's in the user's words,
    ``layer#3 · matmul``, with XLA's name in data-kernel), data-in (the groups holding it,
    ``mlp#1/layer#3``) and, with ``phases``, data-phase (forward | backward | mixed)."""
    kernel = None
    if node is not None:
        k = node.get("kind")
        kind = (
            "fusion"
            if k == "fusion" or (node.get("fusion") and pg.is_compiled)
            else "output"
            if k == "output"
            else "input"
            if k in ("param", "const")
            else "op"
        )
        name, phase = node.get("label") or node.get("op"), node.get("phase")
        if pg.is_compiled and kind in ("fusion", "op"):
            name, kernel = kernel_title(pg, node), name
        key = "n:" + node["id"]
    else:
        kind, name, phase = "group", group.label if group else "", _group_phase(group)
        key = "g:" + (group.id if group else "")
    holders = [pg.groups[g] for g in ancestors(pg, key)]
    inside = "/".join(g.label for g in holders if g.kind not in ("chunk", "across", "rest"))
    out = f' data-kind="{kind}" data-name="{escape(str(name or ""))}"'
    if kernel is not None:
        out += f' data-kernel="{escape(str(kernel))}"'
    if inside:
        out += f' data-in="{escape(inside)}"'
    return out + (f' data-phase="{phase}"' if phases and phase else "")


def heat_colour(share: float) -> tuple[str, str]:
    """Fill and stroke for a share of time (0..1): pale yellow to deep red (the view's scale)."""
    s = max(0.0, min(1.0, share)) ** 0.5
    r, g, b = 255, round(243 - 131 * s), round(205 - 138 * s)
    return f"#{r:02x}{g:02x}{b:02x}", "#b71c1c" if s > 0.5 else "#e65100"


def graph_scene(
    graph: dict[str, Any],
    report: dict[str, Any] | None = None,
    *,
    limit: int | None = None,
    budget: int = BUDGET,
) -> tuple[Any, Scene]:
    """The prepared graph and the widget's first scene of it (memoised by the identity of what
    it reads: a re-run of an unchanged cell shares the program's graphs and fusions). ``limit``:
    the first picture's boxes, by default the widget's for that tab (``GRADIENT_LIMIT`` for the
    gradient program's facing columns, else ``LIMIT``)."""
    report = report or {"graphs": {}}
    if limit is None:
        gradient = graph is (report.get("graphs") or {}).get("gradient")
        limit = GRADIENT_LIMIT if gradient else LIMIT
    fusions = report.get("fusions")
    compiled = graph is (report.get("graphs") or {}).get("compiled")
    # (the subtitles count the parameters of the arguments report.param_args names)
    key = (id(graph), id(fusions), compiled, limit, budget, tuple(report.get("param_args") or ()))
    hit = _SCENES.get(key)
    if hit is not None and hit[0] is graph and hit[1] is fusions:
        return hit[2]
    pg = prepare_graph(graph, report)
    # the Gradient tab: a call opens with its backward group (as the widget's)
    gradient = graph is (report.get("graphs") or {}).get("gradient")
    result = (pg, build_scene(pg, initial_expansion(pg, limit, budget, pairs=gradient)))
    _SCENES[key] = (graph, fusions, result)  # keeps both alive: their ids are not reused
    while len(_SCENES) > 16:
        del _SCENES[next(iter(_SCENES))]
    return result


_SCENES: dict[tuple[Any, ...], tuple[Any, Any, tuple[Any, Scene]]] = {}


def graph_svg(
    graph: dict[str, Any],
    report: dict[str, Any] | None = None,
    *,
    title: str | None = None,
    color: str = "kind",
    limit: int | None = None,
    heat: dict[str, float] | None = None,
    status: dict[str, str] | None = None,
) -> str:
    """An SVG picture of one report graph, as the widget draws it first.

    ``color``: ``"kind"`` (op, fusion, output...), ``"phase"`` (forward / backward / mixed),
    ``"heat"`` with ``heat`` mapping node ids to a share (0..1) of measured time, or
    ``"status"`` with ``status`` mapping node ids to added / removed / changed / same (a diff).
    """
    pg, scene = graph_scene(graph, report, limit=limit)
    m, top, foot = 12.0, 22.0 if title else 0.0, 18.0
    root = scene.root
    n_drawn = len(pg.nodes) - len(pg.labels)
    units = sum(1 for b in scene.boxes.values() if b.children is None)
    shown = len(pg.labels) - len(pg.folded)
    what = "kernels" if pg.is_compiled else "ops"
    note = (
        f"{units} boxes for {n_drawn} {what}"
        + (f"; {shown} parameters/scalars shown as labels" if shown else "")
        + (f"; {len(pg.folded)} zero-cost bitcasts/copies folded" if pg.folded else "")
    )
    width = max(root.w + 2 * m, len(title or "") * 8.0 + 2 * m, len(note) * 6.2 + 2 * m)
    height = root.h + 2 * m + top + foot
    ox, oy = m + (width - 2 * m - root.w) / 2, m + top

    def f(v: float) -> str:
        return f"{v:.1f}".rstrip("0").rstrip(".")

    fills = {
        **{f"f-{k}": v for k, v in _FILL.items()},
        **{f"f-{k}": v for k, v in _PHASE.items()},
        **{f"f-{k}": v for k, v in STATUS_COLOURS.items()},
    }
    style = _STYLE + "".join(f".{k}{{fill:{a};stroke:{b}}}" for k, (a, b) in fills.items())
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}"><style>{style}</style>'
        '<defs><marker id="a" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse" markerUnits="userSpaceOnUse">'
        '<path d="M0,0L8,4L0,8z" fill="#777"/></marker></defs>'
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="#fff"/>',
    ]
    if title:
        out.append(f'<text class="t" x="{m}" y="{m + 10}">{escape(title)}</text>')
    out.append(f'<g transform="translate({f(ox)},{f(oy)})">')
    for box in scene.boxes.values():  # frames of expanded groups, outermost first
        if box.children is None or box.key == "root":
            continue
        out.append(
            f"<g{box_hooks(pg, None, box.group, color == 'phase')}>"
            f'<rect class="c" x="{f(box.x)}" y="{f(box.y)}" width="{f(box.w)}" '
            f'height="{f(box.h)}" rx="6"/><rect class="h" x="{f(box.x)}" y="{f(box.y)}" '
            f'width="{f(box.w)}" height="{HEADER - 4}" rx="6"/>'
            f'<text x="{f(box.x + PAD)}" y="{f(box.y + 13)}">{escape(box.title)}</text></g>'
        )
    out.append('<g class="E">')  # edges: style from the class, only what differs per edge
    most = max([1.0, *(e.residual or 0 for e in scene.edges)])
    for e in scene.edges:
        res = e.residual is not None
        sw = (
            residual_width(e.residual or 0, most)
            if res
            else min(4.0, 1 + (e.count.bit_length() - 1) / 2)
        )
        width_attr = f' stroke-width="{f(sw)}"' if sw != 1 else ""
        # in two facing columns an upward edge is the backward pass itself (arrow at its top)
        cls = " r" if res else " b" if e.up and e.columns else " u" if e.up else ""
        data = f' data-bytes="{e.residual:.0f}"' if res else ""
        out.append(
            f'<path class="{cls.strip()}" d="{path_data(e.points)}"{width_attr}{data}/>'
            if cls
            else f'<path d="{path_data(e.points)}"{width_attr}/>'
        )
        if res:
            (x0, y0), (x1, y1) = e.points[0], e.points[-1]
            out.append(
                f'<text x="{f((x0 + x1) / 2)}" y="{f((y0 + y1) / 2 - 4)}" text-anchor="middle">'
                f"{escape(fmt_bytes(e.residual))}</text>"
            )
    out.append("</g>")
    for box in scene.boxes.values():
        if box.children is not None:
            continue
        if box.node is not None:
            kind = (
                "fusion" if box.node.get("kind") == "fusion" else str(box.node.get("kind") or "op")
            )
            phase = box.node.get("phase")
        else:
            kind, phase = "group", _group_phase(box.group)
        paint = f'class="f-{kind if kind in _FILL else "op"}"'
        if color == "phase" and phase in _PHASE:
            paint = f'class="f-{phase}"'
        elif (
            color == "heat" and heat is not None and box.node is not None and box.node["id"] in heat
        ):
            fill, stroke = heat_colour(heat[box.node["id"]])
            paint = f'fill="{fill}" stroke="{stroke}"'
        elif (
            color == "status"
            and status is not None
            and box.node is not None
            and box.node["id"] in status
        ):
            paint = f'class="f-{status[box.node["id"]]}"'
        dash = ' stroke-dasharray="4 2"' if kind == "group" else ""
        out.append(
            f'<g transform="translate({f(box.x)},{f(box.y)})"'
            f'{box_hooks(pg, box.node, box.group, color == "phase")}><rect width="{f(box.w)}" '
            f'height="{f(box.h)}" rx="{6 if kind == "group" else 3}" {paint}{dash}/>'
        )
        for i, t in enumerate(box.lines):
            cls = ' class="m"' if i == 0 else ""
            out.append(f'<text x="7" y="{15 + i * LINE}"{cls}>{escape(t)}</text>')
        out.append("</g>")
    out.append("</g>")
    out.append(f'<text class="n" x="{m}" y="{height - 6:.0f}">{escape(note)}</text></svg>')
    return "".join(out)


def svg_img(svg: str, alt: str, *, testid: str | None = None) -> str:
    """An SVG picture as an ``<img>`` data URI (what untrusted notebooks keep)."""
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    tid = f' data-testid="{escape(testid)}"' if testid else ""
    return (
        f'<img src="data:image/svg+xml;base64,{data}" alt="{escape(alt)}"{tid} '
        f'style="max-width:100%;height:auto;border:1px solid #ccc;border-radius:4px;background:#fff">'
    )
