"""The interactive view of a compilation: an anywidget over one Report dict.

This package is the only place that imports ipywidgets / anywidget. The front end is
``static/widget.js``, bundled from ``js/`` at build time (``hatch_build.py``). The state lives in
traits, so a saved notebook can rebuild the view without Python:

- ``report`` (Dict): the Report (docs/report-schema.md). In Python it is the plain dict; on the
  wire and in saved widget state it is gzip'd JSON in base64 (``{"format": "json.gz.b64", ...}``),
  which keeps a 12-layer train step's state around 130 KB (76 KB of it the report, the rest
  the front end, gzip'd too: :mod:`._shipped`).
- ``tab`` (Unicode): the open tab: ``graph``, ``compiled``, ``source``, ``gradient``, ``stats`` or
  ``diff`` (a re-run cell's "what changed" diff; a diff report is shown whole).
- ``selected`` (Unicode): what is selected: ``traced:<node id>``, ``compiled:<node id>``,
  ``fusion:<id>``, ``line:<n>``, ``group:<graph>:<group id>`` or ``""``. Settable from Python.

Displaying a view also gives ``text/plain`` and a ``text/html`` fallback (the static picture), so
the output stays readable where no widget manager runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from ..report import text_summary
from ..report.html import pack_report, render_html, render_static_html, unpack_report
from ._shipped import esm_loader, script_loader

__all__ = [
    "TABS",
    "CompilationView",
    "DisplayState",
    "Shown",
    "renderer_script",
    "show",
    "show_diff",
    "static_page",
]

TABS = ("graph", "compiled", "source", "gradient", "stats", "diff")
_STATIC = Path(__file__).resolve().parent / "static"


def _esm() -> str:
    """The front-end module's *text*, gzip'd behind a small loader (:mod:`._shipped`: it is in
    every view's state). (Given a path, anywidget watches the file and connects every widget
    instance to the watcher's signal, which then keeps each displayed view -- and its report --
    alive for good, even after it is closed.)"""
    path = _STATIC / "widget.js"
    if path.exists():
        return esm_loader(path.read_text(encoding="utf-8"))
    return (
        "export default { render({ el }) { el.textContent = 'nbcompile: the view front end is not "
        "built (run `npm ci && node js/build.mjs`, or reinstall nbcompile).'; } };"
    )


class CompilationView(anywidget.AnyWidget):
    """Interactive view (Graph, Compiled, Source, Gradient, Stats, Diff tabs) of one Report dict,
    or the diff view of a diff report (schema ``nbcompile.diff/1``).

    The view keeps only the *packed* report (``packed``: gzip'd column JSON in base64, what
    the front end reads; tens of KB), not the report's Python objects: ipywidgets keeps every
    displayed widget alive for as long as the kernel runs, so each output would otherwise hold
    its whole report. ``view.report`` unpacks it (and setting it packs the new report)."""

    # anywidget's own traits, declared here as synced traits of the class: anywidget adds any it
    # does not find to each new instance (``add_traits``), and traitlets does that by making
    # the instance a new subclass, which ipywidgets then keeps with the view for the kernel's
    # lifetime (~10 KB of class a displayed cell). Same names and values as anywidget's.
    _esm = traitlets.Unicode(_esm()).tag(sync=True)
    _anywidget_id = traitlets.Unicode(f"{__module__}.CompilationView").tag(sync=True)
    packed = traitlets.Dict().tag(sync=True)
    tab = traitlets.Unicode("graph").tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)

    def __init__(self, report: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(packed=pack_report(report), **kwargs)

    def add_traits(self, **traits: Any) -> None:
        """Only traits the class lacks are added (a new class per instance for them): checked
        with anywidget 0.11.0, whose ``__init__`` adds ``_anywidget_id`` to every instance."""
        new = {name: trait for name, trait in traits.items() if not self.has_trait(name)}
        if new:
            super().add_traits(**new)

    @property
    def report(self) -> dict[str, Any]:
        """The report this view draws (unpacked from ``packed``)."""
        return unpack_report(self.packed)

    @report.setter
    def report(self, value: dict[str, Any]) -> None:
        self.packed = pack_report(value)

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
        report = self.report
        data["text/plain"] = f"CompilationView({report.get('name')!r}, tab={self.tab!r})"
        data["text/html"] = render_html(report, renderer=renderer_script())
        return (data, meta) if isinstance(bundle, tuple) else data


def _renderer_path() -> Path:
    """The built front end for static pages (an IIFE defining ``window.nbcompileView``)."""
    return _STATIC / "nbcompile-view.js"


@functools.cache
def _renderer(mtime: float) -> str:
    return script_loader(_renderer_path().read_text(encoding="utf-8"))


def renderer_script() -> str | None:
    """The static renderer as an inline script (the built front end gzip'd behind a loader,
    :mod:`._shipped`), or None when the front end was not built."""
    path = _renderer_path()
    return _renderer(path.stat().st_mtime) if path.exists() else None


@dataclass
class DisplayState:
    """Per-kernel display state: whether this kernel's outputs already carry the ~53 KB static
    renderer (later outputs reuse ``window.nbcompileView`` from the page)."""

    renderer_sent: bool = False


@dataclass
class Shown:
    """One display of a report: the mimebundle, and the widget kept alive with it."""

    key: tuple[int, bool, bool]
    bundle: dict[str, Any]
    view: Any = field(default=None, repr=False)


def show(
    report: dict[str, Any],
    state: DisplayState | None,
    previous: Shown | None,
    *,
    widget: bool = True,
) -> Shown:
    """``text/plain`` + self-contained HTML fallback + the widget view of ``report``.

    ``state`` is the kernel's :class:`DisplayState` (None: a standalone display that carries its
    own renderer); ``previous`` is what the last display of the same compilation gave, reused
    when the report is unchanged. ``widget=False`` makes no widget at all (an ipyparallel
    engine: its widget could not reach the page, and opening its comm upsets the client).
    """
    state = state or DisplayState()
    key = (id(report), state.renderer_sent, widget)
    if previous is not None and previous.key == key:
        return previous
    renderer = None if state.renderer_sent else renderer_script()
    bundle: dict[str, Any] = {
        "text/plain": text_summary(report),
        "text/html": render_html(report, renderer=renderer),
    }
    state.renderer_sent = state.renderer_sent or renderer is not None
    if not widget:
        return Shown(key=key, bundle=bundle, view=None)
    view = CompilationView(report)
    bundle.update(_widget_mimes(view))
    return Shown(key=key, bundle=bundle, view=view)


def _widget_mimes(view: Any) -> dict[str, Any]:
    """The widget's own MIME entries (anywidget's bundle: CompilationView's adds a static
    picture the caller's bundle already has)."""
    widget_bundle = anywidget.AnyWidget._repr_mimebundle_(view)
    if isinstance(widget_bundle, tuple):
        widget_bundle = widget_bundle[0]
    return {
        mime: value
        for mime, value in (widget_bundle or {}).items()
        if mime.startswith("application/vnd.jupyter.widget")
    }


def static_page(report: dict[str, Any], *, title: str | None = None) -> str:
    """The whole view of ``report`` as one offline HTML page (``save_html``, ``render``)."""
    return render_static_html(report, renderer=renderer_script(), title=title)


def show_diff(diff: dict[str, Any], text: str) -> dict[str, Any]:
    """The display bundle of a diff report (``c_new.diff(c_old)``, ``nbcompile.compare``):
    ``text/plain``, the static diff view, and the widget drawing it (tab ``diff``)."""
    bundle: dict[str, Any] = {
        "text/plain": text,
        "text/html": render_html(diff, renderer=renderer_script()),
    }
    bundle.update(_widget_mimes(CompilationView(diff, tab="diff")))
    return bundle
