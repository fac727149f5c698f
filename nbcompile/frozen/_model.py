"""`FrozenModel`: a checked `.nbc` file, callable on its inputs within its memory budget.

Each new input shape is compiled ahead of time (``jax.jit(...).lower(...).compile()``) so
that XLA's memory analysis can be checked against the budget *before* the program first runs.
A program from elsewhere (not written by ``freeze`` on this machine) is first lowered and
shape-refined at each new input shape in a forked child (``_program.first_call``): JAX's
lowering passes and shape refinement are native code a hostile program can crash.
Every failure of the call, in JAX or XLA, reaches the caller as a FreezeError with a code.
Frozen models are inference programs: differentiating one raises FreezeError NBC507 (the file
carries no gradient program, and none is ever read from it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.frozen import (
    _batch,
    _budget,
    _checked,
    _jaxcompat,
    _manifest,
    _program,
    _safetensors,
    _sandbox,
)

if TYPE_CHECKING:
    from nbcompile.frozen._load import Checked
    from nbcompile.frozen._program import ProgramFacts

#: Compiled programs kept per model, one per input shape (oldest dropped first).
MAX_COMPILED_SHAPES = 32
#: Exceptions JAX and XLA raise while lowering, compiling or running a program (a
#: ``JaxRuntimeError`` is a RuntimeError; MLIR verifier and shape refinement errors are
#: ValueError; a missing symbol KeyError; nanobind conversions TypeError).
_CALL_ERRORS = (ValueError, TypeError, KeyError, IndexError, NotImplementedError, RuntimeError)


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:300]}"


def _failed(err: BaseException | str) -> FreezeError:
    detail = err if isinstance(err, str) else _first_line(err)
    return FreezeError(
        f"the program failed to compile or run: {detail}",
        code="NBC500",
        hint="the file's program is not one this JAX/XLA can run; re-freeze it",
    )


def _no_derivatives(fn: Any) -> Any:
    """``fn`` with a JVP rule that refuses: grad, jvp and linearize raise FreezeError."""

    @jax.custom_jvp
    def call(*args: Any) -> Any:
        return fn(*args)

    @call.defjvp
    def _refuse(primals: Any, tangents: Any) -> Any:
        raise FreezeError(
            "frozen models cannot be differentiated: the file holds an inference program and "
            "no gradient program",
            code="NBC507",
            hint="call it outside jax.grad/jvp, or on jax.lax.stop_gradient(inputs) inside a loss",
        )

    return call


def _shapes_key(leaves: Sequence[Any]) -> tuple[Any, ...] | None:
    """The input shapes and dtypes; None where a dimension is symbolic (not an integer)."""
    if any(not isinstance(d, int | np.integer) for x in leaves for d in x.shape):
        return None
    return tuple((tuple(int(d) for d in x.shape), np.dtype(x.dtype).name) for x in leaves)


class FrozenModel:
    """A loaded `.nbc` model: call it on the non-weight inputs (same structure as when frozen)."""

    def __init__(
        self,
        checked: Checked,
        exported: jax.export.Exported,
        facts: ProgramFacts,
        path: str,
        max_bytes: int | None,
        *,
        written_here: bool = False,
    ) -> None:
        manifest = checked.manifest
        self.signature: dict[str, Any] = {
            "inputs": manifest["inputs"],
            "outputs": manifest["outputs"],
        }
        #: weight name -> shape, in program order
        self.weights: dict[str, tuple[int, ...]] = {
            w["name"]: tuple(w["shape"]) for w in manifest["weights"]
        }
        self.metadata: dict[str, Any] = {
            key: manifest[key]
            for key in ("name", "created_utc", "writer", "platforms", "device_count")
        }
        self.metadata.update(
            constants_mode=manifest["constants_mode"],
            # what the program holds, read from the program (never the manifest's claim)
            program={
                "stablehlo_ops": facts.ops,
                "longest_chain": facts.chain,
                "nesting": facts.nesting,
                "custom_calls": facts.targets,
            },
            path=path,
            format_version=checked.sections.format_version,
            file_bytes=checked.sections.file_bytes,
            platform=checked.platform,
            # True: freeze wrote this program on this machine; False: a program from elsewhere
            # (probed in a child at load, lowered in a child before each new input shape)
            written_here=written_here,
        )
        #: the memory budget in bytes (None: unknown on this system, nothing is checked)
        self.max_bytes = max_bytes
        #: XLA's memory figure (bytes) per compiled input shape, None where XLA reports none
        self.memory: dict[tuple[Any, ...], int | None] = {}
        self.platform = checked.platform
        self.exported = exported
        self._facts = facts
        self._device = _jaxcompat.devices_for(checked.platform)[0]
        self._outputs = [(_batch.dims(a.shape) or [], a.dtype) for a in exported.out_avals]
        self._symbolic = any(
            _batch.BATCH_DIM in leaf["shape"] for leaf in manifest["inputs"]["leaves"]
        )
        # Outputs at the smallest batch: an absurd program is refused before any compile.
        _budget.check_outputs(self._output_bytes(1), max_bytes, self._where(1))
        views = _safetensors.arrays(checked.sections.weights, checked.tensors, checked.data_start)
        self._weights = [
            jax.device_put(views[w["name"]], self._device) for w in manifest["weights"]
        ]
        self._fn = _no_derivatives(exported.call)
        self._compiled: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        #: program from elsewhere: input shapes whose lowering and refinement a child got
        #: through (None: ``freeze`` wrote this program here, nothing to check)
        self._lowered_in_child: set[tuple[Any, ...]] | None = None if written_here else set()
        self._program_sha256 = checked.sections.program_sha256
        self._program_bytes = len(checked.sections.program)
        #: a symbolic program specialised to input shapes, for calls inside a transformation
        self._static: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    @property
    def input_names(self) -> list[str]:
        """Key paths of the input leaves (``[0]``, ``[1]['mask']``), in signature order."""
        return _manifest.leaf_paths(self.signature["inputs"]["tree"])

    @property
    def output_names(self) -> list[str]:
        """Key paths of the output leaves, in signature order."""
        return _manifest.leaf_paths(self.signature["outputs"]["tree"])

    def call_leaves(self, leaves: Sequence[Any]) -> list[Any]:
        """Call on the input leaves in signature order; return the output leaves in order."""
        want = self.signature["inputs"]["leaves"]
        if len(leaves) != len(want):
            raise FreezeError(
                f"{len(leaves)} inputs given, the model takes {len(want)} "
                f"({', '.join(self.input_names) or 'none'})",
                code="NBC507",
            )
        out = self(*_manifest.unflatten(self.signature["inputs"]["tree"], list(leaves)))
        return _manifest.flatten(self.signature["outputs"]["tree"], out, "outputs")

    def __repr__(self) -> str:
        return (
            f"FrozenModel({self.metadata['name']!r}, platform={self.platform!r}, "
            f"weights={len(self.weights)}, path={self.metadata['path']!r})"
        )

    def _inputs(self, inputs: tuple[Any, ...]) -> tuple[list[Any], int]:
        """Checked input leaves on the model's device, and the batch size b (1 if none)."""
        spec = self.signature["inputs"]
        leaves = _manifest.flatten(spec["tree"], inputs, "inputs")
        out, batch = [], None  # batch: (size, leaf index) of the first leaf that set b
        for i, (leaf, want) in enumerate(zip(leaves, spec["leaves"], strict=True)):
            leaf = _manifest.key_data_for(leaf, want, i)  # a typed PRNG key: its key data
            value = leaf if isinstance(leaf, jax.Array) else np.asarray(leaf)
            if not value.dtype.isnative:  # JAX takes native byte order only
                raise FreezeError(
                    f"input leaf {i} is stored big-endian ({value.dtype.str!r})",
                    code="NBC507",
                    hint=f"pass x.astype({value.dtype.newbyteorder('<').str!r})",
                )
            canonical = np.dtype(jax.dtypes.canonicalize_dtype(value.dtype))
            if canonical != value.dtype and canonical.name == want["dtype"]:
                # as jax.jit does without x64: float64 NumPy data runs as float32, etc.
                value = np.asarray(value, dtype=canonical)
            shape, dtype = tuple(value.shape), np.dtype(value.dtype).name
            takes = f"{want['dtype']}{_batch.show(want['shape'])}"
            uses_b = bool(want["shape"]) and want["shape"][0] == _batch.BATCH_DIM
            size = shape[0] if uses_b and shape else 1
            if (
                dtype != want["dtype"]
                or size < 1
                or shape != _batch.concrete_shape(want["shape"], size)
            ):
                hint_shape = _batch.show(want["shape"]) if uses_b else str(tuple(want["shape"]))
                raise FreezeError(
                    f"input leaf {i} is {dtype}{list(shape)}, the model takes {takes}"
                    + (" (b: any batch size >= 1)" if uses_b else ""),
                    code="NBC507",
                    hint=f"pass an array of shape {hint_shape} and dtype {want['dtype']}",
                )
            if uses_b:
                if batch is None:
                    batch = (size, i)
                elif size != batch[0]:
                    raise FreezeError(
                        f"input leaf {i} has batch size b={size}, but input leaf {batch[1]} "
                        f"has b={batch[0]}: every leaf with dimension b must have the same size",
                        code="NBC507",
                    )
            out.append(jax.device_put(value, self._device))
        return out, batch[0] if batch else 1

    def _output_bytes(self, size: int) -> int:
        return _budget.array_bytes((_batch.concrete_shape(s, size), d) for s, d in self._outputs)

    def _where(self, size: int) -> str:
        return f"at batch size b={size}" if self._symbolic else ""

    def _lower_in_child_first(self, leaves: list[Any], key: tuple[Any, ...]) -> None:
        """For a program from elsewhere, lower and refine it at these shapes in a child first.

        A crash or hang there refuses the file (NBC500) instead of killing this process; a
        lowering error is refused as the call's failure. Shapes that got through are recorded
        (this process, and the checked-programs folder for later ones).
        """
        seen = self._lowered_in_child
        if seen is None or key in seen:
            return
        shapes = [[list(shape), dtype] for shape, dtype in key]
        if not _checked.recall_shapes(self._program_sha256, shapes):
            specs = [jax.ShapeDtypeStruct(w.shape, w.dtype) for w in self._weights]
            specs += [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
            result = _sandbox.run_isolated(
                lambda: _program.first_call(self.exported, specs, self.platform),
                _sandbox.timeout_for(self._program_bytes),
                what=f"JAX's lowering and shape refinement at inputs {self._shape_text(key)}",
            )
            if "error" in result:
                raise _failed(str(result["error"]))
            _checked.remember_shapes(self._program_sha256, shapes)
        seen.add(key)

    def _check_extents(self, module: Any, key: tuple[Any, ...]) -> None:
        """Refuse (NBC508) a program with a symbolic batch whose arrays at these input shapes
        are larger than XLA can represent, before XLA sees them (it aborts the process).

        ``module``: the program refined at these shapes (None: refinement not available). A
        static program's types were checked when it was probed; a symbolic program's
        intermediates have their sizes only once refined at the call's shapes.
        """
        try:
            if module is not None:
                _program.largest_array(module)
        except _program.Refused as refused:
            raise FreezeError(
                f"at inputs {self._shape_text(key)} the program {refused}",
                code=refused.code,
                hint="call it with a smaller batch",
            ) from None

    @staticmethod
    def _shape_text(key: tuple[Any, ...]) -> str:
        return ", ".join(f"{dtype}{list(shape)}" for shape, dtype in key)

    def _compiled_for(self, leaves: list[Any], size: int) -> Any:
        """The program compiled for these input shapes, its memory checked (cached)."""
        key = _shapes_key(leaves)
        assert key is not None  # concrete arrays
        compiled = self._compiled.get(key)
        if compiled is not None:
            self._compiled.move_to_end(key)
            return compiled
        where = self._where(size)
        _budget.check_outputs(self._output_bytes(size), self.max_bytes, where)
        self._lower_in_child_first(leaves, key)
        # concrete arrays cannot be differentiated: lower the bare call (no custom_jvp checks)
        lowered = jax.jit(self.exported.call).lower(*self._weights, *leaves)
        compiled = _jaxcompat.compile_lowered(
            lowered,
            (lambda module: self._check_extents(module, key)) if self._symbolic else None,
        )
        needed = _budget.compiled_bytes(compiled)
        _budget.check_compiled(needed, self.max_bytes, where)
        self.memory[key] = needed
        self._compiled[key] = compiled
        if len(self._compiled) > MAX_COMPILED_SHAPES:
            self._compiled.popitem(last=False)
        return compiled

    def _traced_call(self, leaves: list[Any], size: Any) -> Any:
        """The call inside the caller's transformation, with the budget and child checks at
        concrete shapes. A program with a symbolic batch is embedded as a static program at
        these shapes (``_static_call``). At symbolic shapes (``jax.eval_shape`` with a
        symbolic batch) nothing is lowered or compiled here and there is no size to check."""
        key = _shapes_key(leaves)
        if key is None:
            return self._fn(*self._weights, *leaves)
        _budget.check_outputs(self._output_bytes(size), self.max_bytes, self._where(size))
        self._lower_in_child_first(leaves, key)
        fn = self._static_call(leaves, key) if self._symbolic else self._fn
        return fn(*self._weights, *leaves)

    def _static_call(self, leaves: list[Any], key: tuple[Any, ...]) -> Any:
        """The program refined at these input shapes, its arrays' sizes checked (cached)."""
        fn = self._static.get(key)
        if fn is not None:
            return fn
        specs = [jax.ShapeDtypeStruct(w.shape, w.dtype) for w in self._weights]
        specs += [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
        static = _jaxcompat.specialise(self.exported, specs, self.platform)
        if static is None:  # another JAX: embed the program as it is (XLA refines it)
            return self._fn
        self._check_extents(static[1], key)
        fn = _no_derivatives(static[0].call)
        self._static[key] = fn
        if len(self._static) > MAX_COMPILED_SHAPES:
            self._static.popitem(last=False)
        return fn

    def __call__(self, *inputs: Any) -> Any:
        leaves, size = self._inputs(inputs)
        traced = any(_jaxcompat.is_tracer(x) for x in leaves)
        with (
            jax.default_device(self._device),
            _jaxcompat.lapack_not_needed(self._facts.targets),
        ):
            try:
                if traced:  # inside the caller's jit/grad/vmap: their compile, our checks
                    outs = self._traced_call(leaves, size)
                else:
                    outs = self._compiled_for(leaves, size)(*self._weights, *leaves)
            except FreezeError:
                raise
            except NotImplementedError as err:
                if not traced:
                    raise _failed(err) from err
                raise FreezeError(
                    f"frozen models do not support this JAX transformation ({_first_line(err)})",
                    code="NBC507",
                    hint="call the model on the whole batch (jax.vmap is not supported)",
                ) from err
            except _CALL_ERRORS as err:
                raise _failed(err) from err
        return _manifest.unflatten(self.signature["outputs"]["tree"], list(outs))
