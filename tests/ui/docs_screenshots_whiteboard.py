"""Screenshots of the whiteboard picture of four models for the docs (not a test).

    python -m tests.ui.docs_screenshots_whiteboard   # writes docs/img/wb-<model>-<tab>.png

The four models of tests/ui/whiteboard_models.py (a plain-JAX MLP, a Flax NNX transformer,
Equinox's CNN, a plain-JAX convnet), each defined by running its cells in a real IPython shell
and compiled by its ``%%compile --grad`` cell as a notebook user does; each view is written as
its standalone offline page (``save_html``) and photographed in Debian's Chromium at 1400x900,
as a reader sees it at first paint: the Graph tab, the Compiled tab (the train step's kernels)
and the Gradient tab; for the MLP also the Gradient tab with ``layer#3`` opened (its backward
group opens with it). tests/ui/test_ui_whiteboard.py checks the same pictures.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMG = REPO / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
TABS = ("graph", "compiled", "gradient")


def _pages(tmp: Path) -> dict[str, Path]:
    import jax
    from IPython.testing.globalipapp import start_ipython

    import nbcompile
    from tests.ui.whiteboard_models import MODELS

    jax.config.update("jax_numpy_dtype_promotion", "standard")
    jax.config.update("jax_numpy_rank_promotion", "allow")
    shell = start_ipython()
    shell.run_line_magic("load_ext", "nbcompile")
    pages = {}
    for name, (cells, cell) in MODELS.items():
        shell.reset(new_session=False)
        # a fresh session per model: each is its notebook's first `loss` (no "what changed" card)
        shell.run_line_magic("unload_ext", "nbcompile")
        shell.run_line_magic("load_ext", "nbcompile")
        for text in cells:
            assert shell.run_cell(text).success, name
        res = shell.run_cell(cell.replace("%%compile --grad", "%%compile -q --grad"))
        assert res.success, (name, res.error_in_exec)
        pages[name] = Path(nbcompile.last().save_html(str(tmp / f"{name}.html")))
    return pages


def main() -> None:
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    IMG.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        pages = _pages(Path(tmp))
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900}, device_scale_factor=1)
        for name, path in pages.items():
            page.goto(path.as_uri())
            page.locator("[data-first-paint-ms]").wait_for()
            view = page.locator(".nbc-root").first
            for tab in TABS:
                view.get_by_test_id(f"nbc-tab-{tab}").click()
                page.wait_for_timeout(300)
                out = IMG / f"wb-{name}-{tab}.png"
                page.screenshot(path=str(out))
                written.append(out)
            if name == "mlp":  # an opened layer, facing its backward group op by op
                canvas = view.get_by_test_id("nbc-canvas-gradient")
                canvas.locator('[data-kind="group"][data-name="layer#3"]').first.click()
                page.wait_for_timeout(300)
                out = IMG / "wb-mlp-gradient-open.png"
                page.screenshot(path=str(out))
                written.append(out)
        browser.close()
    for out in written:
        print(out, out.stat().st_size)


if __name__ == "__main__":
    main()
