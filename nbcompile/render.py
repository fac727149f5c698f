"""Execute a notebook and export it as one HTML file whose graphs are visible offline.

nbconvert's default HTML loads require.js, MathJax and the widget manager from CDNs, and prefers
stored widget state over a ``text/html`` fallback, so offline the view would be blank. Here the
widget outputs are dropped in favour of nbcompile's self-contained fallback (graph as an SVG
image plus the interactive renderer) and every CDN URL is blanked.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

WIDGET_MIMES = (
    "application/vnd.jupyter.widget-view+json",
    "application/vnd.jupyter.widget-state+json",
)
_CDN_TRAITS = (
    "jquery_url",
    "mathjax_url",
    "mermaid_js_url",
    "mermaid_layout_elk_js_url",
    "require_js_url",
    "widget_renderer_url",
    "jupyter_widgets_base_url",
)
_REMOTE = re.compile(r"""(?:src|href)=["']https?://""")


def strip_widgets(nb: Any) -> int:
    """Remove widget views/state so exporters show the HTML fallback; returns outputs changed."""
    changed = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data and any(m in data for m in WIDGET_MIMES):
                for mime in WIDGET_MIMES:
                    data.pop(mime, None)
                changed += 1
    nb.metadata.pop("widgets", None)
    return changed


def execute(nb: Any, cwd: str | os.PathLike[str], timeout: int = 600) -> Any:
    from nbclient import NotebookClient

    NotebookClient(
        nb,
        kernel_name="python3",
        timeout=timeout,
        allow_errors=False,
        resources={"metadata": {"path": str(cwd)}},
    ).execute()
    return nb


def to_html(nb: Any) -> str:
    """Export with nbconvert's lab template, no CDN (no require.js, MathJax or widget manager)."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    for trait in _CDN_TRAITS:
        if exporter.has_trait(trait):
            setattr(exporter, trait, "")
    body, _ = exporter.from_notebook_node(nb)
    return body


def render(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    run: bool = True,
    timeout: int = 600,
) -> Path:
    """Execute ``path`` (unless ``run=False``) and write offline-viewable HTML to ``out``."""
    import nbformat

    src = Path(path)
    nb = nbformat.read(src, as_version=4)
    if run:
        execute(nb, src.resolve().parent, timeout=timeout)
    strip_widgets(nb)
    html = to_html(nb)
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, target)
    return target


def remote_references(html: str) -> list[str]:
    """The src/href attributes of ``html`` that point off the machine (should be none)."""
    return [m.group(0) for m in _REMOTE.finditer(html)]
