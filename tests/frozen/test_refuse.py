"""Hostile, truncated and tampered files are refused with the right code, in bounded memory,
without unpickling or importing anything."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
from pathlib import Path

import jax
import numpy as np
import pytest

from nbcompile.errors import FreezeError
from nbcompile.frozen import _format, freeze, load

from ._craft import edit_manifest, flip, repack, section_offset, split, weights_json, weights_raw
from .conftest import run_python


class _Canary:
    """Unpickling this creates a directory: proof that something unpickled the file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _f32(shape: list[int], begin: int, end: int) -> dict:
    return {"dtype": "F32", "shape": shape, "data_offsets": [begin, end]}


def _cases(
    base: bytes, tpu_only: bytes, custom: bytes, canary: str
) -> dict[str, tuple[bytes, str]]:
    m, w, _ = split(base)
    manifest = json.loads(m)
    first = next(w for w in manifest["weights"] if len(set(w["shape"])) == 2)
    evil = pickle.dumps(_Canary(canary))
    moff, _ = section_offset(base, 0)
    woff, wlen = section_offset(base, 1)
    poff, plen = section_offset(base, 2)

    def writer(**changes: object):
        return lambda man: man["writer"].update(changes)

    def reshape_weight(man: dict) -> None:
        entry = next(w for w in man["weights"] if w["name"] == first["name"])
        entry["shape"] = list(reversed(first["shape"]))

    swapped_section = _swap_weight(w, first["name"])
    return {
        "empty": (b"", "NBC500"),
        "seven_bytes": (base[:7], "NBC500"),
        "truncated": (base[:-10], "NBC500"),
        "bad_magic": (b"PK\x03\x04" + base[4:], "NBC500"),
        "header_len_max": (repack(base, weights=weights_raw("{}", b"", 2**64 - 1)), "NBC500"),
        "header_len_past_eof": (repack(base, weights=weights_raw("{}", b"", 1000)), "NBC500"),
        "header_not_utf8": (repack(base, weights=weights_raw(b'{"\xff\xfe": 1}', b"")), "NBC500"),
        "header_not_json": (repack(base, weights=weights_raw("{not json", b"")), "NBC500"),
        "overlap": (
            repack(
                base, weights=weights_json({"a": _f32([2], 0, 8), "b": _f32([2], 4, 12)}, bytes(12))
            ),
            "NBC500",
        ),
        "hole": (
            repack(
                base,
                weights=weights_json({"a": _f32([2], 0, 8), "b": _f32([2], 12, 20)}, bytes(20)),
            ),
            "NBC500",
        ),
        "data_past_eof": (
            repack(base, weights=weights_json({"a": _f32([4], 0, 16)}, bytes(8))),
            "NBC500",
        ),
        "weights_trailing": (repack(base, weights=w + b"\0" * 16), "NBC500"),
        "file_trailing": (base + b"garbage", "NBC500"),
        "dims_overflow": (
            repack(base, weights=weights_json({"a": _f32([2**62, 2**62, 16], 0, 8)}, bytes(8))),
            "NBC500",
        ),
        "duplicate_names": (
            repack(
                base,
                weights=weights_raw(
                    '{"a": '
                    + json.dumps(_f32([1], 0, 4))
                    + ', "a": '
                    + json.dumps(_f32([1], 4, 8))
                    + "}",
                    bytes(8),
                ),
            ),
            "NBC500",
        ),
        "unknown_dtype": (
            repack(
                base,
                weights=weights_json(
                    {"a": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, bytes(16)
                ),
            ),
            "NBC500",
        ),
        "flip_header": (flip(base, 40), "NBC501"),
        "flip_manifest": (flip(base, moff + 10), "NBC501"),
        "flip_weights": (flip(base, woff + wlen - 3), "NBC501"),
        "flip_program": (flip(base, poff + plen // 2), "NBC501"),
        "future_format": (repack(base, version=_format.FORMAT_VERSION + 1), "NBC502"),
        "jax_too_old": (edit_manifest(base, writer(jax="0.4.1")), "NBC502"),
        "jax_too_new": (edit_manifest(base, writer(jax="99.0.0")), "NBC502"),
        "serialization_too_new": (
            edit_manifest(base, writer(export_serialization_version=999)),
            "NBC502",
        ),
        "calling_convention": (edit_manifest(base, writer(calling_convention_version=1)), "NBC502"),
        "platform_missing": (tpu_only, "NBC503"),
        "too_many_devices": (
            edit_manifest(base, lambda man: man.update(device_count=4096)),
            "NBC503",
        ),
        "weight_section_swapped": (repack(base, weights=swapped_section), "NBC504"),
        "weight_swapped_everywhere": (
            repack(edit_manifest(base, reshape_weight), weights=swapped_section),
            "NBC504",
        ),
        "custom_call_not_allowed": (custom, "NBC505"),
        "manifest_bad_field": (
            edit_manifest(base, lambda man: man.update(platforms="cpu")),
            "NBC500",
        ),
        "pickle_program": (repack(base, program=evil), "NBC500"),
        "pickle_weights": (repack(base, weights=evil), "NBC500"),
        "pickle_manifest": (repack(base, manifest=evil), "NBC500"),
        "pickle_whole_file": (evil, "NBC500"),
    }


def _swap_weight(weights: bytes, name: str) -> bytes:
    """The weight section with tensor ``name`` replaced by its transpose (another shape)."""
    from nbcompile.frozen import _safetensors

    infos, start = _safetensors.parse(memoryview(weights))
    arrays = _safetensors.arrays(memoryview(weights), infos, start)
    arrays[name] = np.ascontiguousarray(arrays[name].T)
    return _safetensors.encode(list(arrays.items()))


@pytest.fixture(scope="module")
def canary(frozen_dir: Path) -> Path:
    return frozen_dir / "canary"


@pytest.fixture(scope="module")
def cases(
    mlp_file: Path, frozen_dir: Path, canary: Path, tpu_only_file: Path
) -> dict[str, tuple[bytes, str]]:
    return _cases(
        mlp_file.read_bytes(),
        tpu_only_file.read_bytes(),
        _custom_call_file(frozen_dir),
        str(canary),
    )


def _custom_call_file(folder: Path) -> bytes:
    """A valid-looking file whose program calls a custom call that is not on the allowlist."""
    path = folder / "double.nbc"
    x = jax.ShapeDtypeStruct((2, 3), np.float32)
    freeze(lambda v: v * 2.0, np.ones(x.shape, x.dtype), path=path, measure_compiled=False)
    target = "nbc_test_not_allowed"

    def call(v):
        return (jax.ffi.ffi_call(target, x)(v),)

    exported = jax.export.export(
        jax.jit(call),
        platforms=["cpu", "cuda", "tpu"],
        disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(target)],
    )(x)
    # A hostile writer would not record that it disabled JAX's check (which load refuses).
    exported = dataclasses.replace(exported, disabled_safety_checks=())
    return repack(path.read_bytes(), program=bytes(exported.serialize()))


def test_every_case_refused_with_its_code(cases, tmp_path: Path) -> None:
    wrong = {}
    for name, (data, code) in cases.items():
        path = tmp_path / f"{name}.nbc"
        path.write_bytes(data)
        try:
            load(path)
            wrong[name] = ("loaded", code, "")
        except FreezeError as err:
            if err.code != code:
                wrong[name] = (err.code, code, str(err))
    assert not wrong, wrong


def test_refusals_name_the_field(cases, tmp_path: Path) -> None:
    expect = {
        "overlap": "'b'",
        "dims_overflow": "overflow",
        "duplicate_names": "duplicate",
        "flip_weights": "weights",
        "flip_program": "program",
        "jax_too_old": "0.4.1",
        "weight_section_swapped": "params['w1']",
        "platform_missing": "tpu",
        "custom_call_not_allowed": "nbc_test_not_allowed",
    }
    for name, needle in expect.items():
        path = tmp_path / f"{name}.nbc"
        path.write_bytes(cases[name][0])
        with pytest.raises(FreezeError, match=None) as info:
            load(path)
        assert needle in str(info.value), (name, str(info.value))


def test_refused_in_fresh_process_bounded_memory_no_unpickling(
    cases, mlp_file, canary, tmp_path
) -> None:
    job = {"warmup": str(mlp_file), "canary": str(canary), "cases": {}}
    for name, (data, _) in cases.items():
        path = tmp_path / f"{name}.nbc"
        path.write_bytes(data)
        job["cases"][name] = str(path)
    (tmp_path / "job.json").write_text(json.dumps(job))
    proc = run_python("tests/frozen/_load_worker.py", str(tmp_path / "job.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.split("RESULTS ", 1)[1])
    assert set(results) == set(cases)
    for name, (_, code) in cases.items():
        got = results[name]
        assert got["code"] == code, (name, got)
        assert got["rss_growth_kib"] < 64 * 1024, (name, got)
        assert not got["canary"], name
        assert got["new_modules"] == [], (name, got["new_modules"])
    assert not canary.exists()


def test_canary_pickle_is_live(canary: Path, tmp_path: Path) -> None:
    """The canary check means something: unpickling the payload does create the canary."""
    target = tmp_path / "live-canary"
    pickle.loads(pickle.dumps(_Canary(str(target))))
    assert target.exists()


def test_input_mismatch_is_refused(mlp_file: Path) -> None:
    model = load(mlp_file)
    assert model.signature["inputs"]["leaves"][0]["shape"] == ["b", 32]
    x = np.zeros((4, 32), np.float32)
    # (float64 is accepted: it runs as float32, as under jax.jit without x64)
    for bad in (x.astype(np.int32), x[:, :-1], x[:0], x[0], x[None], [x], {"x": x}, None):
        with pytest.raises(FreezeError) as info:
            model(bad)
        assert info.value.code == "NBC507", bad
    with pytest.raises(FreezeError) as info:
        model(x, x)
    assert info.value.code == "NBC507"
    assert np.asarray(model(jax.numpy.asarray(x))).shape == (4, 10)
