"""The interactive view of a compilation: an anywidget over one Report dict.

This package is the only place that imports ipywidgets / anywidget. The front end is
``static/widget.js``, bundled from ``js/`` at build time (``hatch_build.py``). The state lives in
traits, so a saved notebook can rebuild the view without Python:

- ``report`` (Dict): the Report (docs/report-schema.md). In Python it is the plain dict; on the
  wire and in saved widget state it is gzip'd JSON in base64 (``{"format": "json.gz.b64", ...}``),
  which keeps a 12-layer train step's state around 150 KB.
- ``tab`` (Unicode): the open tab: ``graph``, ``compiled``, ``source``, ``gradient`` or ``stats``.
- ``selected`` (Unicode): what is selected: ``traced:<node id>``, ``compiled:<node id>``,
  ``fusion:<id>``, ``line:<n>``, ``group:<graph>:<group id>`` or ``""``. Settable from Python.

Displaying a view also gives ``text/plain`` and a ``text/html`` fallback (the static picture), so
the output stays readable where no widget manager runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ..report.html import pack_report, render_html, unpack_report

__all__ = ["TABS", "CompilationView"]

TABS = ("graph", "compiled", "source", "gradient", "stats")
_STATIC = Path(__file__).resolve().parent / "static"


def _report_to_json(value: dict[str, Any] | None, _widget: Any) -> dict[str, str] | None:
    return None if value is None else pack_report(value)


def _report_from_json(value: dict[str, Any] | None, _widget: Any) -> dict[str, Any] | None:
    return None if value is None else unpack_report(value)


def _esm() -> Path | str:
    path = _STATIC / "widget.js"
    if path.exists():
        return path
    return (
        "export default { render({ el }) { el.textContent = 'nbcompile: the view front end is not "
        "built (run `npm ci && node js/build.mjs`, or reinstall nbcompile).'; } };"
    )


class CompilationView(anywidget.AnyWidget):
    """Interactive view (Graph, Compiled, Source, Gradient, Stats tabs) of one Report dict."""

    _esm = _esm()
    report = traitlets.Dict().tag(sync=True, to_json=_report_to_json, from_json=_report_from_json)
    tab = traitlets.Unicode("graph").tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)

    def __init__(self, report: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(report=report, **kwargs)

    @traitlets.validate("tab")
    def _check_tab(self, proposal: dict[str, Any]) -> str:
        if proposal["value"] not in TABS:
            raise traitlets.TraitError(
                f"tab must be one of {', '.join(TABS)}; got {proposal['value']!r}"
            )
        return proposal["value"]

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs)
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = dict(data or {})
        data["text/plain"] = f"CompilationView({self.report.get('name')!r}, tab={self.tab!r})"
        data["text/html"] = render_html(self.report)
        return (data, meta) if isinstance(bundle, tuple) else data
