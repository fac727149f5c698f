"""``memory_options(c)``: what would make the program fit, measured by compiling, not guessed.

Each option is the same function compiled again for the same target and argument placement:

* ``jax.checkpoint`` policies over the differentiated function (``nothing_saveable``: keep no
  forward value, recompute it in the backward pass; ``dots_saveable``: keep matrix products,
  recompute the cheap element-wise ops around them) -- with ``--grad`` only;
* per-layer rematerialisation of a Flax NNX or Equinox model's layer classes (each layer's
  forward recomputed in its own backward step), where the model has such layers;
* donated arguments (``donate_argnums``): the inputs an output can reuse;
* the largest batch that fits: two compiles at batch ``B`` and ``2B`` give XLA's allocation as
  ``a + b * batch``; one more compile at the predicted size confirms it (``largest_batch``: that
  batch with its compile's peak and verdict). The batch is dimension ``batch_axis`` of the data
  arguments; arguments given as ``jax.ShapeDtypeStruct`` keep their ``sharding`` at every size
  (a batch sharded over mesh axes stays a multiple of their size), and under ``--mesh`` /
  ``--topology`` every figure, the capacity included, is per device. When the confirming
  compile does not fit (the allocation grows faster at large sizes), up to ``REFINE`` more
  compiles extrapolate again from the sizes that did and did not fit.

Every figure is XLA's (allocation, flops from ``cost_analysis()``); a variant that cannot be
compiled is listed with XLA's reason.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..analysis.cost import normalise_cost
from ..analysis.memory import MemoryMap
from ..errors import CompileError, TargetError
from ..targets import parse_shard_specs, place_args
from ..targets._capacity import device_capacity
from ..units import format_bytes, format_count
from ._remat import layer_remat, remat_layers
from .memory import compile_for_memory

__all__ = ["BatchSearch", "LargestBatch", "MemoryOption", "MemoryOptions", "memory_options"]

POLICIES = ("nothing_saveable", "dots_saveable")
#: at most this many more compiles when the confirming compile does not fit (each one
#: extrapolates again through the largest size that fits and the size that did not)
REFINE = 6


@dataclass
class MemoryOption:
    """One compiled variant. ``required_bytes``: XLA's allocation (+ code) for one call."""

    name: str
    how: str  # the code that gives this variant
    peak_bytes: int | None = None
    required_bytes: int | None = None
    flops: float | None = None
    extra_flops: float | None = None  # vs the program as compiled (XLA cost analysis)
    fits: bool | None = None
    headroom_bytes: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        src = "XLA"
        return {
            "name": self.name,
            "how": self.how,
            "error": self.error,
            **{
                k: {
                    "value": getattr(self, k),
                    "source": src if getattr(self, k) is not None else None,
                }
                for k in (
                    "peak_bytes",
                    "required_bytes",
                    "flops",
                    "extra_flops",
                    "fits",
                    "headroom_bytes",
                )
            },
        }


@dataclass
class BatchSearch:
    """The largest batch that fits: compiled at ``tried`` sizes, XLA's allocation at each."""

    argument: str  # the arguments whose dimension ``axis`` is the batch
    tried: list[tuple[int, int]]  # (batch, required bytes)
    per_example_bytes: float | None
    predicted: int | None
    confirmed: bool | None  # the compile at ``predicted`` fits
    largest: int | None  # the largest batch compiled that fits
    axis: int = 0
    step: int = 1  # the batch is a multiple of this (the mesh axes it is sharded over)
    #: each compiled size's measured variant (peak, required bytes, verdict), by batch
    measured: dict[int, MemoryOption] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "argument": self.argument,
            "axis": self.axis,
            "step": self.step,
            "tried": [list(t) for t in self.tried],
            "peaks": [[b, o.peak_bytes] for b, o in self.measured.items()],
            "per_example_bytes": self.per_example_bytes,
            "predicted": self.predicted,
            "confirmed": self.confirmed,
            "largest": self.largest,
            "source": "XLA",
        }


@dataclass(frozen=True)
class LargestBatch:
    """The largest batch that fits, as compiled: its size, and that compile's peak, XLA
    allocation and verdict (per device under a mesh or a TPU topology; ``devices`` says how
    many)."""

    size: int
    argument: str
    axis: int
    peak_bytes: int | None
    required_bytes: int | None
    fits: bool | None
    headroom_bytes: int | None
    capacity_bytes: int | None
    devices: int
    confirmed: bool | None  # the compile at the extrapolated size fits

    def __int__(self) -> int:
        return self.size

    def text(self) -> str:
        per = f" per device ({self.devices} devices)" if self.devices > 1 else ""
        verdict = {True: "fits", False: "does NOT fit", None: "fit unknown"}[self.fits]
        return (
            f"largest batch {self.size} of {self.argument} (axis {self.axis}): peak "
            f"{format_bytes(self.peak_bytes)}, XLA allocates {format_bytes(self.required_bytes)}"
            f"{per} of {format_bytes(self.capacity_bytes)}: {verdict}"
        )

    def __repr__(self) -> str:
        return self.text()


@dataclass
class MemoryOptions:
    baseline: MemoryOption
    options: list[MemoryOption]
    capacity_bytes: int | None
    capacity_source: str | None
    capacity_label: str | None
    batch: BatchSearch | None = None
    notes: list[str] = field(default_factory=list)
    devices: int = 1  # figures are per device when > 1 (a mesh or a TPU topology)

    @property
    def largest_batch(self) -> LargestBatch | None:
        """The largest batch that fits, with its compile's peak and verdict (None when not
        searched or when no compiled size fits)."""
        b = self.batch
        if b is None or b.largest is None or b.largest not in b.measured:
            return None
        o = b.measured[b.largest]
        return LargestBatch(
            size=b.largest,
            argument=b.argument,
            axis=b.axis,
            peak_bytes=o.peak_bytes,
            required_bytes=o.required_bytes,
            fits=o.fits,
            headroom_bytes=o.headroom_bytes,
            capacity_bytes=self.capacity_bytes,
            devices=self.devices,
            confirmed=b.confirmed,
        )

    def best(self) -> MemoryOption | None:
        """The option that fits with the fewest extra flops (None if none fits)."""
        fitting = [o for o in self.options if o.fits]
        return min(
            fitting, key=lambda o: (o.extra_flops or 0.0, o.required_bytes or 0), default=None
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.to_json(),
            "options": [o.to_json() for o in self.options],
            "capacity_bytes": {"value": self.capacity_bytes, "source": self.capacity_source},
            "capacity_label": self.capacity_label,
            "batch": self.batch.to_json() if self.batch else None,
            "devices": self.devices,
            "notes": list(self.notes),
        }

    def text(self) -> str:
        cap = (
            f"{format_bytes(self.capacity_bytes)} ({self.capacity_source})"
            if self.capacity_bytes
            else "unknown capacity"
        )
        per = f" per device ({self.devices} devices)" if self.devices > 1 else ""
        rows = [f"memory options (XLA's allocation per call{per}; {cap}):"]
        for o in [self.baseline, *self.options]:
            if o.error:
                rows.append(f"  {o.name:<28} could not compile: {o.error}")
                continue
            verdict = {True: "fits", False: "does NOT fit", None: ""}[o.fits]
            extra = (
                f" {o.extra_flops / (o.flops - o.extra_flops):+.0%} flops"
                if o.extra_flops is not None and o.flops and o.flops != o.extra_flops
                else ""
            )
            rows.append(
                f"  {o.name:<28} {format_bytes(o.required_bytes):>9}  "
                f"flops {format_count(o.flops)}{extra}  {verdict}"
            )
        if self.batch is not None and self.batch.largest is not None:
            rows.append(
                f"  largest {self.batch.argument} batch that fits: {self.batch.largest} "
                f"(compiled at {', '.join(str(b) for b, _ in self.batch.tried)})"
            )
            if self.largest_batch is not None:
                rows.append(f"    {self.largest_batch.text()}")
        rows.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(rows)

    def __repr__(self) -> str:
        return self.text()


# --- compiling one variant -----------------------------------------------------------------------
class _Variants:
    def __init__(
        self,
        c: Any,
        capacity: tuple[int | None, str | None, str | None] | None,
        batch_size: int | None,
        batch_axis: int = 0,
        batch_args: Sequence[str] | None = None,
    ) -> None:
        self.c = c
        self.target = c.target
        if getattr(self.target, "lower_only", False):
            raise TargetError(
                "no memory options without a compiler for the target",
                hint=getattr(self.target, "note", None),
            )
        self.fn = c.original
        self.argnums = c.grad_argnums if getattr(c, "grad", None) is not None else None
        self.names = list(getattr(c.adapted, "arg_names", ()) or [])
        self.capacity = capacity or device_capacity(self.target, self.target.platform)
        self.args = tuple(c.args)
        self.axis = batch_axis
        self.batch = _batch_arguments(self, batch_args)
        if batch_size is not None:
            if self.batch is None:
                raise TargetError(
                    "batch_size: no argument with a batch dimension was found",
                    code="NBC601",
                    hint=f"the non-parameter arguments must share their dimension {batch_axis}",
                )
            self.args = _with_batch(self.args, self.batch[0], batch_size, batch_axis)
            self.batch = (self.batch[0], batch_size)

    def placed(self, args: tuple[Any, ...]) -> Any:
        import jax

        # arguments holding no array at all (numbers, flags) are static; empty pytrees are not
        static = {
            i
            for i, a in enumerate(args)
            if (leaves := jax.tree_util.tree_leaves(a))
            and not any(hasattr(x, "shape") for x in leaves)
        }
        mesh = self.target.mesh
        shard = dict(self.c.options.get("shard") or {})
        specs = parse_shard_specs(shard, mesh.axis_names if mesh is not None else None)
        names = self.names or [f"args[{i}]" for i in range(len(args))]
        return place_args(
            args, dict(self.c.kwargs), self.target, names=names, static=static, specs=specs
        ), static

    def measure(
        self,
        name: str,
        how: str,
        fn: Any,
        args: tuple[Any, ...] | None = None,
        donate: tuple[int, ...] = (),
    ) -> tuple[MemoryOption, MemoryMap | None]:
        import jax

        placement, static = self.placed(args if args is not None else self.args)
        program = jax.value_and_grad(fn, argnums=self._argnums()) if self.argnums else fn
        jitted = jax.jit(program, static_argnums=tuple(sorted(static)), donate_argnums=donate)
        option = MemoryOption(name, how)
        with warnings.catch_warnings():
            # XLA:CPU ignores donation ("Some donated buffers were not usable"): measured anyway
            warnings.filterwarnings("ignore", message=".*donated buffers.*")
            lowered = jitted.trace(*placement.args, **placement.kwargs).lower()
            kind = "value_and_grad" if self.argnums else "forward"
            try:
                m, compiled = compile_for_memory(
                    lowered, target=self.target, program=kind, capacity=self.capacity
                )
            except (jax.errors.JaxRuntimeError, CompileError) as err:
                option.error = str(err).splitlines()[0][:200]
                return option, None
        cost = (normalise_cost(compiled.cost_analysis()) or {}) if compiled is not None else {}
        return self._fill(option, m, cost.get("flops")), m

    def _argnums(self) -> int | tuple[int, ...]:
        return self.argnums[0] if len(self.argnums) == 1 else tuple(self.argnums)

    @staticmethod
    def _fill(option: MemoryOption, m: MemoryMap, flops: float | None) -> MemoryOption:
        option.peak_bytes, option.required_bytes = m.peak_bytes, m.required_bytes
        option.flops, option.fits, option.headroom_bytes = flops, m.fits, m.headroom_bytes
        return option

    def donatable(self) -> tuple[int, ...]:
        """Arguments whose every array an output of the same shape and dtype could reuse."""
        import jax

        program = jax.value_and_grad(self.fn, argnums=self._argnums()) if self.argnums else self.fn
        placement, static = self.placed(self.args)
        out = jax.eval_shape(lambda *a: program(*a, **placement.kwargs), *placement.args)
        pool = [(tuple(o.shape), str(o.dtype)) for o in jax.tree_util.tree_leaves(out)]
        chosen = []
        for i, arg in enumerate(placement.args):
            leaves = [(tuple(x.shape), str(x.dtype)) for x in jax.tree_util.tree_leaves(arg)]
            if i in static or not leaves:
                continue
            left = list(pool)
            for leaf in leaves:
                if leaf not in left:
                    break
                left.remove(leaf)
            else:
                pool, chosen = left, [*chosen, i]
        return tuple(chosen)


def _with_batch(
    args: tuple[Any, ...], which: list[int], batch: int, axis: int = 0
) -> tuple[Any, ...]:
    """``args`` with dimension ``axis`` of the arguments ``which`` set to ``batch``, as
    ``jax.ShapeDtypeStruct``s that keep a ``NamedSharding`` the argument carries."""
    import jax
    from jax.sharding import NamedSharding

    def resize(x: Any) -> Any:
        sharding = getattr(x, "sharding", None)
        shape = (*x.shape[:axis], batch, *x.shape[axis + 1 :])
        return jax.ShapeDtypeStruct(
            shape,
            jax.dtypes.canonicalize_dtype(x.dtype, allow_extended_dtype=True),
            sharding=sharding if isinstance(sharding, NamedSharding) else None,
            weak_type=bool(getattr(x, "weak_type", False)),
        )

    return tuple(jax.tree_util.tree_map(resize, a) if i in which else a for i, a in enumerate(args))


def _sharded_over(x: Any, axis: int) -> int:
    """How many devices dimension ``axis`` of ``x`` is split over (its ``NamedSharding``)."""
    import math

    from jax.sharding import NamedSharding

    sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, NamedSharding) or axis >= len(sharding.spec):
        return 1
    entry = sharding.spec[axis]
    if entry is None:
        return 1
    names = (entry,) if isinstance(entry, str) else tuple(entry)
    return math.prod(sharding.mesh.shape[n] for n in names)


def _batch_arguments(
    v: _Variants, chosen: Sequence[str] | None = None
) -> tuple[list[int], int] | None:
    """The arguments whose dimension ``v.axis`` is the batch: those named in ``chosen``, else
    the non-parameter arguments sharing one size there (most arguments first; then those
    sharded along it, as a data-parallel batch is; then the later ones, as data follows
    parameters in ``loss(params, x)``)."""
    import jax

    axis = v.axis
    skip = set(v.argnums or ()) | set(getattr(v.c.adapted, "params_argnums", ()) or ())
    if chosen is not None:
        unknown = [n for n in chosen if n not in v.names]
        if unknown:
            raise TargetError(
                f"batch_args: {unknown[0]!r} is not an argument",
                code="NBC601",
                hint=f"arguments are: {', '.join(v.names)}",
            )
        skip = {i for i, n in enumerate(v.names) if n not in chosen}
    sizes: dict[int, list[int]] = {}
    sharded: dict[int, int] = {}
    placed = _as_placed(v)
    for i, a in enumerate(v.args):
        leaves = jax.tree_util.tree_leaves(a)
        if i in skip or not leaves or not all(getattr(x, "ndim", 0) > axis for x in leaves):
            continue
        firsts = {x.shape[axis] for x in leaves}
        if len(firsts) == 1:
            size = firsts.pop()
            sizes.setdefault(size, []).append(i)
            if any(_sharded_over(x, axis) > 1 for x in jax.tree_util.tree_leaves(placed[i])):
                sharded[size] = sharded.get(size, 0) + 1
    if not sizes:
        return None
    batch, which = max(
        sizes.items(), key=lambda kv: (len(kv[1]), sharded.get(kv[0], 0), max(kv[1]), kv[0])
    )
    return which, batch


def _as_placed(v: _Variants) -> tuple[Any, ...]:
    """The arguments as every variant compiles them: with the sharding they carry
    (``jax.ShapeDtypeStruct(..., sharding=...)``, arrays the user placed) or that ``--shard``
    / ``--mesh`` gives them (``place_args``), index for index with ``v.args``."""
    try:
        return tuple(v.placed(v.args)[0].args)
    except TargetError:  # a spec that does not fit: every compile says so with its own message
        return v.args


def _batch_step(v: _Variants, which: list[int]) -> int:
    """The batch must stay a multiple of the devices its arguments are split over, however
    the sharding was given (on the arguments, or by ``--shard`` over ``--mesh``)."""
    import jax

    placed = _as_placed(v)
    step = 1
    for i in which:
        for x in jax.tree_util.tree_leaves((v.args[i], placed[i])):
            step = math.lcm(step, _sharded_over(x, v.axis))
    return step


def _largest_batch(v: _Variants, notes: list[str]) -> BatchSearch | None:
    found = v.batch
    capacity = v.capacity[0]
    if found is None or capacity is None:
        notes.append(
            "largest batch not searched: "
            + ("no batch argument found" if found is None else "the capacity is unknown")
        )
        return None
    which, b1 = found
    label = ", ".join(v.names[i] if i < len(v.names) else f"args[{i}]" for i in which)
    step = _batch_step(v, which)
    search = BatchSearch(label, [], None, None, None, None, axis=v.axis, step=step)
    tried, measured = search.tried, search.measured

    def compile_at(b: int) -> MemoryOption:
        option, _ = v.measure(f"batch {b}", "", v.fn, _with_batch(v.args, which, b, v.axis))
        if option.required_bytes is not None:
            tried.append((b, option.required_bytes))
            measured[b] = option
        return option

    for b in (b1, 2 * b1):
        option = compile_at(b)
        if option.required_bytes is None:
            notes.append(f"batch {b} could not be compiled: {option.error}")
            return search
    (x1, y1), (x2, y2) = tried
    search.per_example_bytes = slope = (y2 - y1) / (x2 - x1)
    if slope <= 0:
        notes.append("the allocation does not grow with the batch: no largest batch")
        return search
    # per device under a mesh: the allocation and the capacity are both one device's
    predicted = math.floor(x1 + (capacity - y1) / slope) // step * step
    search.predicted = predicted
    if predicted < 1:
        return search
    option = measured.get(predicted) or compile_at(predicted)
    search.confirmed = option.fits
    for k in range(REFINE):
        if option.fits is not False:
            break
        # the allocation grew faster than at small sizes (buffers that padding or fusion hid):
        # extrapolate again through the largest size that fits and the one that did not, at
        # least 2**k steps below the failed size (padded layouts allocate in whole tiles)
        xa, ya = max(((b, y) for b, y in tried if y <= capacity), default=tried[0])
        xb, yb = predicted, option.required_bytes or 0
        if xb <= xa or yb <= ya:
            break
        guess = math.floor(xa + (capacity - ya) * (xb - xa) / (yb - ya)) // step * step
        predicted = min(guess, xb - step * 2**k)
        if predicted <= xa or predicted in measured:
            break
        option = compile_at(predicted)
    fits = [b for b, need in tried if need <= capacity]
    search.largest = max(fits, default=None)
    return search


def _devices(c: Any) -> int:
    """How many devices the figures are per (the compiled map's count)."""
    m = getattr(c, "memory_map_if_computed", None)
    if m is None:
        mesh = getattr(getattr(c, "target", None), "mesh", None)
        return int(getattr(mesh, "size", 1) or 1)
    return int(getattr(m, "devices", 1) or 1)


def _baseline(c: Any, v: _Variants) -> MemoryOption:
    """The program as compiled: its own memory map and XLA cost (no compile)."""
    program = c.grad if getattr(c, "grad", None) is not None else c
    m = c.memory_map
    compiled = program.compiled
    cost = normalise_cost(compiled.cost_analysis()) if compiled is not None else None
    return _Variants._fill(MemoryOption("as compiled", ""), m, (cost or {}).get("flops"))


def memory_options(
    c: Any,
    *,
    batch_size: int | None = None,
    capacity: int | None = None,
    policies: tuple[str, ...] = POLICIES,
    layers: bool = True,
    donate: bool = True,
    search_batch: bool = True,
    batch_axis: int = 0,
    batch_args: Sequence[str] | None = None,
) -> MemoryOptions:
    """Compile the variants of compilation ``c`` (see the module docstring) and measure each.

    ``batch_size`` measures every variant at that batch (the arguments sharing the batch
    dimension are resized as ``jax.ShapeDtypeStruct``: nothing is allocated); ``capacity``
    plans for a memory budget in bytes (per device) instead of the target's device memory.
    The batch is dimension ``batch_axis`` of the arguments named in ``batch_args`` (default:
    the non-parameter arguments sharing one size there); ``.largest_batch`` is the largest
    that fits, with its compile's peak and verdict.
    """
    import jax

    if not isinstance(batch_axis, int) or batch_axis < 0:
        raise TargetError(
            f"batch_axis must be a dimension number >= 0, got {batch_axis!r}", code="NBC601"
        )
    cap = (capacity, "spec", "the given budget") if capacity is not None else None
    v = _Variants(c, cap, batch_size, batch_axis, batch_args)
    notes: list[str] = []
    if batch_size is None and cap is None:
        base, devices = _baseline(c, v), _devices(c)
    else:
        base, base_map = v.measure("as compiled", "", v.fn)
        devices = base_map.devices if base_map is not None else _devices(c)
    options: list[MemoryOption] = []
    if v.argnums:
        for policy in policies:
            rule = getattr(jax.checkpoint_policies, policy)
            fn = jax.checkpoint(v.fn, policy=rule)
            options.append(
                v.measure(
                    f"remat: {policy}",
                    f"jax.checkpoint(f, policy=jax.checkpoint_policies.{policy})",
                    fn,
                )[0]
            )
    else:
        notes.append("no remat policies: compile with --grad to rematerialise the forward pass")
    if layers:
        found = remat_layers(c.adapted)
        if found:
            classes, how = found
            with layer_remat(classes):
                options.append(
                    v.measure(
                        f"remat per layer ({', '.join(k.__name__ for k in classes)})", how, v.fn
                    )[0]
                )
    if donate:
        nums = v.donatable()
        if nums:
            names = [v.names[i] if i < len(v.names) else str(i) for i in nums]
            options.append(
                v.measure(
                    f"donate {', '.join(names)}",
                    f"jax.jit(f, donate_argnums={nums})",
                    v.fn,
                    donate=nums,
                )[0]
            )
    for o in options:
        if o.flops is not None and base.flops is not None:
            o.extra_flops = o.flops - base.flops
    result = MemoryOptions(base, options, *v.capacity, notes=notes, devices=devices)
    if search_batch:
        result.batch = _largest_batch(v, notes)
    return result
