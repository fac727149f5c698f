"""benchmarks/capture_instructions.py: the callgrind probe of the call capture's instructions.

Valgrind is not needed here: the dumps' reading is checked on files written as callgrind writes
them, and the variants' stand-ins on a real trace (they must switch off what they name, record
nothing of their own, and be undone).
"""

from __future__ import annotations

import sys

import jax.numpy as jnp
import pytest

from benchmarks import capture_instructions as probe


def _dump(path, instructions):
    path.write_text(f"# callgrind format\nversion: 1\ncmd: python\nsummary: {instructions}\n")


def test_reading_pairs_each_trace_dump_with_its_variant(tmp_path):
    prefix = tmp_path / "capture.123"
    # a gap before the first trace, then trace / gap / trace / gap / trace (dump numbers out of
    # lexical order: 10 after 9)
    counts = [66_000_000, 3_226_900_000, 98_000_000, 3_302_400_000, 99_000_000, 3_277_200_000]
    counts += [98_500_000, 3_259_800_000, 97_000_000, 3_226_950_000]
    for k, n in enumerate(counts, start=1):
        _dump(tmp_path / f"capture.123.{k}", n)
    _dump(tmp_path / "capture.123", 1_000)  # the dump at exit: not a trace's
    text = probe.read(str(prefix), ["off", "full", "full+norec", "full+nopush+norec", "off"])
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["off", "3226.9"]
    assert "+75.5 M (+2.34% of off)" in lines[1]
    assert "+32.9 M" in lines[3]
    with pytest.raises(SystemExit, match="5 trace dumps"):
        probe.read(str(prefix), ["off", "full"])
    # a run cut off before its first dump was written: said so, naming where it looked
    empty = tmp_path / "empty.7"
    _dump(tmp_path / "empty.7.1", 0)
    with pytest.raises(SystemExit, match=r"no dump under .*empty\.7\.\* holds a count"):
        probe.read(str(empty), ["off", "full"])


def _model(x):
    return jnp.tanh(x) * 2.0 + jnp.sin(x)


@pytest.mark.skipif(sys.version_info < (3, 13), reason="the events backend's variants")
def test_variants_switch_off_what_they_name_and_are_undone():
    from nbcompile.capture import _events
    from nbcompile.capture.calls import record_calls
    from nbcompile.stages import make_jitted

    x = jnp.ones(4)
    observe, push = _events._Events.observe, _events._Events.push
    for variant, calls in (("full", 2), ("full+norec", 0), ("full+nopush+norec", 0)):
        undo = probe._variant(variant)
        try:
            with record_calls(backend="monitoring") as log:
                traced = make_jitted(_model).trace(x)
        finally:
            probe._undo(undo)
        recorded = [c for c in log.calls if c.kind != "transparent"]
        assert len(recorded) == calls, (variant, [c.label for c in log.calls])  # tanh, sin
        assert len(traced.jaxpr.eqns) == 4  # the program is the same whatever is switched off
    assert _events._Events.observe is observe and _events._Events.push is push
