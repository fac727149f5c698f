"""The frozen format across the supported JAX versions (SPEC 9.1): a file frozen under one stack
loads under the other, or is refused with an NBC code that names both versions and the fix.

Two committed files of the same model and format version (tests/frozen/make_golden.py):
``golden_v1.nbc`` written with JAX 0.10.2 (the oldest supported stack) and
``golden_v1_jax012.nbc`` written with JAX 0.12.0.1 (the newest). ``make test`` runs this on the
newest stack and ``make test-compat`` on JAX 0.10.2, so each direction is checked.

What JAX allows, measured: JAX 0.12 reads 0.10.2's artifacts (export serialization version 11,
inside its backward window); JAX 0.10.2 cannot read 0.12's (serialization version 12 is newer
than its 11), so there the file is refused, before anything is deserialised, with NBC502.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from nbcompile.errors import FreezeError
from nbcompile.frozen import _format, _manifest, load

from .test_golden import float32_error_bound

DATA = Path(__file__).resolve().parents[1] / "data"
FILES = {"0.10.2": "golden_v1", "0.12.0.1": "golden_v1_jax012"}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def _writer(name: str) -> dict:
    sections = _format.check_sections(_format.read_file(DATA / f"{name}.nbc"))
    return _manifest.parse(sections.manifest, sections.format_version)["writer"]


@pytest.mark.parametrize("written_with", sorted(FILES))
def test_the_files_record_the_jax_that_wrote_them(written_with):
    assert _writer(FILES[written_with])["jax"] == written_with


@pytest.mark.parametrize("written_with", sorted(FILES))
def test_a_file_from_the_other_stack_loads_or_is_refused_naming_both_versions(written_with):
    name = FILES[written_with]
    x = np.load(DATA / f"{name}_input.npy")
    expected = np.load(DATA / f"{name}_output.npy")
    here = jax.__version__
    if _version(written_with)[:2] > _version(here)[:2]:
        # newer than this JAX can read: refused before anything is deserialised
        with pytest.raises(FreezeError) as info:
            load(DATA / f"{name}.nbc")
        err = info.value
        assert err.code == "NBC502"
        message = str(err)
        assert written_with in message and here in message, message
        assert "re-freeze" in message, message
        return
    model = load(DATA / f"{name}.nbc")
    got = np.asarray(model(x))
    from .test_golden import _weights  # the same model and weights in both files

    bound = float32_error_bound(x, _weights())
    assert got.shape == expected.shape
    assert np.all(np.abs(got - expected) <= bound), np.max(np.abs(got - expected) - bound)


def test_both_files_hold_the_same_model():
    """The two stacks computed the same outputs when they wrote their files (same weights)."""
    a = np.load(DATA / "golden_v1_output.npy")
    b = np.load(DATA / "golden_v1_jax012_output.npy")
    x = np.load(DATA / "golden_v1_input.npy")
    np.testing.assert_array_equal(x, np.load(DATA / "golden_v1_jax012_input.npy"))
    from .test_golden import _weights

    assert np.all(np.abs(a - b) <= 2 * float32_error_bound(x, _weights()))
