"""Figures about what the user sees: displayed output size (vs jaxviz) and first paint.

Displayed size = every payload of the cell's display bundle (``text/plain``, the static
``text/html`` fallback, any widget mime entry) + the widget state the front end receives (the
live widget's state where ``nbcompile.widgets`` exists, else the report JSON, which is what that
state carries). First paint = navigation start to the graph's first drawn node in headless
Chromium, opening the page from ``nbcompile.widgets.static_page``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks._extra_models import build
from benchmarks._stats import Row, Target, summarise

__all__ = ["CHROMIUM", "displayed_size", "first_paint", "passes_paint"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: the first node drawn in the graph view's SVG (js/graphview.js: svg.nbc-svg > g.nbc-nodes)
GRAPH_NODE = "svg.nbc-svg .nbc-nodes > *"
#: Records, from an init script, when the first graph node exists and the frame after it.
_OBSERVER_JS = """
(() => {
  const sel = %s;
  const check = () => {
    if (window.__nbcFound === undefined && document.querySelector(sel)) {
      window.__nbcFound = performance.now();
      requestAnimationFrame(() => { window.__nbcPaint = performance.now(); });
      return true;
    }
    return window.__nbcFound !== undefined;
  };
  new MutationObserver((_, obs) => { if (check()) obs.disconnect(); })
    .observe(document, {childList: true, subtree: true});
})();
"""

#: the Passes tab's chart steps and the selected step's detail (js/passes.js: passesPanel)
PASSES_TAB = "[data-testid=nbc-tab-passes]"
PASSES_DRAWN = "svg.nbc-passes-chart .nbc-step"
#: Clicks the Passes tab and resolves, at the frame after its chart's first step is in the
#: DOM, with the milliseconds since the click was dispatched.
_PASSES_JS = """
([tab, sel, limit]) => new Promise((resolve, reject) => {
  const button = document.querySelector(tab);
  if (!button) { reject(new Error("no Passes tab")); return; }
  const t0 = performance.now();
  const check = () => {
    if (document.querySelector(sel)) requestAnimationFrame(() => resolve(performance.now() - t0));
    else if (performance.now() - t0 > limit) reject(new Error("the Passes tab drew nothing"));
    else requestAnimationFrame(check);
  };
  button.click();
  check();
})
"""

_COMPILED: dict[str, Any] = {}


def compiled(model: str) -> Any:
    """One Compilation per model for the display figures (size and paint share it)."""
    if model not in _COMPILED:
        import nbcompile

        fn, args = build(model)
        c = nbcompile.compile(fn, *args)
        c.analysis  # noqa: B018
        _COMPILED[model] = c
    return _COMPILED[model]


def _payload_bytes(value: Any) -> int:
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, str):
        return len(value.encode())
    return len(json.dumps(value, default=str).encode())


def _widget_state_bytes(c: Any, report: dict[str, Any]) -> tuple[int, str, dict[str, int]]:
    shown = getattr(c, "_shown", None)  # what the last display gave (nbcompile.widgets.show)
    view = getattr(c, "_view", None) or getattr(shown, "view", None)
    if view is not None and hasattr(view, "get_state"):
        state = {k: _payload_bytes(v) for k, v in view.get_state().items()}
        big = {k: n for k, n in state.items() if n >= 1000}
        return sum(state.values()), "widget state", big
    return len(json.dumps(report).encode()), "report JSON (no widget yet)", {}


def displayed_size(model: str, peer: dict[str, Any] | None, peer_note: str) -> Row:
    c = compiled(model)
    bundle = c._repr_mimebundle_()
    report = c.report()
    parts = {mime: _payload_bytes(v) for mime, v in bundle.items()}
    state_bytes, state_kind, state_parts = _widget_state_bytes(c, report)
    parts[state_kind] = state_bytes
    ours = float(sum(parts.values()))
    row = Row(
        "displayed bytes",
        model,
        "bytes",
        "nbcompile output",
        "jaxviz HTML",
        note="n=1 (sizes are deterministic); " + ", ".join(parts),
        extra={"parts": parts, "widget_state_parts": state_parts},
    )
    theirs = (peer or {}).get("models", {}).get(model, {})
    if "bytes" in theirs:
        row.set_pairs([ours], [float(theirs["bytes"])])
        row.extra["jaxviz_seconds"] = theirs["seconds"]
        row.extra["jaxviz_view"] = theirs["view"]
    else:
        row.set_pairs([ours])
        row.note += "; jaxviz: " + (theirs.get("error") or peer_note or "not measured")
    return row


def _render_static_html() -> Any | None:
    from nbcompile.widgets import static_page

    return static_page


def first_paint(
    models: list[str], repeats: int, outdir: Path, target: dict[str, float], timeout_s: float = 60.0
) -> list[Row]:
    """Navigation start -> first graph node drawn (next animation frame), per model."""
    render = _render_static_html()
    rows = [
        Row(
            "first paint",
            m,
            "s",
            "static page, headless Chromium",
            None,
            target=Target("subject", "<=", target[m], f"≤ {target[m]:g} s")
            if m in target
            else None,
            note=f"{repeats} page loads (new browser context each)",
        )
        for m in models
    ]
    if render is None:
        for row in rows:
            row.note = "not available: nbcompile.widgets.static_page is missing"
        return rows
    if not Path(CHROMIUM).exists():
        for row in rows:
            row.note = f"not available: {CHROMIUM} is not installed"
        return rows
    from playwright.sync_api import sync_playwright

    outdir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for row in rows:
                _paint_row(row, render, browser, repeats, outdir, timeout_s)
            version = browser.version
        finally:
            browser.close()
    for row in rows:
        row.extra["chromium"] = version
    return rows


def _paint_row(
    row: Row, render: Any, browser: Any, repeats: int, outdir: Path, timeout_s: float
) -> None:
    page_path = outdir / f"paint-{row.model.replace(' ', '_')}.html"
    page_path.write_text(render(compiled(row.model).report()))
    row.extra["page_bytes"] = page_path.stat().st_size
    times: list[float] = []
    remote: list[str] = []
    for _ in range(repeats):
        context = browser.new_context()
        page = context.new_page()
        page.on(
            "request",
            lambda r: (
                remote.append(r.url)
                if not r.url.startswith(("file:", "data:", "blob:", "about:"))
                else None
            ),
        )
        page.add_init_script(_OBSERVER_JS % json.dumps(GRAPH_NODE))
        try:
            page.goto(page_path.as_uri(), wait_until="commit")
            page.wait_for_function("window.__nbcPaint !== undefined", timeout=timeout_s * 1000)
            times.append(page.evaluate("window.__nbcPaint") / 1000.0)
        except Exception as exc:  # timeout: nothing drawn
            row.note = f"no graph node drawn within {timeout_s:g} s ({type(exc).__name__})"
            row.failed = True
            context.close()
            return
        context.close()
    row.subject = summarise(times)
    if remote:
        row.note += f"; page requested {len(set(remote))} non-local URLs"


def passes_paint(
    model: str, c: Any, repeats: int, outdir: Path, target: float | None, timeout_s: float = 60.0
) -> Row:
    """The Passes tab's first paint: on the static page of ``c`` (a Compilation with XLA's pass
    dump, so the report carries the tab), once the first graph node is drawn, a click on the
    Passes tab -> the frame after its chart's first step is in the DOM. New browser context
    per repeat, so each is the tab's first opening."""
    row = Row(
        "Passes tab paint",
        model,
        "s",
        "click Passes tab -> chart drawn, headless Chromium",
        None,
        target=None if target is None else Target("subject", "<=", target, f"≤ {target:g} s"),
        note=f"{repeats} page loads (new browser context each); static page with --passes's "
        "report; timed in the page from the tab's click to the frame after the first step",
    )
    render = _render_static_html()
    if c is None:
        row.note = "not available: no Compilation with a pass dump to show"
        return row
    if not Path(CHROMIUM).exists():
        row.note = f"not available: {CHROMIUM} is not installed"
        return row
    from playwright.sync_api import sync_playwright

    outdir.mkdir(parents=True, exist_ok=True)
    page_path = outdir / f"passes-{model.replace(' ', '_')}.html"
    page_path.write_text(render(c.report()))
    row.extra["page_bytes"] = page_path.stat().st_size
    times: list[float] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for _ in range(repeats):
                context = browser.new_context()
                page = context.new_page()
                page.add_init_script(_OBSERVER_JS % json.dumps(GRAPH_NODE))
                try:
                    page.goto(page_path.as_uri(), wait_until="commit")
                    page.wait_for_function(
                        "window.__nbcPaint !== undefined", timeout=timeout_s * 1000
                    )
                    ms = page.evaluate(_PASSES_JS, [PASSES_TAB, PASSES_DRAWN, timeout_s * 1000])
                    times.append(ms / 1000.0)
                except Exception as exc:  # no graph, no tab, or nothing drawn in time
                    row.note = f"Passes tab not drawn ({type(exc).__name__}: {str(exc)[:120]})"
                    row.failed = True
                    return row
                finally:
                    context.close()
            row.extra["chromium"] = browser.version
        finally:
            browser.close()
    row.subject = summarise(times)
    return row
