"""What a frozen file's program really is, read from the program itself, and its limits.

``probe`` runs on untrusted bytes in the forked child of ``_sandbox`` (a crash or a hang of
JAX's readers there is a refusal, not the caller's death): it deserialises the ``jax.export``
artifact, checks every field ``freeze`` controls, parses the StableHLO and walks it once. It
returns plain JSON facts; the caller (``check``) applies the limits and compares the facts with
the manifest, so nothing the manifest claims about the program is ever trusted.

Limits (documented in docs/format.md, each refusal NBC508):

- ``MAX_OPS`` StableHLO operations: bounds parse, check and compile time.
- ``MAX_CHAIN`` operations in the longest dependency chain (calls and regions counted with
  their bodies). XLA:CPU (jaxlib 0.10.2) crashes with a stack overflow in its fusion tiling
  analysis (``SortTiledHloInstructionsInPostOrder``) on a 30,000-op element-wise chain; a
  20,000-op chain compiles (3.4 s). Plain ``jax.jit`` crashes the same way.
- ``MAX_NESTING`` regions and calls inside each other.
- ``MAX_ARRAY_BYTES`` for every operation's result (the extent product times the element
  size), checked on the static types here and on the refined types at each input shape of a
  program with a symbolic batch (``largest_array``): XLA aborts the process (``overflow in
  static extent product``) on an array whose size overflows 64 bits, before any memory check.
- ``MAX_LOCATION_BYTES`` of location text (op name, file, call sites) per operation and
  ``MAX_METADATA_BYTES`` in all: XLA copies every operation's name into its own metadata, so a
  1 MB name shared by a few thousand operations (a 2 MB file) takes gigabytes to compile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nbcompile.errors import FreezeError

MAX_OPS = 100_000
MAX_CHAIN = 10_000
MAX_NESTING = 64
#: distinct custom-call signatures a program may hold (each is checked against JAX's lowering)
MAX_CUSTOM_CALL_SIGNATURES = 64
#: bytes of one array (any operation's result); 256 TiB, far above any device's memory and
#: far below the 2**63 at which XLA's shape arithmetic overflows
MAX_ARRAY_BYTES = 2**48
#: bytes of one operation's location text, and of all of them (a 12-block flax transformer:
#: at most 926 per operation; XLA held about twice the total while compiling)
MAX_LOCATION_BYTES = 16 * 1024
MAX_METADATA_BYTES = 256 * 1024 * 1024


class Refused(Exception):
    """A probe refusal: ``code`` and message travel back to the parent as JSON."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ProgramFacts:
    """Facts read from a program (never from the manifest)."""

    ops: int
    chain: int
    nesting: int
    #: distinct custom-call signatures: target, operand and result types, attributes
    custom_calls: list[dict[str, Any]]

    @property
    def targets(self) -> list[str]:
        """Custom-call targets the program calls (sorted, distinct)."""
        return sorted({c["target"] for c in self.custom_calls})


# ---------------------------------------------------------------- child side
def probe(program: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Deserialise and walk an untrusted program; JSON facts or ``{"refuse": {...}}``."""
    import jax

    try:
        exported = jax.export.deserialize(bytearray(program))
    except Exception as err:  # the flatbuffer / pytree / sharding readers raise many kinds
        return _refusal("NBC500", f"is not a readable jax.export artifact ({_short(err)})")
    try:
        facts = exported_facts(exported)
        facts.update(module_facts(exported.mlir_module_serialized))
    except Refused as refused:
        return _refusal(refused.code, str(refused))
    return facts


def first_call(exported: Any, specs: list[Any], platform: str) -> dict[str, Any]:
    """Lower ``exported`` at concrete ``specs`` and refine its shapes, as its first call will.

    Runs in the forked child (``_sandbox``) for a program from elsewhere, before the caller
    lowers and compiles it: JAX's lowering passes and shape refinement are native code, and
    the fuzz found a program they crash on. Everything up to XLA's compile is covered (a
    forked child cannot run XLA's compile: its thread pools do not survive the fork).
    """
    from nbcompile.frozen import _jaxcompat

    try:
        refined = _jaxcompat.check_refines(
            exported, specs, platform=platform, compile_fallback=False
        )
    except Exception as err:  # a lowering or refinement error: reported, the parent refuses
        return {"error": _short(err)}
    return {"refined": refined}


def _refusal(code: str, message: str) -> dict[str, Any]:
    return {"refuse": {"code": code, "message": f"program section {message}"}}


def _short(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err)[:200]}"


def exported_facts(exported: Any) -> dict[str, Any]:
    """Check the artifact's own fields against what ``freeze`` writes; return its signature.

    ``freeze`` exports ``jax.jit`` of a function of flat array arguments returning a flat
    tuple, on one device, with no shardings, effects, disabled checks or VJP. Anything else
    is refused here, before the caller ever deserialises the artifact itself.
    """
    import jax

    from nbcompile.frozen import _jaxcompat

    n_in, n_out = len(exported.in_avals), len(exported.out_avals)
    if exported.has_vjp():
        raise Refused(
            "NBC500",
            "carries a gradient (VJP) program, which freeze never writes: refused rather "
            "than run unchecked under jax.grad",
        )
    if exported.ordered_effects or exported.unordered_effects:
        raise Refused("NBC500", "declares effects (callbacks, I/O), which freeze never writes")
    if exported.disabled_safety_checks:
        raise Refused("NBC500", "disables JAX's export safety checks, which freeze never does")
    if exported.in_tree != jax.tree_util.tree_structure(((0,) * n_in, {})):
        raise Refused("NBC500", "takes arguments other than a flat list of arrays")
    if exported.out_tree != jax.tree_util.tree_structure((0,) * n_out):
        raise Refused("NBC500", "returns something other than a flat tuple of arrays")
    shardings = (*exported.in_shardings_hlo, *exported.out_shardings_hlo)
    if len(shardings) != n_in + n_out or any(s is not None for s in shardings):
        raise Refused("NBC500", "declares shardings, which freeze never writes")
    kept = tuple(exported.module_kept_var_idx)
    if list(kept) != sorted(set(kept)) or any(not 0 <= i < n_in for i in kept):
        raise Refused("NBC500", "lists kept arguments out of order or out of range")
    low, high = _jaxcompat.calling_convention_range()
    if not low <= exported.calling_convention_version <= high:
        raise Refused(
            "NBC502",
            f"uses calling convention {exported.calling_convention_version}, outside this "
            f"JAX's {low}..{high}",
        )
    for aval in (*exported.in_avals, *exported.out_avals):
        if not _jaxcompat.on_device_memory(aval):
            raise Refused("NBC500", "places an argument or result outside device memory")
    return {
        "platforms": list(exported.platforms),
        "nr_devices": int(exported.nr_devices),
        "in_avals": [_aval(a) for a in exported.in_avals],
        "out_avals": [_aval(a) for a in exported.out_avals],
    }


def _aval(aval: Any) -> dict[str, Any]:
    import numpy as np

    return {"shape": [str(d) for d in aval.shape], "dtype": np.dtype(aval.dtype).name}


def module_facts(serialized: bytes) -> dict[str, Any]:
    """Parse the StableHLO portable artifact and walk it once (see ``_Walk``)."""
    from nbcompile.frozen import _jaxcompat

    with _jaxcompat.single_threaded_context():
        try:
            module = _jaxcompat.parse_artifact(serialized)
        except Exception as err:  # MLIR's reader raises many kinds on bad bytes
            raise Refused("NBC500", f"holds no readable StableHLO ({_short(err)})") from None
        return _Walk(module).facts()


class _Walk:
    """One pass over a module: op count, longest chain, nesting, functions, custom calls."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.ops = 0
        self.nesting = 0
        self.functions: dict[str, Any] = {}
        self.chains: dict[str, int] = {}
        self.calls: dict[str, dict[str, Any]] = {}
        self.metadata = 0
        #: bytes of each distinct location (MLIR uniques them: one alias shared by thousands of
        #: operations is printed once, so the walk's time does not grow with the text it counts)
        self.location_bytes: dict[Any, int] = {}
        self.largest = 0

    def facts(self) -> dict[str, Any]:
        attrs = _attributes(self.module.operation)
        for op in self.module.body.operations:
            if op.operation.name != "func.func":
                raise Refused("NBC500", f"holds a top-level {op.operation.name!r}, not a function")
            fattrs = _attributes(op)
            name = _unquote(fattrs.get("sym_name", ""))
            if name in self.functions:
                raise Refused("NBC500", f"defines function {name!r} twice")
            self.functions[name] = op
        main = self.functions.get("main")
        if main is None:
            raise Refused("NBC500", "has no 'main' function")
        if _unquote(_attributes(main).get("sym_visibility", '"public"')) != "public":
            raise Refused("NBC500", "has a private 'main' function")
        chain = max((self._chain(name, 0) for name in self.functions), default=0)
        return {
            "ops": self.ops,
            "chain": chain,
            "nesting": self.nesting,
            "module_attributes": attrs,
            "main_type": _attributes(main).get("function_type", ""),
            "custom_calls": list(self.calls.values()),
            "metadata_bytes": self.metadata,
            "largest_array": self.largest,
        }

    def _chain(self, name: str, depth: int) -> int:
        """Longest chain through function ``name`` (walked once; calls weigh their callee)."""
        if name in self.chains:
            if self.chains[name] < 0:
                raise Refused("NBC500", f"function {name!r} calls itself")
            return self.chains[name]
        if depth > MAX_NESTING:
            raise Refused("NBC508", f"nests calls and regions deeper than {MAX_NESTING}")
        self.chains[name] = -1
        longest = 0
        for region in self.functions[name].regions:
            longest = max(longest, self._region(region, depth + 1, {}))
        self.chains[name] = longest
        return longest

    def _region(self, region: Any, depth: int, values: dict[Any, int]) -> int:
        """Walk a region; return the longest chain ending in it. ``values``: value -> depth."""
        self.nesting = max(self.nesting, depth)
        if depth > MAX_NESTING:
            raise Refused("NBC508", f"nests calls and regions deeper than {MAX_NESTING}")
        longest = 0
        for block in region.blocks:
            for op in block.operations:
                name = op.operation.name
                if name.startswith(("stablehlo.", "chlo.")) and name != "stablehlo.return":
                    self.ops += 1
                    if self.ops > MAX_OPS:
                        raise Refused("NBC508", f"has more than {MAX_OPS} StableHLO operations")
                    if name == "stablehlo.custom_call":
                        self._custom_call(op)
                self._location(op)
                self.largest = max(self.largest, check_results(op))
                start = max((values.get(v, 0) for v in op.operands), default=0)
                weight = 1
                for inner in op.regions:
                    weight = max(weight, 1 + self._region(inner, depth + 1, values))
                if name == "func.call":
                    callee = _unquote(_attributes(op).get("callee", "").lstrip("@"))
                    if callee not in self.functions:
                        raise Refused("NBC500", f"calls undefined function {callee!r}")
                    weight = max(weight, self._chain(callee, depth + 1))
                end = start + weight
                for result in op.results:
                    values[result] = end
                longest = max(longest, end)
                if longest > MAX_CHAIN:
                    raise Refused(
                        "NBC508",
                        f"has a chain of more than {MAX_CHAIN} dependent operations "
                        "(XLA's compiler overflows its stack on such chains)",
                    )
        return longest

    def _location(self, op: Any) -> None:
        """Count an operation's location text against the metadata limits."""
        location = op.location
        size = self.location_bytes.get(location.attr)
        if size is None:
            size = self.location_bytes[location.attr] = len(str(location).encode())
        if size > MAX_LOCATION_BYTES:
            raise Refused(
                "NBC508",
                f"names an operation with {size} bytes of location text (op name, file, call "
                f"sites), more than {MAX_LOCATION_BYTES}",
            )
        self.metadata += size
        if self.metadata > MAX_METADATA_BYTES:
            raise Refused(
                "NBC508",
                f"holds more than {MAX_METADATA_BYTES} bytes of location text (op names, files, "
                "call sites): XLA copies it into every compiled operation",
            )

    def _custom_call(self, op: Any) -> None:
        attrs = _attributes(op)
        target = _unquote(attrs.pop("call_target_name", '""'))
        call = {
            "target": target,
            "operands": [str(v.type) for v in op.operands],
            "results": [str(r.type) for r in op.results],
            "attributes": attrs,
        }
        key = repr(sorted(call.items(), key=lambda kv: kv[0]))
        if key not in self.calls:
            if len(self.calls) >= MAX_CUSTOM_CALL_SIGNATURES:
                raise Refused(
                    "NBC508", f"has more than {MAX_CUSTOM_CALL_SIGNATURES} distinct custom calls"
                )
            self.calls[key] = call


def array_bytes(mlir_type: Any) -> int | None:
    """Bytes of a ranked tensor type with static dimensions (exact), else None."""
    from jax._src.lib.mlir import ir

    if not isinstance(mlir_type, ir.RankedTensorType) or not mlir_type.has_static_shape:
        return None
    element = mlir_type.element_type
    parts = 1
    if isinstance(element, ir.ComplexType):
        element, parts = element.element_type, 2
    bits = getattr(element, "width", None) or 64  # index and other widthless types: 8 bytes
    size = parts * -(-int(bits) // 8)
    for dim in mlir_type.shape:
        size *= int(dim)
    return size


def check_results(op: Any) -> int:
    """The largest of an operation's static results in bytes; refuse one over the limit."""
    largest = 0
    for result in op.results:
        size = array_bytes(result.type)
        if size is None:
            continue
        if size > MAX_ARRAY_BYTES:
            raise Refused(
                "NBC508",
                f"computes a {result.type} array ({size} bytes) in {op.operation.name}, above "
                f"the limit of {MAX_ARRAY_BYTES} bytes for one array (XLA aborts on arrays "
                "whose size overflows its shape arithmetic)",
            )
        largest = max(largest, size)
    return largest


def largest_array(module: Any) -> int:
    """Walk every operation of ``module`` (no recursion) and apply ``check_results``."""
    largest = 0
    stack = [module.operation]
    while stack:
        op = stack.pop()
        largest = max(largest, check_results(op))
        for region in op.regions:
            for block in region.blocks:
                stack.extend(block.operations)
    return largest


def _attributes(op: Any) -> dict[str, str]:
    """An operation's attributes as printed text (the same printer for file and reference)."""
    attributes = op.attributes
    return {name: str(attributes[name]) for name in attributes}


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


# ---------------------------------------------------------------- parent side
def refusal(result: dict[str, Any]) -> FreezeError | None:
    """The FreezeError a probe result asks for, or None."""
    refuse = result.get("refuse")
    if refuse is None:
        return None
    return FreezeError(str(refuse.get("message", "program refused")), code=refuse.get("code"))


def check(result: dict[str, Any], manifest: dict[str, Any]) -> ProgramFacts:
    """Turn probe results into facts (platforms, devices and partitions checked)."""
    refused = refusal(result)
    if refused is not None:
        raise refused
    if "error" in result:  # the reader raised (reported by the sandbox)
        raise FreezeError(
            f"program section is not a readable jax.export artifact ({result['error']})",
            code="NBC500",
        )
    if (
        result["platforms"] != manifest["platforms"]
        or result["nr_devices"] != manifest["device_count"]
    ):
        raise FreezeError("program platforms/devices differ from the manifest", code="NBC500")
    attrs = result["module_attributes"]
    for key in ("mhlo.num_partitions", "mhlo.num_replicas"):
        if attrs.get(key, "1 : i32") != "1 : i32":
            raise FreezeError(
                f"program asks for {key} = {attrs[key]}; frozen programs run on one device",
                code="NBC500",
            )
    facts = ProgramFacts(
        ops=int(result["ops"]),
        chain=int(result["chain"]),
        nesting=int(result["nesting"]),
        custom_calls=list(result["custom_calls"]),
    )
    return facts


def cross_check(facts: ProgramFacts, manifest: dict[str, Any]) -> None:
    """Refuse a manifest whose claims about the program differ from the program's truth."""
    claimed = manifest["program"]
    if claimed.get("stablehlo_ops") != facts.ops:
        raise FreezeError(
            f"the manifest says the program has {claimed.get('stablehlo_ops')} StableHLO ops, "
            f"the program has {facts.ops}",
            code="NBC500",
        )
    if sorted(claimed.get("custom_calls", [])) != facts.targets:
        raise FreezeError(
            f"the manifest lists custom calls {claimed.get('custom_calls', [])}, the program "
            f"calls {facts.targets}",
            code="NBC500",
        )
