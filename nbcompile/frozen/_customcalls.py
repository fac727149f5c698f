"""Custom calls in a frozen program: each one must be exactly what JAX's own lowering writes.

A custom call runs native code (LAPACK, cuSOLVER, ...) on buffers whose sizes XLA takes from
the call's declared operand and result types. A kernel trusts them: ``lapack_sgetrf_ffi`` on a
512x512 operand with 1x1 results writes 512x512 floats into a 4-byte buffer. So a file's custom
call is accepted only if JAX itself, asked to lower the matching ``jax.lax`` operation on the
same operand types for the same platform, writes a custom call with the same target, operand
and result types, layouts and every other attribute (batch dimensions, aliasing, backend
config). Operations with options (``eigh(lower=...)``, ``svd(full_matrices=...)``, ...) are
lowered with each option until one matches; references are cached per process.

Some targets are refused outright (``REFUSED``, with the reason), others have a fixed rule
(``shape_assertion``; the sharding markers that keep types). Operand types are the program's
own SSA types, which MLIR's verifier ties to the ops that produce them; results and attributes
are the claims checked here. Custom calls must have static shapes (``freeze`` exports such
models with static shapes).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

from nbcompile.errors import FreezeError

#: Targets on JAX's export-stable list that a frozen file may not carry, and why.
REFUSED = {
    "tf.call_tf_function": "calls back into TensorFlow",
    "tpu_custom_call": "carries a compiled Pallas kernel that cannot be checked",
    "mosaic_gpu_v2": "carries a compiled Pallas kernel that cannot be checked",
    "AllocateBuffer": "returns uninitialised device memory (lax.empty)",
    "ApproxTopK": "has float options that cannot be matched against JAX's lowering",
    "stablehlo.dynamic_approx_top_k": "only appears with dynamic shapes",
    "stablehlo.dynamic_reduce_window": "only appears with dynamic shapes",
    "stablehlo.dynamic_rng_bit_generator": "only appears with dynamic shapes",
    "stablehlo.dynamic_top_k": "only appears with dynamic shapes",
}
#: Sharding markers: one operand, one result of the same type (one device), fixed shardings.
TYPE_PRESERVING = {
    "Sharding",
    "SPMDFullToShardShape",
    "SPMDShardToFullShape",
    "annotate_device_placement",
}
_MARKER_ATTRIBUTES = {
    "mhlo.sharding",
    "mhlo.frontend_attributes",
    "has_side_effect",
    "api_version",
    "backend_config",
}
_ONE_DEVICE_SHARDINGS = {'"{replicated}"', '"{manual}"', '"{maximal device=0}"'}
MAX_ASSERTION_MESSAGE = 4096

_ELEMENT = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "i1": "bool",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "ui8": "uint8",
    "ui16": "uint16",
    "ui32": "uint32",
    "ui64": "uint64",
    "complex<f32>": "complex64",
    "complex<f64>": "complex128",
}
_TENSOR = re.compile(r"^tensor<((?:\d+x)*)(\w+|complex<f(?:32|64)>)>$")

Candidates = Callable[[list[Any], list[Any]], Iterator[tuple[Callable[..., Any], int]]]


def _refuse(target: str, why: str) -> FreezeError:
    return FreezeError(
        f"program calls custom call {target!r}, which {why}",
        code="NBC505",
        hint="only custom calls JAX's own lowering writes, with the types it writes, are accepted",
    )


def aval_of(type_text: str) -> Any:
    """A ``jax.ShapeDtypeStruct`` for ``tensor<2x3xf32>``; None for dynamic or other types."""
    import jax

    match = _TENSOR.match(type_text)
    if match is None or match[2] not in _ELEMENT:
        return None
    dims = tuple(int(d) for d in match[1].split("x")[:-1])
    return jax.ShapeDtypeStruct(dims, jax.numpy.dtype(_ELEMENT[match[2]]))


# ---------------------------------------------------------------- the jax.lax operations
def _linalg() -> Any:
    from nbcompile.frozen import _jaxcompat

    return _jaxcompat.lax_linalg()


def _one(fn: Callable[..., Any]) -> Candidates:
    def gen(ops: list[Any], res: list[Any]) -> Iterator[tuple[Callable[..., Any], int]]:
        yield fn, len(ops)

    return gen


def _options(build: Callable[..., Callable[..., Any]], *choices: tuple[Any, ...]) -> Candidates:
    def gen(ops: list[Any], res: list[Any]) -> Iterator[tuple[Callable[..., Any], int]]:
        for combo in itertools.product(*choices):
            yield build(*combo), len(ops)

    return gen


def _permutation(ops: list[Any], res: list[Any]) -> Iterator[tuple[Callable[..., Any], int]]:
    if len(res) == 1 and res[0].shape:
        size = int(res[0].shape[-1])
        yield (lambda p: _linalg().lu_pivots_to_permutation(p, size)), 1


def _threefry(ops: list[Any], res: list[Any]) -> Iterator[tuple[Callable[..., Any], int]]:
    from nbcompile.frozen import _jaxcompat

    yield _jaxcompat.threefry2x32, 4


def _svd(full: bool, uv: bool, algorithm: Any) -> Callable[..., Any]:
    return lambda a: _linalg().svd(a, full_matrices=full, compute_uv=uv, algorithm=algorithm)


def _trsm(left: bool, lower: bool, trans: bool, conj: bool, unit: bool) -> Callable[..., Any]:
    return lambda a, b: _linalg().triangular_solve(
        a, b, left_side=left, lower=lower, transpose_a=trans, conjugate_a=conj, unit_diagonal=unit
    )


def _svd_algorithms() -> tuple[Any, ...]:
    algorithms = _linalg().SvdAlgorithm
    named = ("QR", "JACOBI", "DIVIDE_AND_CONQUER")  # DIVIDE_AND_CONQUER: gesdd on ROCm
    return (None, *(getattr(algorithms, n) for n in named if hasattr(algorithms, n)))


def _families() -> list[tuple[re.Pattern[str], str | None, Candidates]]:
    """(target pattern, platform or None = from the prefix, candidate operations)."""
    import jax

    L = _linalg()
    bools = (True, False)
    svd = _options(_svd, bools, bools, _svd_algorithms())
    return [
        (re.compile(r"(lapack_[sdcz]|cusolver_|hipsolver_)getrf_ffi"), None, _one(L.lu)),
        (re.compile(r"(lapack_[sdcz]|cusolver_|hipsolver_)geqrf_ffi"), None, _one(L.geqrf)),
        (
            re.compile(r"(lapack_[sd]org|lapack_[cz]ung|cusolver_org|hipsolver_org)qr_ffi"),
            None,
            _one(L.householder_product),
        ),
        (
            re.compile(r"(lapack_[sdcz]|cusolver_|hipsolver_)potrf_ffi"),
            None,
            _one(lambda a: L.cholesky(a, symmetrize_input=False)),
        ),
        (
            re.compile(
                r"(lapack_[sdcz]gesdd|lapack_[sdcz]gesvd|cusolver_gesvdj?|hipsolver_ges(vdj?|dd))_ffi"
            ),
            None,
            svd,
        ),
        (
            re.compile(r"(lapack_[sd]syevd|lapack_[cz]heevd|cusolver_syevd|hipsolver_syevd)_ffi"),
            None,
            _options(
                lambda lo, s: (
                    lambda a: L.eigh(a, lower=lo, symmetrize_input=False, sort_eigenvalues=s)
                ),
                bools,
                bools,
            ),
        ),
        (
            re.compile(r"lapack_[sdcz]geev_ffi"),
            None,
            _options(
                lambda left, right: (
                    lambda a: L.eig(
                        a, compute_left_eigenvectors=left, compute_right_eigenvectors=right
                    )
                ),
                bools,
                bools,
            ),
        ),
        (
            re.compile(r"lapack_[sdcz]gees_ffi"),
            None,
            _options(lambda v: lambda a: L.schur(a, compute_schur_vectors=v), bools),
        ),
        (re.compile(r"lapack_[sdcz]gehrd_ffi"), None, _one(L.hessenberg)),
        (
            re.compile(r"(lapack_[sd]sytrd|lapack_[cz]hetrd|cusolver_sytrd|hipsolver_sytrd)_ffi"),
            None,
            _options(lambda lo: lambda a: L.tridiagonal(a, lower=lo), bools),
        ),
        (
            re.compile(r"lapack_[sdcz]trsm_ffi"),
            None,
            _options(_trsm, bools, bools, (False, True), (False, True), bools),
        ),
        (re.compile(r"(lapack_[sdcz]gtsv|cusparse_gtsv2)_ffi"), None, _one(L.tridiagonal_solve)),
        (re.compile(r"(cu|hip)_lu_pivots_to_permutation"), None, _permutation),
        (re.compile(r"(cu|hip)_threefry2x32_ffi"), None, _threefry),
        # element-wise special functions (JAX >= 0.12.1 lowers them to FFI calls)
        (re.compile(r"(cpu|cu|hip)_lgamma_ffi"), None, _one(jax.lax.lgamma)),
        (re.compile(r"(cpu|cu|hip)_digamma_ffi"), None, _one(jax.lax.digamma)),
        (re.compile(r"LuDecomposition"), "tpu", _one(L.lu)),
        (re.compile(r"Qr"), "tpu", _one(L.geqrf)),
        (
            re.compile(r"ProductOfElementaryHouseholderReflectors"),
            "tpu",
            _one(L.householder_product),
        ),
        (
            re.compile(r"Eigh"),
            "tpu",
            _options(
                lambda lo, s: (
                    lambda a: L.eigh(a, lower=lo, symmetrize_input=False, sort_eigenvalues=s)
                ),
                bools,
                bools,
            ),
        ),
    ]


def _platform(target: str) -> str:
    if target.startswith(("lapack_", "cpu_")):
        return "cpu"
    if target.startswith(("cusolver_", "cusparse_", "cu_")):
        return "cuda"
    return "rocm"


# ---------------------------------------------------------------- checking
_REFERENCES: dict[tuple[Any, ...], set[str]] = {}


def signature_key(call: dict[str, Any]) -> str:
    """One comparable text for a custom call (target, types, every attribute)."""
    attributes = sorted(call["attributes"].items())
    return repr((call["target"], call["operands"], call["results"], attributes))


def _reference(platform: str, family: int, index: int, fn: Any, operands: list[Any]) -> set[str]:
    """Signatures of the custom calls JAX writes lowering ``fn`` on ``operands`` (cached)."""
    key = (platform, family, index, tuple((a.shape, str(a.dtype)) for a in operands))
    if key not in _REFERENCES:
        import jax

        from nbcompile.frozen import _jaxcompat

        try:
            calls = _jaxcompat.lowered_custom_calls(fn, operands, platform)
        except (TypeError, ValueError, NotImplementedError):  # not valid for these operands
            calls = []
        except jax.errors.JaxRuntimeError:  # a lowering this JAX cannot serialise
            calls = []  # (0.12.1's GPU digamma without its plugin: fma ops)
        _REFERENCES[key] = {signature_key(c) for c in calls}
    return _REFERENCES[key]


def check_call(call: dict[str, Any], allowed: frozenset[str]) -> None:
    """Accept one custom-call signature or raise FreezeError NBC505 saying why not."""
    target = call["target"]
    if target not in allowed:
        raise FreezeError(
            f"program calls custom call {target!r}, which is not on the allowlist",
            code="NBC505",
            hint="only JAX's export-stable custom calls are accepted in frozen models",
        )
    if target in REFUSED:
        raise _refuse(target, REFUSED[target])
    if target == "shape_assertion":
        return _check_assertion(call)
    if target in TYPE_PRESERVING:
        return _check_marker(call)
    operands = [aval_of(t) for t in call["operands"]]
    results = [aval_of(t) for t in call["results"]]
    if any(a is None for a in operands + results):
        raise _refuse(target, "has dynamic or unknown operand/result types")
    key = signature_key(call)
    for family, (pattern, platform, candidates) in enumerate(_families()):
        if not pattern.fullmatch(target):
            continue
        where = platform or _platform(target)
        written = False  # whether JAX here writes this target at all
        for index, (fn, arity) in enumerate(candidates(operands, results)):
            if arity != len(operands):
                continue
            reference = _reference(where, family, index, fn, operands)
            if key in reference:
                return None
            written = written or any(k.startswith(f"({target!r},") for k in reference)
        if not written:
            raise _refuse(
                target,
                f"is not what this JAX writes for {where} (its lowering there is another; "
                f"for GPU targets, install the JAX plugin for {where}), so it cannot be checked",
            )
        raise _refuse(
            target,
            f"does not match what JAX's lowering writes for operands {call['operands']} "
            f"(results {call['results']}, or its attributes, differ)",
        )
    raise _refuse(target, "has no reference lowering in nbcompile to check it against")


def _check_assertion(call: dict[str, Any]) -> None:
    operands, attrs = call["operands"], call["attributes"]
    ints = {"tensor<i32>", "tensor<i64>"}
    message = attrs.get("error_message", "")
    indices = [int(i) for i in re.findall(r"\{(\d+)\}", message)]
    if (
        call["results"]
        or not operands
        or operands[0] != "tensor<i1>"
        or any(t not in ints for t in operands[1:])
        or set(attrs) - {"error_message", "has_side_effect", "api_version"}
        or len(message) > MAX_ASSERTION_MESSAGE
        or any(i >= len(operands) - 1 for i in indices)
    ):
        raise _refuse("shape_assertion", "is not a shape assertion as JAX writes it")


def _check_marker(call: dict[str, Any]) -> None:
    attrs = call["attributes"]
    sharding = attrs.get("mhlo.sharding")
    if (
        len(call["operands"]) != 1
        or call["results"] != call["operands"]
        or set(attrs) - _MARKER_ATTRIBUTES
        or (sharding is not None and sharding not in _ONE_DEVICE_SHARDINGS)
    ):
        raise _refuse(
            call["target"], "changes its operand's type or sharding (a one-device marker must not)"
        )


def check_calls(calls: list[dict[str, Any]], allowed: frozenset[str]) -> None:
    """Check every distinct custom-call signature of a program (see ``check_call``)."""
    for call in calls:
        check_call(call, allowed)


__all__ = ["REFUSED", "TYPE_PRESERVING", "aval_of", "check_call", "check_calls"]
