"""A re-run's display reuses what the program's earlier display made (graphs laid out, encoded
and serialised once per program), and shows exactly what a first display of it would."""

from __future__ import annotations

import base64
import gzip
import json

import nbcompile
from nbcompile.report import forget_memos, html


def _raw(packed: dict[str, str]) -> bytes:
    return gzip.decompress(base64.b64decode(packed["data"]))


def test_a_reruns_report_shares_the_programs_graphs_and_packs_the_same(shell):
    shell.reset(new_session=False)
    setup = (
        "import jax, jax.numpy as jnp\n"
        "def block(h):\n    return jnp.tanh(h @ h.T) * 2.0\n"
        "def f(x):\n    return block(block(x)).sum()\n"
        "x = jnp.ones((16, 16), jnp.float32)\n"
    )
    assert shell.run_cell(setup).success
    cell = "%%compile -q\nf(x)\n"
    assert shell.run_cell(cell).success
    first = nbcompile.last()
    assert shell.run_cell(cell).success
    again = nbcompile.last()
    assert again.cache_hit and again.program is first.program
    a, b = first.report(), again.report()
    for name in ("traced", "compiled"):
        assert a["graphs"][name] is b["graphs"][name], name  # what the display's memos know
    packed = html.pack_report(b)
    want = json.loads(json.dumps(html._encode(b), separators=(",", ":"), allow_nan=False))
    # the spliced serialisation is valid JSON of the same value as json.dumps's (its large
    # entries first: the compressor's state after them is kept for the program's next runs)
    assert json.loads(_raw(packed)) == want
    assert html.unpack_report(packed)["cache_hit"] is True
    forget_memos()
    fresh = html.pack_report(again.report())
    assert _raw(fresh) == _raw(packed)  # memos or none, the same bytes


def test_pack_report_text_memo_is_exact_for_nested_values():
    report = {
        "schema": "x",
        "graphs": {"traced": {"nodes": [{"id": "n0", "op": "tanh"}], "edges": []}},
        "fusions": [{"name": f"f{i}", "flops": float(i)} for i in range(70)],
        "summary": {"é": 1.5, "n": None},
    }
    want = json.dumps(html._encode(report), separators=(",", ":"), allow_nan=False)
    assert html._dumps(html._encode(report)) == want
    assert html._dumps(html._encode(report)) == want  # served from the memo
