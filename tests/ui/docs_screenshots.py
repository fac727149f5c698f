"""Screenshots of the view for the README and docs, from real compilations (not a test).

    python tests/ui/docs_screenshots.py   # writes docs/img/view-{graph,gradient,stats,diff}.png

Compiles a small Flax NNX model's loss with --grad (the Graph and Stats tabs, profiled and
memory-mapped) and an
edited MLP (the diff view) in this process, writes each view as its standalone offline page
(``save_html``) and photographs the view in Debian's Chromium, as a reader would see it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMG = REPO / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"


def _pages(tmp: Path) -> dict[str, Path]:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    import nbcompile
    from nbcompile.report.html import render_static_html
    from nbcompile.widgets import renderer_script

    jax.config.update("jax_numpy_rank_promotion", "allow")

    class Block(nnx.Module):
        def __init__(self, d: int, rngs: nnx.Rngs) -> None:
            self.norm = nnx.LayerNorm(d, rngs=rngs)
            self.up = nnx.Linear(d, 4 * d, rngs=rngs)
            self.down = nnx.Linear(4 * d, d, rngs=rngs)

        def __call__(self, x):
            return x + self.down(jax.nn.gelu(self.up(self.norm(x))))

    class Model(nnx.Module):
        def __init__(self, d: int, rngs: nnx.Rngs) -> None:
            self.embed = nnx.Linear(16, d, rngs=rngs)
            self.block1 = Block(d, rngs)
            self.block2 = Block(d, rngs)
            self.head = nnx.Linear(d, 10, rngs=rngs)

        def __call__(self, x):
            return self.head(self.block2(self.block1(self.embed(x))))

    model = Model(128, nnx.Rngs(0))

    def loss(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    c = nbcompile.compile(loss, model, jnp.ones((256, 16)), jnp.zeros((256, 10)), grad=0)
    c.run_profile(calls=5)
    c.memory_map  # noqa: B018
    pages = {"model": Path(c.save_html(str(tmp / "model.html")))}

    w = jnp.ones((64, 128)) * 0.01

    def mlp(x):
        h = jnp.tanh(x @ w)
        return jnp.sum(h * h)

    before = nbcompile.compile(mlp, jnp.ones((32, 64)))

    def mlp(x):  # the same cell with one line added
        h = jnp.tanh(x @ w)
        h = jnp.exp(h) * 0.5
        return jnp.sum(h * h)

    after = nbcompile.compile(mlp, jnp.ones((32, 64)))
    diff = tmp / "diff.html"
    diff.write_text(render_static_html(after.diff(before).view, renderer=renderer_script()))
    pages["diff"] = diff
    return pages


def main() -> None:
    import tempfile

    from playwright.sync_api import sync_playwright

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    IMG.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        pages = _pages(Path(tmp))
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 1600}, device_scale_factor=1)
        page.goto(pages["model"].as_uri())
        page.locator("[data-first-paint-ms]").wait_for()
        view = page.locator(".nbc-root").first
        view.screenshot(path=str(IMG / "view-graph.png"))
        (IMG / "view.png").write_bytes((IMG / "view-graph.png").read_bytes())  # docs/index.md
        view.get_by_test_id("nbc-tab-gradient").click()
        view.screenshot(path=str(IMG / "view-gradient.png"))
        view.get_by_test_id("nbc-tab-stats").click()
        view.get_by_test_id("nbc-stats").evaluate("(e) => { e.style.maxHeight = 'none'; }")
        view.screenshot(path=str(IMG / "view-stats.png"))
        page.goto(pages["diff"].as_uri())
        page.locator("[data-first-paint-ms]").wait_for()
        page.wait_for_timeout(300)
        page.locator(".nbc-root").first.screenshot(path=str(IMG / "view-diff.png"))
        browser.close()
    for name in ("view-graph.png", "view-gradient.png", "view-stats.png", "view-diff.png"):
        print(IMG / name, (IMG / name).stat().st_size)


if __name__ == "__main__":
    main()
