"""Displayed bytes of real models (issue 42): not more than 10 % over the 2026-12-04 03:35 run.

The figure is the benchmarks' "displayed bytes" row (``benchmarks._display.displayed_size``):
every payload of the display bundle (``text/plain``, the ``text/html`` fallback with its inline
renderer, the widget mime entry) plus the widget's state (its ``_esm`` and packed report).
The synthetic 12-layer report's budget is in test_widget_view.py; this is the real model.
"""

from __future__ import annotations

import pytest

from benchmarks import _display

# The 03:35 run's figures, bytes (benchmarks/results.json at f96e563; docs/benchmarks.md)
RUN_0335 = {"MLP": 226_731, "12-layer train": 372_912}


@pytest.mark.parametrize("model", ["MLP", pytest.param("12-layer train", marks=pytest.mark.slow)])
def test_displayed_bytes_within_ten_percent_of_the_0335_run(model):
    try:
        row = _display.displayed_size(model, None, "not measured")
    finally:
        _display._COMPILED.pop(model, None)  # the Compilation is not kept for the session
    parts = row.extra["parts"]
    total = sum(parts.values())
    assert set(parts) >= {"text/plain", "text/html", "widget state"}, parts
    assert total <= 1.10 * RUN_0335[model], (total, parts, row.extra["widget_state_parts"])
