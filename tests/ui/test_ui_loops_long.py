"""A long loop in the picture (hostile round four), in Chromium from its saved page: a
1,000-iteration ``lax.scan`` profiled, drawn as a strip of at most 64 bars (before: 1,000 bars,
each under a pixel wide, each with its own hover text), each bar a run of iterations as tall as
its slowest one, its hover naming the run, its mean and its slowest iteration."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from jax import lax

import nbcompile
from nbcompile.measure._loop_bounds import MAX_BARS

from .helpers import screenshot

pytestmark = pytest.mark.ui

N = 1000
STRIP = """(canvas) => [...canvas.querySelectorAll('[data-testid="nbc-loop-bar"]')].map((e) => ({
  first: Number(e.getAttribute('data-iteration')), last: Number(e.getAttribute('data-last')),
  title: e.querySelector('title').textContent, h: e.getBoundingClientRect().height,
  w: e.getBoundingClientRect().width}))"""


def long_scan(x, w):
    def body(c, _):
        return jnp.tanh(c @ w) + 0.1, c[0, 0]

    return lax.scan(body, x, None, length=N)


def test_a_long_loop_is_a_strip_of_at_most_64_bars(ui_page, tmp_path):
    c = nbcompile.compile(long_scan, jnp.ones((64, 64)), jnp.eye(64) * 0.5)
    p = c.run_profile(calls=2)
    (t,) = p.loops
    assert len(t.iterations) == N
    path = tmp_path / "long.html"
    c.save_html(str(path))
    page = ui_page
    page.goto(path.as_uri())
    page.locator("[data-first-paint-ms]").wait_for()
    for tab in ("graph", "compiled"):
        page.get_by_test_id(f"nbc-tab-{tab}").click()
        canvas = page.get_by_test_id(f"nbc-canvas-{tab}")
        canvas.locator('[data-kind="group"]').first.wait_for()
        screenshot(page, f"loops_long_{tab}.png")
        bars = canvas.evaluate(STRIP)
        assert 1 < len(bars) <= MAX_BARS, len(bars)
        assert bars[0]["first"] == 0 and bars[-1]["last"] == N - 1
        assert all(b["w"] > 0 and b["h"] > 0 for b in bars)
        first = bars[0]["title"]
        assert f"iterations 0–{bars[0]['last']} of {N}: mean" in first and "slowest" in first
        strip = canvas.locator('[data-testid="nbc-loop-strip"]').first
        assert f"{N} iterations measured in {len(bars)} bars" in strip.get_attribute("aria-label")
        # the tallest bar holds the slowest iteration
        tallest = max(bars, key=lambda b: b["h"])
        slow = max(range(N), key=t.iterations.__getitem__)
        assert tallest["first"] <= slow <= tallest["last"] or tallest["h"] == pytest.approx(
            max(b["h"] for b in bars if b["first"] <= slow <= b["last"]), abs=0.5
        )
    assert not page.page_errors, page.page_errors
