"""A frozen file holds no path of the freezing machine: a strings-style scan of the bytes finds
neither the user's folders (/tmp, $HOME, the repository) nor the install (site-packages), while
the program keeps what a reader needs: file base names with their lines, and op names."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import jax
import numpy as np

from nbcompile.frozen import _locations, freeze

REPO = Path(__file__).resolve().parents[2]
MODEL = """
import jax.numpy as jnp

def predict(params, x):
    hidden = jnp.tanh(x @ params["w"])
    return hidden @ params["v"]
"""


def _strings(data: bytes, least: int = 4) -> list[str]:
    """What ``strings`` prints: runs of printable ASCII of at least ``least`` characters."""
    return [m.decode() for m in re.findall(rb"[\x20-\x7e]{%d,}" % least, data)]


def test_no_machine_paths_in_a_frozen_file(tmp_path: Path) -> None:
    source = tmp_path / "user_code" / "my_model.py"
    source.parent.mkdir()
    source.write_text(MODEL)
    spec = importlib.util.spec_from_file_location("my_model", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(0)
    params = {
        "w": rng.normal(size=(8, 16)).astype(np.float32),
        "v": rng.normal(size=(16, 4)).astype(np.float32),
    }
    path = tmp_path / "m.nbc"
    freeze(module.predict, params, np.ones((2, 8), np.float32), path=path)
    text = "\n".join(_strings(path.read_bytes()))
    forbidden = [str(tmp_path), "/tmp/", "site-packages", "dist-packages", str(REPO), sys.prefix]
    home = str(Path.home())
    if home not in ("/", ""):
        forbidden.append(home + "/")
    found = [f for f in forbidden if f in text]
    assert not found, (found, [s for s in text.splitlines() if any(f in s for f in found)][:5])
    # What a reader needs is still there: the user's file and line, the op's name path.
    program = jax.export.deserialize(bytearray(path.read_bytes()[-_program_len(path) :]))
    printed = program.mlir_module()
    assert re.search(r'"my_model\.py":5:', printed), printed[-2000:]
    assert "jit(exported_fn)" in printed and "tanh" in printed


def _program_len(path: Path) -> int:
    import struct

    return struct.unpack_from("<4sIQQ32s", path.read_bytes(), 24 + 56 * 2)[3]


def test_clean_path_rules() -> None:
    clean = _locations.clean_path
    assert clean("/home/ann/work/model.py") == "model.py"
    assert clean("/tmp/ipykernel_4242/3311.py") == "3311.py"
    assert clean("/opt/venv/lib/python3.11/site-packages/flax/linen/module.py") == (
        "flax/linen/module.py"
    )
    assert clean(str(REPO / "nbcompile" / "frozen" / "_write.py")) == "nbcompile/frozen/_write.py"
    assert clean("C:\\Users\\ann\\model.py") == "model.py"
    assert clean("<ipython-input-3-abc>") == "<ipython-input-3-abc>"
    assert clean("model.py") == "model.py"
    text = 'loc("/home/ann/m.py":12:4 to :9) loc("jit(f)/dot"("/x/site-packages/a/b.py":3:1))'
    assert _locations.strip_module_text(text) == (
        'loc("m.py":12:4 to :9) loc("jit(f)/dot"("a/b.py":3:1))'
    )
