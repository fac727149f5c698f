"""Unit checks of the container pieces: safetensors compatibility and JSON pytrees."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load as st_load

from nbcompile.errors import FreezeError
from nbcompile.frozen import _manifest, _safetensors


def test_weight_section_is_readable_by_the_safetensors_library() -> None:
    rng = np.random.default_rng(0)
    tensors = [
        ("params['w']", rng.standard_normal((3, 5)).astype(np.float32)),
        ("params['i']", np.arange(7, dtype=np.int32)),
        ("params['m']", np.array([1, 0, 1], dtype=np.uint8)),
        ("params['d']", rng.standard_normal(2)),
        ("empty", np.zeros((0, 4), np.float32)),
    ]
    section = _safetensors.encode(tensors)
    theirs = st_load(section)
    assert set(theirs) == {name for name, _ in tensors}
    for name, arr in tensors:
        np.testing.assert_array_equal(theirs[name], arr)
        assert theirs[name].dtype == arr.dtype
    infos, start = _safetensors.parse(memoryview(section))
    assert start % 8 == 0
    ours = _safetensors.arrays(memoryview(section), infos, start)
    for name, arr in tensors:
        assert ours[name].tobytes() == arr.tobytes()


def test_bfloat16_and_big_endian_round_trip() -> None:
    bf = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 3)
    be = np.arange(4, dtype=">i4")
    section = memoryview(_safetensors.encode([("bf", bf), ("be", be)]))
    infos, start = _safetensors.parse(section)
    got = _safetensors.arrays(section, infos, start)
    assert got["bf"].dtype == bf.dtype and got["bf"].tobytes() == bf.tobytes()
    np.testing.assert_array_equal(got["be"], be)
    with pytest.raises(FreezeError, match="cannot be stored"):
        _safetensors.encode([("s", np.array(["text"]))])


def test_json_pytrees_round_trip_and_refuse_mismatches() -> None:
    value = ({"b": np.ones(2), "a": [np.zeros(1), None, (np.ones(3),)]}, np.ones(4))
    tree = _manifest.tree_of(value, "inputs")
    leaves = _manifest.flatten(tree, value, "inputs")
    assert [leaf.shape for leaf in leaves] == [(1,), (3,), (2,), (4,)]  # dict keys sorted
    rebuilt = _manifest.unflatten(tree, leaves)
    assert set(rebuilt[0]) == {"a", "b"} and rebuilt[0]["a"][1] is None
    assert _manifest.leaf_paths(tree) == ["[0]['a'][0]", "[0]['a'][2][0]", "[0]['b']", "[1]"]
    with pytest.raises(FreezeError) as info:
        _manifest.flatten(tree, ({"b": np.ones(2)}, np.ones(4)), "inputs")
    assert info.value.code == "NBC507" and "keys" in str(info.value)
    with pytest.raises(FreezeError) as info:
        _manifest.tree_of(object(), "output")
    assert info.value.code == "NBC506"
