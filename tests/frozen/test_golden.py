"""The golden file written by format version 1 keeps loading and giving its recorded output."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.frozen import _format, _load, _manifest, _safetensors, load

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "golden_v1.nbc"


def test_golden_v1_container_still_parses() -> None:
    sections = _format.check_sections(_format.read_file(GOLDEN))
    assert sections.format_version == 1
    manifest = _manifest.parse(sections.manifest, 1)
    assert manifest["name"] == "golden_v1"
    assert manifest["platforms"] == ["cpu", "cuda", "tpu"]
    tensors, _ = _safetensors.parse(sections.weights)
    assert {t.name for t in tensors} == {"const_0", "params['b1']", "params['w1']", "params['w2']"}


def test_golden_v1_loads_and_gives_its_output() -> None:
    writer = _manifest.parse(_format.check_sections(_format.read_file(GOLDEN)).manifest, 1)[
        "writer"
    ]
    try:
        _load.check_version_window(writer)
    except FreezeError as err:
        # A JAX far newer than 0.10.2 may no longer read the jax.export artifact: then the file
        # must be refused as out of window, never as malformed.
        assert err.code == "NBC502"
        return
    model = load(GOLDEN)
    x = np.load(DATA / "golden_v1_input.npy", allow_pickle=False)
    want = np.load(DATA / "golden_v1_output.npy", allow_pickle=False)
    got = np.asarray(model(x))
    assert got.dtype == want.dtype and got.shape == want.shape == (3, 4)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
