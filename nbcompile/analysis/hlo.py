"""A parser for XLA's HLO text: the one place nbcompile reads HLO as text.

``parse_hlo(text)`` turns ``compiled.as_text()`` (optimised HLO) or a pre-optimisation module's
``to_string()`` into an :class:`HloModule`: computations, instructions (opcode, shape, operand
names, attributes as raw text, metadata) and the source-location tables that JAX >= 0.9 prints
(``FileNames``, ``FunctionNames``, ``FileLocations``, ``StackFrames``; instructions refer to them
with ``stack_frame_id``). Older inline ``source_file=`` / ``source_line=`` metadata is read too.

Errors: malformed text raises :class:`HloParseError` (a ``ValueError``) and nothing else; the
test suite fuzzes this with generated and mutated modules. The parser is line based and linear in
the text size (no backtracking regular expressions), so a 3 MB module parses in a fraction of a
second.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DTYPE_BITS",
    "Computation",
    "HloModule",
    "HloParseError",
    "Instruction",
    "array_shapes",
    "entry_instructions",
    "mesh_replica_groups",
    "parse_hlo",
    "parse_replica_groups",
    "shape_bytes",
]


class HloParseError(ValueError):
    """The HLO text could not be parsed. ``line`` is the 1-based line number (or None)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


_STRING = r'"(?:[^"\\]|\\.)*"'
_TOKENS = re.compile(_STRING + r"|[(){}\[\],]")
_INSTR = re.compile(r"\s*(ROOT\s+)?%?([^\s=(){},]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([A-Za-z][\w\-]*)\(")
_COMP = re.compile(r"(ENTRY\s+)?%?([^\s(){}=,]+)\s*(?:\(|\{|->)")
_META_ITEM = re.compile(r"(\w+)=(" + _STRING + r"|[^\s}]+)")
_TABLE_ROW = re.compile(r"(\d+)\s+(" + _STRING + r"|\{[^{}]*\})\s*$")
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_NAME_REF = re.compile(r"%([^\s,(){}]+)")
_CALL_KEYS = (
    "calls",
    "to_apply",
    "body",
    "condition",
    "branch_computations",
    "true_computation",
    "false_computation",
)
#: opcodes that never call a computation (no ``calls``/``to_apply``/... attribute): the
#: common ones, whose tails need no look (an opcode not named here is looked at)
_CALLS_NOTHING = frozenset(
    [
        "parameter",
        "constant",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "broadcast",
        "reshape",
        "transpose",
        "copy",
        "convert",
        "slice",
        "dynamic-slice",
        "dynamic-update-slice",
        "concatenate",
        "pad",
        "iota",
        "reverse",
        "gather",
        "dot",
        "convolution",
        "compare",
        "select",
        "clamp",
        "add",
        "subtract",
        "multiply",
        "divide",
        "maximum",
        "minimum",
        "power",
        "remainder",
        "and",
        "or",
        "xor",
        "not",
        "negate",
        "abs",
        "sign",
        "exponential",
        "exponential-minus-one",
        "log",
        "log-plus-one",
        "sqrt",
        "rsqrt",
        "cbrt",
        "tanh",
        "logistic",
        "sine",
        "cosine",
        "tan",
        "atan2",
        "floor",
        "ceil",
        "round-nearest-even",
        "round-nearest-afz",
        "is-finite",
        "erf",
        "bitcast-convert",
        "shift-left",
        "shift-right-logical",
        "shift-right-arithmetic",
        "popcnt",
        "clz",
        "real",
        "imag",
        "complex",
        "reduce-precision",
        "rng-bit-generator",
        "partition-id",
        "replica-id",
        "copy-start",
        "copy-done",
        "after-all",
    ]
)
_CALLS = re.compile(r"\b(?:" + "|".join(_CALL_KEYS) + ")=")
_METADATA = re.compile(r"\bmetadata=\{((?:[^{}\"]|" + _STRING + r")*)\}")
_META_COMMON = re.compile(r'op_name="([^"\\]*)"(?: stack_frame_id=(\d+))?')
_SIMPLE_OPERANDS = re.compile(r"[^()\"\[\]{}]*\)")
_SIMPLE_ATTR = re.compile(r"(?:^|,)\s*([\w.\-]+)=([^,]*?)\s*(?=,|$)")
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")

DTYPE_BITS = {
    "pred": 8,
    "s2": 2,
    "u2": 2,
    "s4": 4,
    "u4": 4,
    "s8": 8,
    "u8": 8,
    "s16": 16,
    "u16": 16,
    "s32": 32,
    "u32": 32,
    "s64": 64,
    "u64": 64,
    "f16": 16,
    "bf16": 16,
    "f32": 32,
    "f64": 64,
    "c64": 64,
    "c128": 128,
    "token": 0,
    "tf32": 32,
}


def _dtype_bits(dtype: str) -> int:
    if dtype in DTYPE_BITS:
        return DTYPE_BITS[dtype]
    return 8 if dtype.startswith("f8") or dtype.startswith("f4") else 32


@functools.lru_cache(maxsize=1 << 14)
def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape text (tuples summed; layouts ignored; bounded dims at their bound)."""
    total = 0
    for dtype, dims in _ARRAY.findall(shape):
        n = 1
        for d in dims.split(","):
            d = d.strip().lstrip("<=")
            if d.isdigit():
                n *= int(d)
        total += (n * _dtype_bits(dtype) + 7) // 8
    return total


def shape_elements(shape: str) -> int:
    """Number of elements of the first array in a shape text (0 for tokens / empty tuples)."""
    m = _ARRAY.search(shape)
    if m is None or m.group(1) == "token":
        return 0
    n = 1
    for d in m.group(2).split(","):
        d = d.strip().lstrip("<=")
        if d.isdigit():
            n *= int(d)
    return n


def _close(s: str, start: int, line_no: int) -> int:
    """Index just past the bracket matching the one at ``s[start]`` (strings skipped)."""
    depth = 0
    for m in _TOKENS.finditer(s, start):
        tok = m.group()
        if tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
            if depth == 0:
                return m.end()
    raise HloParseError("unbalanced brackets", line_no)


def _split_top(s: str) -> list[str]:
    """Split ``s`` at commas outside brackets and strings."""
    parts, depth, last = [], 0, 0
    for m in _TOKENS.finditer(s):
        tok = m.group()
        if tok == ",":
            if depth == 0:
                parts.append(s[last : m.start()])
                last = m.end()
        elif tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
    parts.append(s[last:])
    return [p.strip() for p in parts if p.strip()]


_ESCAPE = re.compile(r"\\(.)")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        inner = value[1:-1]
        return _ESCAPE.sub(r"\1", inner) if "\\" in inner else inner
    return value


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


@dataclass(slots=True)
class Instruction:
    """One HLO instruction. ``attrs`` holds attribute values as raw text (``kind`` -> ``kLoop``)."""

    name: str
    opcode: str
    shape: str
    operands: list[str]
    _attrs: dict[str, str] | None
    computation: str
    is_root: bool = False
    op_name: str | None = None
    stack_frame_id: int | None = None
    source_file: str | None = None
    source_line: int | None = None
    literal: str | None = None
    tail: str = ""
    text: str = ""
    bare_tail: str = ""  # the tail without its metadata (what XLA computes with)
    _called: list[str] | None = None
    _head_attrs: tuple[dict[str, str], bool] | None = None

    @property
    def attrs(self) -> dict[str, str]:
        """Attributes as raw text, parsed on first use (the tail was checked at parse time)."""
        if self._attrs is None:
            self._attrs = {}
            for part in _split_top(self.tail[1:]):
                key, _, value = part.partition("=")
                self._attrs[key.strip()] = value.strip()
        return self._attrs

    def _plain(self) -> str | None:
        """The tail without metadata when simple ``key=value`` matching is safe on it (no
        strings, no nested brackets): then attributes are read without splitting the tail."""
        tail = self.bare_tail
        return tail if self._attrs is None and '"' not in tail and "{" not in tail else None

    def _head(self) -> tuple[dict[str, str], bool]:
        """The attributes before the tail's first string or bracket (XLA prints ``kind=kLoop,
        calls=%f`` before a fusion's ``backend_config={...}``), and whether that is the whole
        tail: read there without splitting the tail, they are exactly what :attr:`attrs`
        gives for them (memoised)."""
        if self._head_attrs is None:
            tail = self.bare_tail
            cut = min((i for c in '"{[(' if (i := tail.find(c)) >= 0), default=None)
            found = _SIMPLE_ATTR.findall(tail if cut is None else tail[:cut])
            if cut is not None and found:
                found.pop()  # the attribute the cut runs into: its value goes on past it
            self._head_attrs = (dict(found), cut is None)
        return self._head_attrs

    @property
    def kind(self) -> str | None:
        """Fusion kind without the ``k`` prefix, lower case (``loop``, ``input``, ``custom``)."""
        head, whole = self._head()
        kind = head.get("kind")
        if kind is None and not whole:
            plain = self._plain()
            if plain is not None:
                kind = next((v for k, v in _SIMPLE_ATTR.findall(plain) if k == "kind"), None)
            else:
                kind = self.attrs.get("kind")
        if kind is None:
            return None
        return kind[1:].lower() if kind.startswith("k") else kind.lower()

    @property
    def called(self) -> list[str]:
        """Names of the computations this instruction calls (fusion body, loop body, branches)."""
        if self._called is not None:
            return self._called
        names: list[str] = []
        self._called = names
        if self.opcode in _CALLS_NOTHING:
            return names
        tail = self.bare_tail or self.tail
        if self.opcode == "fusion":  # one computation, named before any string or brace
            value = self._head()[0].get("calls")
            if value is not None:
                names.extend(_NAME_REF.findall(value) or [value.strip("{} ")])
                return names
        if "=" not in tail or _CALLS.search(tail) is None:
            return names
        plain = self._plain()
        attrs = dict(_SIMPLE_ATTR.findall(plain)) if plain is not None else self.attrs
        for key in _CALL_KEYS:
            value = attrs.get(key)
            if value is not None:
                names.extend(_NAME_REF.findall(value) or [value.strip("{} ")])
        return names

    @property
    def bytes(self) -> int:
        return shape_bytes(self.shape)


@dataclass(slots=True)
class Computation:
    name: str
    instructions: list[Instruction] = field(default_factory=list)
    is_entry: bool = False
    header: str = ""

    @property
    def root(self) -> Instruction | None:
        for instr in reversed(self.instructions):
            if instr.is_root:
                return instr
        return self.instructions[-1] if self.instructions else None


@dataclass
class HloModule:
    """A parsed HLO module. ``frames`` maps a stack-frame id to ``(location id, parent id)``."""

    name: str
    computations: dict[str, Computation]
    entry: str | None
    files: dict[int, str] = field(default_factory=dict)
    functions: dict[int, str] = field(default_factory=dict)
    locations: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (file id, line)
    frames: dict[int, tuple[int, int]] = field(default_factory=dict)
    _stacks: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict, repr=False)
    #: a fusion's member instructions by its name (``compiled._members``: asked three times each)
    _members: dict[str, tuple[Any, list[Any]]] = field(default_factory=dict, repr=False)

    @property
    def entry_computation(self) -> Computation | None:
        return self.computations.get(self.entry) if self.entry else None

    def instruction_count(self) -> int:
        return sum(len(c.instructions) for c in self.computations.values())

    def stack(self, instr: Instruction) -> tuple[tuple[str, int], ...]:
        """The instruction's source stack, innermost frame first, as ``(file, line)`` pairs."""
        if instr.stack_frame_id is None:
            if instr.source_file is not None and instr.source_line is not None:
                return ((instr.source_file, instr.source_line),)
            return ()
        return self._frame_stack(instr.stack_frame_id)

    def _frame_stack(self, frame_id: int) -> tuple[tuple[str, int], ...]:
        cached = self._stacks.get(frame_id)
        if cached is not None:
            return cached
        out: list[tuple[str, int]] = []
        seen: set[int] = set()
        current = frame_id
        while current in self.frames and current not in seen:
            seen.add(current)
            location, parent = self.frames[current]
            file_id, line = self.locations.get(location, (-1, -1))
            if file_id in self.files:
                out.append((self.files[file_id], line))
            current = parent
        result = tuple(out)
        self._stacks[frame_id] = result
        return result


def _parse_table_row(name: str, row: str, module: HloModule, line_no: int) -> None:
    m = _TABLE_ROW.match(row)
    if m is None:
        raise HloParseError(f"malformed {name} row", line_no)
    key, value = int(m.group(1)), m.group(2)
    if name == "FileNames":
        module.files[key] = _unquote(value)
    elif name == "FunctionNames":
        module.functions[key] = _unquote(value)
    else:
        fields = dict(_META_ITEM.findall(value))
        if name == "FileLocations":
            module.locations[key] = (
                _int(fields.get("file_name_id")) or -1,
                _int(fields.get("line")) or 0,
            )
        else:
            # The text printer writes parent_frame_id one more than the real id (0: no parent).
            parent = _int(fields.get("parent_frame_id")) or 0
            module.frames[key] = (_int(fields.get("file_location_id")) or -1, parent - 1)


_NON_SPACE = re.compile(r"\S*")


# The common line in one match: a name, an array shape with a plain layout, the opcode and
# plain operands (no tuple shape, tiled layout, nested brackets or strings before the tail).
_FAST = re.compile(
    r"(ROOT\s+)?%?([^\s=(){},]+)\s*=\s*([a-z][a-z0-9]*\[[^\]\s]*\](?:\{[^{}()\s]*\})?)\s+"
    r"([A-Za-z][\w\-]*)\(([^()\"\[\]{}]*)\)(.*)"
)


def _parse_instruction(line: str, comp: str, line_no: int) -> Instruction:
    fast = _FAST.fullmatch(line)
    if fast is not None:
        root, name, shape, opcode, inner, tail = fast.groups()
    else:
        root, name, shape, opcode, inner, tail = _parse_slow(line, line_no)
    literal = None
    if opcode == "constant" or opcode == "parameter":
        literal, operands = inner, []
    else:
        operands = _NAME_REF.findall(inner) if "%" in inner else []
        if not operands and inner.strip():
            operands = [p.split()[-1] for p in _split_top(inner)]
    instr = Instruction(name, opcode, shape, operands, None, comp, root is not None)
    instr.literal = literal
    tail = tail.strip()
    instr.tail = tail
    instr.text = line
    if tail and tail[0] != ",":
        raise HloParseError("expected ',' before attributes", line_no)
    instr.bare_tail = tail
    start = tail.find("metadata={") if tail else -1
    if start < 0:
        return instr
    end = tail.find("}", start)
    block = tail[start + 10 : end]
    if (
        end < 0
        or "{" in block
        or "\\" in block
        or block.count('"') % 2
        or (start and (tail[start - 1].isalnum() or tail[start - 1] == "_"))
    ):
        meta = _METADATA.search(tail, start)  # strings with braces or escapes: the full rule
        if meta is None:
            return instr
        start, end, block = meta.start(), meta.end() - 1, meta.group(1)
    before = tail[:start].rstrip()
    instr.bare_tail = (before[:-1] if before.endswith(",") else before) + tail[end + 1 :]
    common = _META_COMMON.fullmatch(block)
    if common is not None:  # op_name="..." stack_frame_id=N, as JAX writes nearly every one
        instr.op_name = common.group(1)
        instr.stack_frame_id = _int(common.group(2))
        return instr
    items = dict(_META_ITEM.findall(block))
    if "op_name" in items:
        instr.op_name = _unquote(items["op_name"])
    instr.stack_frame_id = _int(items.get("stack_frame_id"))
    if "source_file" in items:
        instr.source_file = _unquote(items["source_file"])
        instr.source_line = _int(items.get("source_line"))
    return instr


def _parse_slow(line: str, line_no: int) -> tuple[str | None, str, str, str, str, str]:
    """Any instruction line: tuple shapes, tiled layouts, literals, nested operands."""
    m = _INSTR.match(line)
    if m is None:
        raise HloParseError("expected an instruction", line_no)
    pos = m.end()
    if pos < len(line) and line[pos] == "(":
        end = _close(line, pos, line_no)
    else:
        end = _NON_SPACE.match(line, pos).end()
    shape = line[pos:end]
    op = _OPCODE.match(line, end)
    if op is None or not shape:
        raise HloParseError("expected a shape and an opcode", line_no)
    simple = _SIMPLE_OPERANDS.match(line, op.end())
    close = simple.end() if simple is not None else _close(line, op.end() - 1, line_no)
    return (m.group(1), m.group(2), shape, op.group(1), line[op.end() : close - 1], line[close:])


_INSTRUCTION_LINE = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s*=\s", re.M)


# An instruction line's opcode: the common array shape in the regex (group 2), any other shape
# (tuples, nested layouts) by the full rule from the rest of the line (group 3).
_OPCODE_LINE = re.compile(
    r"^([ \t]+(?:ROOT[ \t]+)?%?[\w.\-]+[ \t]*=[ \t]*)(?:[a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^{}\n]*\})?"
    r"[ \t]+([A-Za-z][\w\-]*)\(|(.*))",
    re.M,
)


def count_opcodes(text: str) -> Counter[str]:
    """{opcode: count} over every computation of HLO text, without building the module (the
    same as counting ``parse_hlo(text)``'s instructions by opcode, for well-formed text)."""
    counts: Counter[str] = Counter()
    slow: list[str] = []
    for head, opcode, rest in _OPCODE_LINE.findall(text):
        if opcode:
            counts[opcode] += 1
        else:
            slow.append(head + rest)
    for line in slow:
        counts[_parse_slow(line, 0)[3]] += 1
    return counts


def count_instructions(text: str) -> int:
    """Instructions in HLO text, without parsing it (same as ``parse_hlo(text).instruction_count()``
    for well-formed text; used where only the count is needed)."""
    return len(_INSTRUCTION_LINE.findall(text))


def entry_instructions(text: str) -> list[tuple[str, str]]:
    """``(name, opcode)`` of the instructions of the ENTRY computation of HLO text, in order,
    without building the module: the same as ``parse_hlo(text)``'s ENTRY computation (empty
    where there is none), for well-formed text. A profile reads only these (~0.15 s less than
    parsing a 12-layer train step's 17,000 instructions: its fused computations are most of
    them)."""
    head = -1  # where the line after the ENTRY header starts
    at = text.find("ENTRY")
    while at >= 0:  # the last header, as the parser keeps; "ENTRY" is rare elsewhere
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line = text[start:end].strip()
        if (
            not text[start:at].strip(" \t")
            and line.endswith("{")
            and (m := _COMP.match(line)) is not None
            and m.group(1)
        ):
            head = end + 1
        at = text.find("ENTRY", end)
    if head < 0:
        return []
    out = []
    for line_no, raw in enumerate(text[head:].splitlines()):
        line = raw.strip()
        if line == "}":
            break
        if line:
            fast = _FAST.fullmatch(line)
            name, opcode = (
                fast.group(2, 4) if fast is not None else _parse_slow(line, line_no)[1:4:2]
            )
            out.append((name, opcode))
    return out


def parse_hlo(text: str) -> HloModule:
    """Parse an HLO module's text. Raises :class:`HloParseError` on malformed input."""
    if not isinstance(text, str):
        raise HloParseError("HLO text must be a string")
    module = HloModule(name="", computations={}, entry=None)
    table: str | None = None
    current: Computation | None = None
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if current is not None:
            if line == "}":
                current = None
            elif line:
                current.instructions.append(_parse_instruction(line, current.name, line_no))
            continue
        if not line:
            table = None
        elif line.startswith("HloModule"):
            parts = line.split(None, 1)
            module.name = parts[1].split(",", 1)[0].strip() if len(parts) > 1 else ""
        elif line in _TABLES:
            table = line
        elif table is not None:
            _parse_table_row(table, line, module, line_no)
        elif line.endswith("{") and (m := _COMP.match(line)) is not None:
            current = Computation(m.group(2), is_entry=bool(m.group(1)), header=line)
            if current.name in module.computations:
                raise HloParseError(f"duplicate computation {current.name!r}", line_no)
            module.computations[current.name] = current
            if current.is_entry:
                module.entry = current.name
        elif line.startswith("//"):
            continue
        else:
            raise HloParseError(f"unexpected text {line[:40]!r}", line_no)
    if current is not None:
        raise HloParseError(f"computation {current.name!r} is not closed")
    if module.entry is None and module.computations:
        module.entry = next(reversed(module.computations))
    return module


def parse_replica_groups(value: str | None) -> list[list[int]] | None:
    """``replica_groups`` in any of XLA's three syntaxes: explicit ``{{0,1},{2,3}}``, iota
    ``[2,2]<=[4]`` (with an optional transpose ``[2,2]<=[2,2]T(1,0)``) and mesh axes
    ``mesh['a'=4,'b'=2] {'a'}`` (see :func:`mesh_replica_groups`). None when absent or not
    understood."""
    if value is None:
        return None
    value = value.strip()
    if value.startswith("mesh"):
        return mesh_replica_groups(value)
    if value.startswith("{"):
        groups = re.findall(r"\{([\d,\s]*)\}", value[1:-1] if value.endswith("}") else value)
        return [[int(x) for x in g.split(",") if x.strip()] for g in groups]
    m = re.fullmatch(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", value)
    if m is None:
        return None
    out_dims = [int(x) for x in m.group(1).split(",")]
    in_dims = [int(x) for x in m.group(2).split(",")]
    total = 1
    for d in in_dims:
        total *= d
    out_total = 1
    for d in out_dims:
        out_total *= d
    if total != out_total or total > 1 << 20 or len(out_dims) < 1:
        return None
    ids = list(range(total))
    if m.group(3):
        perm = [int(x) for x in m.group(3).split(",")]
        if sorted(perm) != list(range(len(in_dims))):
            return None
        ids = _transpose(ids, in_dims, perm)
    width = out_dims[-1]
    return [ids[i : i + width] for i in range(0, total, width)] if width else []


def _transpose(ids: list[int], dims: list[int], perm: list[int]) -> list[int]:
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    new_dims = [dims[p] for p in perm]
    out = []
    index = [0] * len(dims)
    for _ in range(len(ids)):
        out.append(ids[sum(index[k] * strides[perm[k]] for k in range(len(dims)))])
        for k in range(len(dims) - 1, -1, -1):
            index[k] += 1
            if index[k] < new_dims[k]:
                break
            index[k] = 0
    return out


def array_shapes(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """``[(dtype, dims), ...]`` of each array in a shape text (tuples flattened, layouts dropped,
    bounded dims at their bound): ``"(f32[2,3]{1,0}, s32[])"`` -> ``[("f32", (2, 3)), ("s32", ())]``.
    """
    out = []
    for dtype, dims in _ARRAY.findall(shape):
        sizes = (d.strip().lstrip("<=") for d in dims.split(","))
        out.append((dtype, tuple(int(d) for d in sizes if d.isdigit())))
    return out


_MESH_GROUPS = re.compile(r"mesh\[([^\]]*)\]\s*\{([^{}]*)\}")
_SUB_AXIS = re.compile(r"(.+):\((\d+)\)(\d+)")


def mesh_replica_groups(value: str | None) -> list[list[int]] | None:
    """Groups of the mesh-axes ``replica_groups`` syntax ``mesh['a'=4,'b'=2] {'a'}`` (sub-axes
    ``'a':(1)2`` too), expanded as XLA's ``MeshAxesReplicaGroupList`` does: devices numbered
    row-major over the mesh, one group per combination of the axes not named. None for any other
    text, including meshes printed with explicit ``device_ids``."""
    m = _MESH_GROUPS.fullmatch(value.strip()) if value is not None else None
    if m is None:
        return None
    names, sizes = [], []
    for item in m.group(1).split(","):
        name, _, size = item.rpartition("=")
        if not size.strip().isdigit():
            return None
        names.append(name.strip())
        sizes.append(int(size))
    refs: dict[int, list[tuple[int, int, int]]] = {}  # mesh dim -> [(written order, pre, size)]
    for order, item in enumerate(a.strip() for a in m.group(2).split(",") if a.strip()):
        sub = _SUB_AXIS.fullmatch(item)
        name = sub.group(1).strip() if sub else item
        if name not in names:
            return None
        dim = names.index(name)
        pre, size = (int(sub.group(2)), int(sub.group(3))) if sub else (1, sizes[dim])
        refs.setdefault(dim, []).append((order, pre, size))
    dims: list[int] = []  # the mesh reshaped so that every named (sub-)axis is one dimension
    grouped: list[tuple[int, int]] = []  # (mesh dim, written order) -> dimension index
    for dim, full in enumerate(sizes):
        done = 1
        for order, pre, size in sorted(refs.get(dim, []), key=lambda r: r[1]):
            if pre % done or pre < done:
                return None
            if pre != done:  # the part of the axis before this sub-axis
                dims.append(pre // done)
            grouped.append(((dim, order), len(dims)))
            dims.append(size)
            done = pre * size
        if done != full:
            dims.append(full // done)
    total = _product(sizes)
    if not grouped or _product(dims) != total or total > 1 << 20:
        return None
    axes = [index for _, index in sorted(grouped)]
    perm = [d for d in range(len(dims)) if d not in axes] + axes
    ids = _transpose(list(range(total)), dims, perm)
    width = _product([dims[a] for a in axes])
    return [ids[i : i + width] for i in range(0, total, width)]


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out
