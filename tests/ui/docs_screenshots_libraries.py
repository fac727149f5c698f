"""Screenshots of the picture for the libraries' example models (not a test).

    python -m tests.ui.docs_screenshots_libraries   # writes docs/img/lib-<case>-{graph,gradient}.png

One re-implemented example model per library (tests/realmodels: Flax NNX, Flax Linen, Equinox,
Keras — credited in their case files), defined by running its cells in a real IPython shell
and compiled by a ``%%compile --grad`` cell as a notebook user does; each view is written as
its standalone offline page (``save_html``) and photographed in Debian's Chromium: the first
Graph view (the model's layers) and the Gradient tab (each layer facing its backward group).
tests/realmodels/test_picture.py checks the same pictures' structure.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMG = REPO / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
#: case name (tests/realmodels) -> the short name of its pictures
CASES = {
    "nnx_mnist_tutorial": "nnx",
    "linen_mnist_cnn": "linen",
    "eqx_mnist_cnn": "equinox",
    "keras_mnist_convnet": "keras",
}


def _pages(tmp: Path) -> dict[str, Path]:
    import jax
    from IPython.testing.globalipapp import start_ipython

    from tests.realmodels._cases_equinox import CASES as EQUINOX
    from tests.realmodels._cases_flax import CASES as FLAX
    from tests.realmodels._cases_keras import CASES as KERAS
    from tests.realmodels._helpers import compile_cell, use

    jax.config.update("jax_numpy_dtype_promotion", "standard")
    jax.config.update("jax_numpy_rank_promotion", "allow")
    shell = start_ipython()
    shell.run_line_magic("load_ext", "nbcompile")
    by_name = {case.name: case for case in [*FLAX, *EQUINOX, *KERAS]}
    pages = {}
    for name, short in CASES.items():
        case = by_name[name]
        use(shell, case)
        c = compile_cell(shell, f"--grad {case.grad}", case.loss)
        pages[short] = Path(c.save_html(str(tmp / f"{short}.html")))
    return pages


def main() -> None:
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("KERAS_BACKEND", "jax")
    IMG.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        pages = _pages(Path(tmp))
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 1400}, device_scale_factor=1)
        for short, path in pages.items():
            page.goto(path.as_uri())
            page.locator("[data-first-paint-ms]").wait_for()
            view = page.locator(".nbc-root").first
            for tab in ("graph", "gradient"):
                if tab == "gradient":
                    view.get_by_test_id("nbc-tab-gradient").click()
                    page.wait_for_timeout(300)
                out = IMG / f"lib-{short}-{tab}.png"
                view.screenshot(path=str(out))
                written.append(out)
        browser.close()
    for out in written:
        print(out, out.stat().st_size)


if __name__ == "__main__":
    main()
