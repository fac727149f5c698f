"""Self-contained HTML for a Report: a static picture that survives anywhere, plus the live view.

``render_html`` is the ``text/html`` fallback of a compilation's display: JupyterLab strips inline
``<script>`` and ``<svg>`` from untrusted (downloaded) notebooks but keeps an
``<img src="data:image/svg+xml;base64,...">``, so the fallback (:mod:`.fallback`) carries every
tab as ``<details>`` sections with such images (laid out in Python by the port of the widget's
layout, :mod:`nbcompile.report.scene`); for trusted outputs
and exported pages an inline script replaces it with the interactive view, reading the report
from a gzip+base64 string. The renderer is the same front-end bundle as the widget; the caller
passes its script in (``renderer``; :func:`nbcompile.widgets.renderer_script`: the bundle gzip'd
behind a loader), or None for outputs after the first in one page, which then use
``window.nbcompileView`` defined by it.
Nothing is fetched from the network.
"""

from __future__ import annotations

import base64
import gzip
import html
import itertools
import json
import re
import uuid
import zlib
from typing import Any

from .diffhtml import diff_html
from .fallback import fallback_html
from .svg import svg_img

__all__ = [
    "PACK_FORMAT",
    "pack_report",
    "render_html",
    "render_static_html",
    "svg_img",
    "unpack_report",
]

PACK_FORMAT = "nbcols2.gz.b64"
_READS = ("nbcols1.gz.b64", PACK_FORMAT)  # nbcols2 adds $like / $tab / $tabs to nbcols1
DIFF_SCHEMA = "nbcompile.diff/1"
_MIN_ROWS = 8
_ID = re.compile(r"([A-Za-z_]+)(0|[1-9][0-9]*)")


def pack_report(report: dict[str, Any]) -> dict[str, str]:
    """The report packed for the wire and for saved state: ``{"format", "data"}``.

    ``data`` is base64 of gzip'd compact JSON of the report with lists of records stored column by
    column, graph edges as node-index deltas (an edge's ``shape`` / ``bytes`` are left out when
    they are its source node's) and lists of ids with one prefix (``n0, n1, n7``: node ids, a
    line's nodes) as the prefix and integer deltas. For the 12-layer train step this is 62 KB,
    27% smaller than without the ids (and far smaller than gzip alone). A string column equal to
    an earlier one but at a few rows (a fusion's ``name`` and ``id``) is stored as those rows
    (``$like``); a list of strings, or of lists of strings, with many repeats (call paths) as a
    table of the distinct strings and indices into it (``$tab``, ``$tabs``): 16 % smaller for
    the GPT-2-small train step than nbcols1.
    ``js/model.js`` decodes it; :func:`unpack_report` is the exact inverse.
    """
    cached = _PACKED.get(id(report))
    if cached is not None and cached[0] is report:
        return cached[1]  # one display packs a report once: for its HTML and for the widget
    packed = {"format": PACK_FORMAT, "data": base64.b64encode(_gzipped(_encode(report))).decode()}
    _remember(_PACKED, id(report), (report, packed), 8)
    return packed


# Level 6, not 9: every display packs (a re-run too); for the GPT-2-small train step 4 % more
# bytes (150 -> 156 KB) for a quarter of the time (380 -> 95 ms, loaded 2 cores).
_LEVEL = 6
_BIG = 4096  # a top-level entry this long (JSON characters) goes in the prefix (see _gzipped)
# prefix text -> (the compressor having read it, what it wrote so far): the last few programs
_PREFIXES: dict[str, tuple[Any, bytes]] = {}


def _gzipped(encoded: Any) -> bytes:
    """gzip of the JSON of ``encoded`` (a report's encoding).

    A report's large entries (graphs, fusions, lines: the program's, the same objects on every
    run of it) are written first and its small ones (timings, notes, results: this run's) after;
    the compressor's state after the large ones is kept, keyed by their text. A re-run of an
    unchanged cell compresses only its small entries: for the GPT-2-small train step 4.4 MB of
    JSON, 48 -> ~4 ms (measured, Python 3.13). The key is the text itself, so a kept state
    serves only the same bytes. JSON objects are unordered: the view reads the same report."""
    if type(encoded) is not dict or not all(type(k) is str for k in encoded):
        return gzip.compress(_dumps(encoded).encode("utf-8"), _LEVEL, mtime=0)
    items = [f"{json.dumps(k)}:{_dumps(v, 1)}" for k, v in encoded.items()]
    prefix = "{" + ",".join(t for t in items if len(t) >= _BIG)
    small = ",".join(t for t in items if len(t) < _BIG)
    rest = ("," if small and len(prefix) > 1 else "") + small + "}"
    kept = _PREFIXES.get(prefix)
    if kept is None:
        # wbits 31: a gzip member (header, deflate, CRC and size), as gzip.compress writes
        compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, 31)
        head = compressor.compress(prefix.encode("utf-8"))
        kept = (compressor.copy(), head)
        _PREFIXES[prefix] = kept
        while len(_PREFIXES) > 3:  # each holds its text and ~0.3 MB of compressor state
            del _PREFIXES[next(iter(_PREFIXES))]
    else:
        compressor = kept[0].copy()
    return kept[1] + compressor.compress(rest.encode("utf-8")) + compressor.flush()


# Memos by identity (each entry keeps its object alive, so an id is never reused meanwhile): the
# packed form of a report (packed twice per display otherwise), and the encoding of a graph,
# which the analysis JSON shares between every run of one program (a re-run of an unchanged
# cell encodes only what changed: its timings, notes and results).
_PACKED: dict[int, tuple[Any, dict[str, str]]] = {}
_ENCODED: dict[int, tuple[Any, Any]] = {}


_TEXT: dict[int, tuple[Any, str]] = {}  # an encoded graph or record list -> its JSON text
_SHARED: dict[int, Any] = {}  # id -> the encodings _ENCODED holds (those whose text is kept)


def _dumps(encoded: Any, depth: int = 2) -> str:
    """``json.dumps(encoded, separators=(",", ":"), allow_nan=False)``, the same text, with the
    JSON of each encoded graph or record list (:data:`_ENCODED`, shared by every run of one
    program) written once: a re-run serialises only what changed (for the GPT-2-small train
    step: 3.4 MB of JSON, ~130 ms, most of it the program's graphs)."""
    hit = _TEXT.get(id(encoded))
    if hit is not None and hit[0] is encoded:
        return hit[1]
    if depth > 0 and type(encoded) is dict and all(type(k) is str for k in encoded):
        text = (
            "{"
            + ",".join(f"{json.dumps(k)}:{_dumps(v, depth - 1)}" for k, v in encoded.items())
            + "}"
        )
    else:
        text = json.dumps(encoded, separators=(",", ":"), allow_nan=False)
    shared = _SHARED.get(id(encoded))
    if shared is not None and shared is encoded:
        _remember(_TEXT, id(encoded), (encoded, text), 256)
    return text


def _remember(memo: dict[int, Any], key: int, value: Any, size: int) -> None:
    memo[key] = value
    while len(memo) > size:
        del memo[next(iter(memo))]


def unpack_report(packed: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`pack_report`; a plain report (with ``schema``) is returned as is."""
    if "schema" in packed:
        return packed
    if packed.get("format") not in _READS:
        raise ValueError(
            f"not a packed nbcompile report (format {packed.get('format')!r}, expected {PACK_FORMAT!r})"
        )
    return _decode(json.loads(gzip.decompress(base64.b64decode(packed["data"]))))


def _encode(obj: Any) -> Any:
    # by identity: record lists, graphs and tables by key (a program's ``lines``), which the
    # analysis JSON shares between the runs of one program
    big = isinstance(obj, list) and len(obj) >= 64 and isinstance(obj[0], dict)  # records
    if big or (isinstance(obj, dict) and ("nodes" in obj or len(obj) >= 64)):
        hit = _ENCODED.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        encoded = _encode_dict(obj) if isinstance(obj, dict) else _encode_other(obj)
        _remember(_ENCODED, id(obj), (obj, encoded), 256)
        _remember(_SHARED, id(encoded), encoded, 256)
        return encoded
    if isinstance(obj, dict):
        return _encode_dict(obj)
    return _encode_other(obj)


def _encode_dict(obj: dict[str, Any]) -> Any:
    if any(k.startswith("$") for k in obj):
        return {"$dict": [[k, _encode(v)] for k, v in obj.items()]}
    out = {k: _encode(v) for k, v in obj.items()}
    edges = _encode_edges(obj)
    if edges is not None:
        out["edges"] = edges
    return out


def _encode_other(obj: Any) -> Any:
    if isinstance(obj, list):
        ids = _encode_ids(obj)
        if ids is not None:
            return ids
        if len(obj) >= _MIN_ROWS and all(isinstance(x, dict) for x in obj):
            keys = list(dict.fromkeys(k for x in obj for k in x))
            absent = {k: [i for i, x in enumerate(obj) if k not in x] for k in keys}
            return {
                "$cols": _encode_columns({k: [x.get(k) for x in obj] for k in keys}),
                "$n": len(obj),
                "$absent": {k: v for k, v in absent.items() if v},
            }
        return _encode_table(obj) or [_encode(x) for x in obj]
    return obj


def _text_column(values: list[Any]) -> bool:
    return all(v is None or type(v) is str for v in values)


def _encode_columns(columns: dict[str, list[Any]]) -> dict[str, Any]:
    """Columns of one record list; a column of strings that equals an earlier such column
    but at no more than a quarter of its rows is ``{"$like": that column, "at": the rows
    (deltas), "v": their values}`` (only strings and None compare, so the match is exact)."""
    out: dict[str, Any] = {}
    plain: list[str] = []  # text columns stored as themselves: what a $like may point at
    for key, values in columns.items():
        text = _text_column(values)
        like: tuple[str, list[int]] | None = None
        for other in plain if text else ():
            base = columns[other]
            rows = [i for i, (a, b) in enumerate(zip(values, base, strict=True)) if a != b]
            if len(rows) * 4 <= len(values) and (like is None or len(rows) < len(like[1])):
                like = (other, rows)
        if like is None:
            out[key] = _encode(values)
            if text:
                plain.append(key)
            continue
        other, rows = like
        out[key] = {
            "$like": other,
            "at": [b - a for a, b in itertools.pairwise([0, *rows])],
            "v": [values[i] for i in rows],
        }
    return out


def _encode_table(items: list[Any]) -> dict[str, Any] | None:
    """A list of strings (or of lists of strings) with many repeats as a table of the distinct
    strings and indices into it: ``{"$tab": [...], "i": [...]}`` (``$tabs``: lists of them)."""
    if len(items) < _MIN_ROWS:
        return None
    if all(type(x) is str for x in items):
        table = list(dict.fromkeys(items))
        if len(table) * 2 > len(items):
            return None
        index = {s: i for i, s in enumerate(table)}
        return {"$tab": table, "i": [index[s] for s in items]}
    if all(type(x) is list and all(type(y) is str for y in x) for x in items):
        table = list(dict.fromkeys(y for x in items for y in x))
        if not table or len(table) * 2 > sum(map(len, items)):
            return None
        index = {s: i for i, s in enumerate(table)}
        return {"$tabs": table, "i": [[index[y] for y in x] for x in items]}
    return None


def _encode_ids(items: list[Any]) -> dict[str, Any] | None:
    """Ids with one prefix (``n0, n1, n7``...: node ids, a line's nodes) as prefix + deltas."""
    if len(items) < 4 or not all(isinstance(x, str) for x in items):
        return None
    found = [_ID.fullmatch(x) for x in items]
    if not all(found) or len({m[1] for m in found if m}) != 1:
        return None
    nums = [int(m[2]) for m in found if m]
    return {
        "$ids": found[0][1] if found[0] else "",
        "d": [nums[0]] + [b - a for a, b in itertools.pairwise(nums)],
    }


def _encode_edges(graph: dict[str, Any]) -> dict[str, Any] | None:
    nodes, edges = graph.get("nodes"), graph.get("edges")
    if not (isinstance(nodes, list) and isinstance(edges, list) and edges):
        return None
    if not all(isinstance(n, dict) and "id" in n for n in nodes):
        return None
    index = {n["id"]: i for i, n in enumerate(nodes)}
    if len(index) != len(nodes) or not all(
        isinstance(e, dict) and e.get("src") in index and e.get("dst") in index for e in edges
    ):
        return None
    src = [index[e["src"]] for e in edges]
    dst = [index[e["dst"]] for e in edges]
    own, rest = [], []
    for i, e in enumerate(edges):
        node = nodes[src[i]]
        extra = {k: v for k, v in e.items() if k not in ("src", "dst")}
        inherits = (
            list(extra) == ["bytes", "shape"]
            and "bytes" in node
            and "shape" in node
            and extra["bytes"] == node["bytes"]
            and extra["shape"] == node["shape"]
        )
        if not inherits:
            own.append(i)
            rest.append(extra)
    return {
        "$edges": 1,
        "dst": [dst[0]] + [dst[i] - dst[i - 1] for i in range(1, len(dst))],
        "src": [d - s for d, s in zip(dst, src, strict=True)],
        "own": own,
        "rest": _encode(rest),
    }


def _decode(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_decode(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    if "$dict" in obj:
        return {k: _decode(v) for k, v in obj["$dict"]}
    if "$ids" in obj:
        return [obj["$ids"] + str(n) for n in itertools.accumulate(obj["d"])]
    if "$tab" in obj:
        return [obj["$tab"][i] for i in obj["i"]]
    if "$tabs" in obj:
        return [[obj["$tabs"][i] for i in row] for row in obj["i"]]
    if "$cols" in obj:
        n = obj["$n"]
        cols = {k: _decode(v) for k, v in obj["$cols"].items() if not _is_like(v)}
        for k, v in obj["$cols"].items():
            if _is_like(v):
                col = list(cols[v["$like"]])
                for i, value in zip(itertools.accumulate(v["at"]), v["v"], strict=True):
                    col[i] = value
                cols[k] = col
        cols = {k: cols[k] for k in obj["$cols"]}
        absent = {k: set(v) for k, v in obj.get("$absent", {}).items()}
        return [
            {k: col[i] for k, col in cols.items() if i not in absent.get(k, ())} for i in range(n)
        ]
    out = {k: _decode(v) for k, v in obj.items() if k != "edges"}
    if "edges" in obj:
        enc = obj["edges"]
        out["edges"] = (
            _decode_edges(enc, out.get("nodes") or [])
            if isinstance(enc, dict) and "$edges" in enc
            else _decode(enc)
        )
    return {k: out[k] for k in obj}


def _is_like(value: Any) -> bool:
    return isinstance(value, dict) and "$like" in value


def _decode_edges(enc: dict[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    dst, acc = [], 0
    for i, d in enumerate(enc["dst"]):
        acc = d if i == 0 else acc + d
        dst.append(acc)
    own = dict(zip(enc["own"], _decode(enc["rest"]), strict=True))
    edges = []
    for i, (d, back) in enumerate(zip(dst, enc["src"], strict=True)):
        node = nodes[d - back]
        edge = {"src": node["id"], "dst": nodes[d]["id"]}
        edge.update(own[i] if i in own else {"bytes": node["bytes"], "shape": node["shape"]})
        edges.append(edge)
    return edges


def _script_safe(js: str) -> str:
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


# an element whose text is not HTML: a character reference there is not decoded
_RAW_TEXT = re.compile(r"<(script|style)\b.*?</\1\s*>", re.DOTALL | re.IGNORECASE)


def _ascii_html(text: str) -> str:
    """``text`` with each non-ASCII character outside ``<script>`` / ``<style>`` written as a
    character reference (``→`` as ``&#8594;``): the browser shows the same page. A Python
    string holding even one character past U+00FF takes two bytes per character, and IPython
    keeps every output's bundle for the session (IPython >= 9, ``history_manager.outputs``):
    a few arrows in a card made each ~32 KB fallback cost ~64 KB for as long as the kernel runs.
    """
    if text.isascii():
        return text
    out, at = [], 0
    for raw in _RAW_TEXT.finditer(text):
        out.append(text[at : raw.start()].encode("ascii", "xmlcharrefreplace").decode("ascii"))
        out.append(raw.group(0))
        at = raw.end()
    out.append(text[at:].encode("ascii", "xmlcharrefreplace").decode("ascii"))
    return "".join(out)


def _render(
    report: dict[str, Any],
    *,
    interactive: bool,
    renderer: str | None,
    standalone: bool,
) -> str:
    uid = "nbc-" + uuid.uuid4().hex[:12]
    attrs = f'class="nbc-static" data-nbc-root="{uid}"' + (
        " data-nbc-standalone" if standalone else ""
    )
    if report.get("schema") == DIFF_SCHEMA:
        static = diff_html(report)
    else:
        static = fallback_html(report)
    out = [f"<div {attrs}>", f"<div data-nbc-fallback>{_ascii_html(static)}</div>"]
    if interactive:
        out.append("<div data-nbc-mount></div>")
        if renderer:
            out.append(f"<script>{_script_safe(renderer)}</script>")
        data = json.dumps(pack_report(report))
        # The renderer may come from an earlier output of the page: wait for it a little.
        out.append(
            "<script>(function(){var s=document.currentScript,r=s&&s.closest?s.closest('[data-nbc-root]'):null;"
            f"var d={data},n=0;function go(){{var v=window.nbcompileView;"
            f"if(v){{v.mount(r||'{uid}',d);}}else if(n++<100){{setTimeout(go,50);}}}}go();}})();</script>"
        )
    out.append("</div>")
    return "".join(out)


def render_html(
    report: dict[str, Any],
    *,
    renderer: str | None = None,
    interactive: bool = True,
) -> str:
    """Self-contained HTML (no network) for the ``text/html`` output of a compilation (or of a
    diff report, schema ``nbcompile.diff/1``).

    Always holds the static picture (:mod:`.fallback`: every tab as a ``<details>`` section with
    ``<img>`` data URIs drawn from the widget's own layout); with ``interactive`` also the live
    view, drawn by ``renderer`` (the front end's source) or by one an earlier output put on the
    page.
    """
    return _render(report, interactive=interactive, renderer=renderer, standalone=False)


def render_static_html(
    report: dict[str, Any], *, renderer: str | None, title: str | None = None
) -> str:
    """A complete standalone HTML page (``make demo``, ``nbcompile render``, ``save_html``),
    offline; without a ``renderer`` it holds the static picture only."""
    title = html.escape(title or f"nbcompile · {report.get('name')}")
    body = _render(report, interactive=renderer is not None, renderer=renderer, standalone=True)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title>'
        "<style>body{margin:12px;background:Canvas;color:CanvasText;font-family:system-ui,sans-serif}"
        '</style><meta name="color-scheme" content="light dark"></head>'
        f"<body>{body}</body></html>"
    )
