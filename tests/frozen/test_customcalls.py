"""Every custom-call target on JAX's export-stable allowlist, one test each: the call JAX's own
lowering writes is accepted, the same call with lying result shapes (or a lying attribute) is
refused with NBC505; targets nbcompile refuses outright are refused with their reason."""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
import pytest
from jax._src.lax import linalg as L

from nbcompile.errors import FreezeError
from nbcompile.frozen import _customcalls, _jaxcompat

ALLOWED = _jaxcompat.allowed_custom_calls()
DTYPES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}
#: targets nbcompile refuses whatever their types
REFUSED = set(_customcalls.REFUSED)
#: targets checked by a fixed rule instead of a reference lowering
RULES = {"shape_assertion", *_customcalls.TYPE_PRESERVING}


def _s(*shape: int, dt: Any = np.float32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dt)


def _operation(kind: str, dt: Any) -> tuple[Any, list[Any]]:
    square, tall = [_s(4, 4, dt=dt)], [_s(5, 3, dt=dt)]
    return {
        "getrf": (L.lu, square),
        "geqrf": (L.geqrf, tall),
        "orgqr": (L.householder_product, [_s(5, 3, dt=dt), _s(3, dt=dt)]),
        "potrf": (lambda a: L.cholesky(a, symmetrize_input=False), square),
        "gesdd": (L.svd, tall),
        "gesvd": (lambda a: L.svd(a, algorithm=L.SvdAlgorithm.QR), tall),
        "gesvdj": (L.svd, tall),
        "syevd": (L.eigh, square),
        "geev": (L.eig, square),
        "gees": (L.schur, square),
        "gehrd": (L.hessenberg, square),
        "sytrd": (L.tridiagonal, square),
        "trsm": (
            lambda a, b: L.triangular_solve(a, b, left_side=True),
            [_s(4, 4, dt=dt), _s(4, 2, dt=dt)],
        ),
        "gtsv": (L.tridiagonal_solve, [_s(4, dt=dt)] * 3 + [_s(4, 2, dt=dt)]),
        "perm": (L.lu, square),
        "threefry": (_jaxcompat.threefry2x32, [_s(5, dt=np.uint32)] * 4),
        "lgamma": (jax.lax.lgamma, [_s(3, 5, dt=dt)]),
        "digamma": (jax.lax.digamma, [_s(3, 5, dt=dt)]),
    }[kind]


def genuine(target: str) -> dict[str, Any]:
    """The call JAX's lowering writes for ``target`` (from a jax.lax operation)."""
    dt = np.float32
    if match := re.match(r"lapack_([sdcz])(\w+?)_ffi", target):
        dt, name, platform = DTYPES[match[1]], match[2], "cpu"
    elif match := re.match(r"(cusolver|hipsolver|cusparse)_(\w+?)2?_ffi", target):
        name, platform = match[2], "cuda" if match[1].startswith("cu") else "rocm"
    elif match := re.match(r"(cpu|cu|hip)_(lgamma|digamma)_ffi", target):
        name, platform = match[2], {"cpu": "cpu", "cu": "cuda", "hip": "rocm"}[match[1]]
    elif match := re.match(r"(cu|hip)_(lu_pivots_to_permutation|threefry2x32_ffi)", target):
        name = "perm" if "pivots" in target else "threefry"
        platform = "cuda" if match[1] == "cu" else "rocm"
    else:
        name, platform = (
            {
                "LuDecomposition": "getrf",
                "Qr": "geqrf",
                "ProductOfElementaryHouseholderReflectors": "orgqr",
                "Eigh": "syevd",
            }[target],
            "tpu",
        )
    name = {"ungqr": "orgqr", "heevd": "syevd", "hetrd": "sytrd"}.get(name, name)
    fn, operands = _operation(name, dt)
    if target == "hipsolver_gesdd_ffi":
        fn = lambda a: L.svd(a, algorithm=L.SvdAlgorithm.DIVIDE_AND_CONQUER)  # noqa: E731
    try:
        calls = _jaxcompat.lowered_custom_calls(fn, operands, platform)
    except jax.errors.JaxRuntimeError:  # JAX 0.12.1's GPU digamma without its plugin
        return None
    return next((c for c in calls if c["target"] == target), None)


def _lie(call: dict[str, Any]) -> dict[str, Any]:
    """The call with its first result one element larger in every dimension (same rank)."""
    first = call["results"][0]
    dims = re.match(r"tensor<((?:\d+x)*)", first)[1].split("x")[:-1]
    bigger = "x".join(str(int(d) + 1) for d in dims)
    lying = first.replace(
        f"tensor<{'x'.join(dims)}x" if dims else "tensor<",
        f"tensor<{bigger}x" if dims else "tensor<1x",
        1,
    )
    return {**call, "results": [lying, *call["results"][1:]]}


CHECKED = sorted(ALLOWED - REFUSED - RULES)


@pytest.mark.parametrize("target", CHECKED)
def test_genuine_accepted_lying_shapes_refused(target: str) -> None:
    call = genuine(target)
    if call is None:  # JAX >= 0.12.1's lgamma/digamma calls: only with the platform's plugin
        assert re.fullmatch(r"(cu|hip)_(lgamma|digamma)_ffi", target), target
        typed = {"operands": ["tensor<3x5xf32>"], "results": ["tensor<3x5xf32>"]}
        with pytest.raises(FreezeError) as info:
            _customcalls.check_call({"target": target, **typed, "attributes": {}}, ALLOWED)
        assert info.value.code == "NBC505" and "cannot be checked" in str(info.value)
        return
    _customcalls.check_call(call, ALLOWED)
    with pytest.raises(FreezeError) as info:
        _customcalls.check_call(_lie(call), ALLOWED)
    assert info.value.code == "NBC505" and target in str(info.value)
    if call["attributes"]:  # a lying attribute with the right shapes is refused too
        name = sorted(call["attributes"])[0]
        altered = {**call["attributes"], name: call["attributes"][name] + " "}
        with pytest.raises(FreezeError):
            _customcalls.check_call({**call, "attributes": altered}, ALLOWED)


@pytest.mark.parametrize("target", sorted(REFUSED & ALLOWED))
def test_refused_targets(target: str) -> None:
    call = {
        "target": target,
        "operands": ["tensor<4xf32>"],
        "results": ["tensor<4xf32>"],
        "attributes": {},
    }
    with pytest.raises(FreezeError) as info:
        _customcalls.check_call(call, ALLOWED)
    assert info.value.code == "NBC505" and _customcalls.REFUSED[target] in str(info.value)


@pytest.mark.parametrize("target", sorted(_customcalls.TYPE_PRESERVING))
def test_one_device_markers_keep_their_type(target: str) -> None:
    call = {
        "target": target,
        "operands": ["tensor<4x8xf32>"],
        "results": ["tensor<4x8xf32>"],
        "attributes": {"mhlo.sharding": '"{replicated}"'},
    }
    _customcalls.check_call(call, ALLOWED)
    for lie in (
        {"results": ["tensor<1x1xf32>"]},
        {"results": ["tensor<4x8xf32>", "tensor<4x8xf32>"]},
        {"attributes": {"mhlo.sharding": '"{devices=[1000000,1]<=[1000000]}"'}},
        {"attributes": {"output_operand_aliases": "[]"}},
    ):
        with pytest.raises(FreezeError):
            _customcalls.check_call({**call, **lie}, ALLOWED)


def test_shape_assertion_as_jax_writes_it() -> None:
    (b,) = jax.export.symbolic_shape("b")
    exported = jax.export.export(jax.jit(lambda x: x * 2), platforms=["cpu"])(_s(b, 3))
    from nbcompile.frozen import _program

    calls = _program.module_facts(exported.mlir_module_serialized)["custom_calls"]
    call = next(c for c in calls if c["target"] == "shape_assertion")
    _customcalls.check_call(call, ALLOWED)
    for lie in (
        {"results": ["tensor<4xf32>"]},
        {"operands": ["tensor<4xi1>", *call["operands"][1:]]},
        {"operands": [call["operands"][0], "tensor<1000000xi32>"]},
        {"attributes": {**call["attributes"], "error_message": '"{9}"'}},
        {"attributes": {**call["attributes"], "backend_config": '"x"'}},
    ):
        with pytest.raises(FreezeError):
            _customcalls.check_call({**call, **lie}, ALLOWED)


def test_every_allowlisted_target_is_covered() -> None:
    assert set(CHECKED) == ALLOWED - REFUSED - RULES
    assert "lapack_sgetrf_ffi" in CHECKED and len(CHECKED) >= 60


def test_not_on_the_allowlist() -> None:
    call = {"target": "xla_python_cpu_callback", "operands": [], "results": [], "attributes": {}}
    with pytest.raises(FreezeError) as info:
        _customcalls.check_call(call, ALLOWED)
    assert info.value.code == "NBC505" and "allowlist" in str(info.value)
