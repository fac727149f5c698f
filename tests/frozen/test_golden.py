"""The golden file written by format version 1 keeps loading and giving its recorded output."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.frozen import _format, _load, _manifest, _safetensors, load

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "golden_v1.nbc"
MACHINE = DATA / "golden_v1_machine.json"  # where the expected output was computed

U = 2.0**-24  # float32's unit roundoff


def _gamma(n: int) -> float:
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of an n-term float32 sum
    or dot product in *any* order, with or without FMA."""
    return n * U / (1 - n * U)


def float32_error_bound(x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    """Per output element, the error float32 arithmetic allows in the golden model
    ``(tanh(x @ w1 + b1) @ TABLE) @ w2`` (tests/frozen/make_golden.py), whatever the order of
    its sums: XLA:CPU's kernels differ by instruction set (vector width, FMA, blocking), so two
    correct x86 CPUs may give different roundings. Forward error analysis (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 3.5): the first layer's 8 products and bias err by at
    most gamma_9 (|x||w1| + |b1|), tanh (slope <= 1) passes that on and adds a few ulps of its
    own (4 allowed: XLA's vectorised tanh is a rational approximation), and the two products
    after it (16 and 32 terms, in either association) add gamma_48 |h||TABLE||w2|. Computed in
    float64 from the file's own weights."""
    x = x.astype(np.float64)
    w1, b1, table, w2 = (
        np.abs(weights[name].astype(np.float64))
        for name in ("params['w1']", "params['b1']", "const_0", "params['w2']")
    )
    first = np.abs(x) @ w1 + b1
    h = np.abs(np.tanh(x @ weights["params['w1']"] + weights["params['b1']"]))
    return (_gamma(9) * first + (4 * U + _gamma(48)) * h) @ table @ w2


def _weights() -> dict[str, np.ndarray]:
    sections = _format.check_sections(_format.read_file(GOLDEN))
    infos, start = _safetensors.parse(sections.weights)
    return _safetensors.arrays(sections.weights, infos, start)


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
    # the expected and this machine's output each lie within the bound of the exact result
    bound = 2 * float32_error_bound(x, _weights())
    off = np.abs(got.astype(np.float64) - want)
    machine = json.loads(MACHINE.read_text())
    assert (off <= bound).all(), (
        f"output differs from the golden by up to {off.max():.3g} (allowed here: "
        f"{bound[off > bound].min():.3g}, float32's error bound); expected output computed on "
        f"{json.dumps(machine)}"
    )


def test_the_golden_output_records_its_machine() -> None:
    """The expected output names the machine that computed it (or reproduced it exactly),
    since another CPU's XLA:CPU may round differently."""
    machine = json.loads(MACHINE.read_text())
    known = machine.get("written_on") or machine.get("reproduced_bit_for_bit_on")
    assert known and {"cpu", "arch", "isa", "jax", "jaxlib"} <= set(known), machine


def test_the_tolerance_is_tight_enough_to_catch_a_real_change() -> None:
    """The float32 bound is far below what a wrong program gives: one weight off by 1 %, or
    the output rounded to bfloat16, exceeds it."""
    x = np.load(DATA / "golden_v1_input.npy", allow_pickle=False)
    want = np.load(DATA / "golden_v1_output.npy", allow_pickle=False).astype(np.float64)
    weights = dict(_weights())
    bound = 2 * float32_error_bound(x, weights)
    assert (bound < 1e-3 * np.abs(want).max()).all()
    w2 = weights["params['w2']"].copy()
    w2[0, 0] *= 1.01
    h = np.tanh(x.astype(np.float64) @ weights["params['w1']"] + weights["params['b1']"])
    changed = h @ weights["const_0"] @ w2
    assert (np.abs(changed - want) > bound).any()
    rounded = want.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert (np.abs(rounded - want) > bound).any()


def test_another_cpus_rounding_passes() -> None:
    """What another x86 CPU gave (5e-6 off on the value -3.2, issue 28) is within the bound
    (the old 1e-6 relative comparison refused it)."""
    x = np.load(DATA / "golden_v1_input.npy", allow_pickle=False)
    want = np.load(DATA / "golden_v1_output.npy", allow_pickle=False)
    other = want.copy()
    other[1, 0] += np.float32(5e-6)
    assert np.abs(other[1, 0] - want[1, 0]) > 1e-6 * np.abs(want[1, 0]) + 1e-6
    assert (np.abs(other - want.astype(np.float64)) <= 2 * float32_error_bound(x, _weights())).all()
