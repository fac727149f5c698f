"""``memory_options(c)``: what would make the program fit, measured by compiling, not guessed.

Each option is the same function compiled again for the same target and argument placement:

* ``jax.checkpoint`` policies over the differentiated function (``nothing_saveable``: keep no
  forward value, recompute it in the backward pass; ``dots_saveable``: keep matrix products,
  recompute the cheap element-wise ops around them) -- with ``--grad`` only;
* per-layer rematerialisation of a Flax NNX or Equinox model's layer classes (each layer's
  forward recomputed in its own backward step), where the model has such layers;
* donated arguments (``donate_argnums``): the inputs an output can reuse;
* the largest batch that fits: two compiles at batch ``B`` and ``2B`` give XLA's allocation as
  ``a + b * batch``; one more compile at the predicted size confirms it.

Every figure is XLA's (allocation, flops from ``cost_analysis()``); a variant that cannot be
compiled is listed with XLA's reason.
"""

from __future__ import annotations

import math
import warnings
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

__all__ = ["BatchSearch", "MemoryOption", "MemoryOptions", "memory_options"]

POLICIES = ("nothing_saveable", "dots_saveable")


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

    argument: str  # the arguments whose leading dimension is the batch
    tried: list[tuple[int, int]]  # (batch, required bytes)
    per_example_bytes: float | None
    predicted: int | None
    confirmed: bool | None  # the compile at ``predicted`` fits
    largest: int | None  # the largest batch compiled that fits

    def to_json(self) -> dict[str, Any]:
        return {
            "argument": self.argument,
            "tried": [list(t) for t in self.tried],
            "per_example_bytes": self.per_example_bytes,
            "predicted": self.predicted,
            "confirmed": self.confirmed,
            "largest": self.largest,
            "source": "XLA",
        }


@dataclass
class MemoryOptions:
    baseline: MemoryOption
    options: list[MemoryOption]
    capacity_bytes: int | None
    capacity_source: str | None
    capacity_label: str | None
    batch: BatchSearch | None = None
    notes: list[str] = field(default_factory=list)

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
            "notes": list(self.notes),
        }

    def text(self) -> str:
        cap = (
            f"{format_bytes(self.capacity_bytes)} ({self.capacity_source})"
            if self.capacity_bytes
            else "unknown capacity"
        )
        rows = [f"memory options (XLA's allocation per call; {cap}):"]
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
        self.batch = _batch_arguments(self)
        if batch_size is not None:
            if self.batch is None:
                raise TargetError(
                    "batch_size: no argument with a batch dimension was found",
                    code="NBC601",
                    hint="the non-parameter arguments must share their leading dimension",
                )
            self.args = _with_batch(self.args, self.batch[0], batch_size)
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


def _with_batch(args: tuple[Any, ...], which: list[int], batch: int) -> tuple[Any, ...]:
    import jax

    def resize(x: Any) -> Any:
        return jax.ShapeDtypeStruct((batch, *x.shape[1:]), x.dtype)

    return tuple(jax.tree_util.tree_map(resize, a) if i in which else a for i, a in enumerate(args))


def _batch_arguments(v: _Variants) -> tuple[list[int], int] | None:
    """The non-parameter arguments sharing one leading dimension: the batch."""
    import jax

    skip = set(v.argnums or ()) | set(getattr(v.c.adapted, "params_argnums", ()) or ())
    sizes: dict[int, list[int]] = {}
    for i, a in enumerate(v.args):
        leaves = jax.tree_util.tree_leaves(a)
        if i in skip or not leaves or not all(getattr(x, "ndim", 0) >= 1 for x in leaves):
            continue
        firsts = {x.shape[0] for x in leaves}
        if len(firsts) == 1:
            sizes.setdefault(firsts.pop(), []).append(i)
    if not sizes:
        return None
    batch, which = max(sizes.items(), key=lambda kv: (len(kv[1]), kv[0]))
    return which, batch


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
    tried: list[tuple[int, int]] = []
    for b in (b1, 2 * b1):
        option, _ = v.measure(f"batch {b}", "", v.fn, _with_batch(v.args, which, b))
        if option.required_bytes is None:
            notes.append(f"batch {b} could not be compiled: {option.error}")
            return BatchSearch(label, tried, None, None, None, None)
        tried.append((b, option.required_bytes))
    (x1, y1), (x2, y2) = tried
    slope = (y2 - y1) / (x2 - x1)
    if slope <= 0:
        notes.append("the allocation does not grow with the batch: no largest batch")
        return BatchSearch(label, tried, slope, None, None, None)
    predicted = math.floor(x1 + (capacity - y1) / slope)
    if predicted < 1:
        return BatchSearch(label, tried, slope, predicted, None, None)
    option, _ = v.measure(f"batch {predicted}", "", v.fn, _with_batch(v.args, which, predicted))
    if option.required_bytes is not None:
        tried.append((predicted, option.required_bytes))
    fits = [b for b, need in tried if need <= capacity]
    return BatchSearch(label, tried, slope, predicted, option.fits, max(fits, default=None))


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
) -> MemoryOptions:
    """Compile the variants of compilation ``c`` (see the module docstring) and measure each.

    ``batch_size`` measures every variant at that batch (the arguments sharing the batch
    dimension are resized as ``jax.ShapeDtypeStruct``: nothing is allocated); ``capacity``
    plans for a memory budget in bytes instead of the target's device memory.
    """
    import jax

    cap = (capacity, "spec", "the given budget") if capacity is not None else None
    v = _Variants(c, cap, batch_size)
    notes: list[str] = []
    if batch_size is None and cap is None:
        base = _baseline(c, v)
    else:
        base = v.measure("as compiled", "", v.fn)[0]
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
    result = MemoryOptions(base, options, *v.capacity, notes=notes)
    if search_batch:
        result.batch = _largest_batch(v, notes)
    return result
