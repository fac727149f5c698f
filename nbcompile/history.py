"""Recompile history: what changed since a cell's last compile, and why JAX recompiled.

The JAX counterpart of PyTorch's recompile reasons. Each ``%%compile`` target keeps a short
history; a run that compiles again gets a "what changed" card (source lines, argument types,
options, versions); ten recompiles of one target produce one warning naming the argument that
keeps changing. Calls of a compiled function with new argument types are explained from JAX's
own cache-miss explanations (``jax_explain_cache_misses``).
"""

from __future__ import annotations

import difflib
import itertools
import logging
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jax

RECOMPILE_WARNING_AFTER = 10


@dataclass
class Entry:
    lines: list[str]
    signature: list[str]
    options: str
    versions: str
    key: str  # the program and where its code is (ProgramKey.identity)
    program: str  # the program alone (ProgramKey.program)
    compiled: bool
    cell: str | None  # the notebook cell id (or None outside a kernel that gives one)
    defines: bool  # the cell defines the function it compiles


def _versions() -> str:
    from . import __version__

    return f"nbcompile {__version__}, jax {jax.__version__}, jaxlib {jax.lib.__version__}"


def source_changes(old: list[str], new: list[str]) -> list[str]:
    """One line per changed/added/removed visible cell line (line numbers of the new cell)."""
    out = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "replace":
            for k in range(max(a1 - a0, b1 - b0)):
                before = old[a0 + k].strip() if a0 + k < a1 else ""
                after = new[b0 + k].strip() if b0 + k < b1 else ""
                where = b0 + k + 1 if b0 + k < b1 else b1
                out.append(f"line {where} changed: `{before}` → `{after}`")
        elif op == "insert":
            out.extend(f"line {b + 1} added: `{new[b].strip()}`" for b in range(b0, b1))
        elif op == "delete":
            out.extend(f"line {b0} removed: `{old[a].strip()}`" for a in range(a0, a1))
    return out


def signature_changes(old: list[str], new: list[str]) -> list[str]:
    out = []
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else "(none)"
        b = new[i] if i < len(new) else "(none)"
        if a != b:
            name = b.split(":", 1)[0] if ":" in b else a.split(":", 1)[0]
            out.append(f"argument {name}: {a.split(': ', 1)[-1]} → {b.split(': ', 1)[-1]}")
    return out


class History:
    """Per-target history of compiles within one kernel session."""

    def __init__(self) -> None:
        self.entries: dict[str, list[Entry]] = {}
        self.warned: set[str] = set()

    def record(
        self,
        captured: Any,
        comp: Any,
        options: str,
        key: Any,
        *,
        compiled: bool,
        cell_id: str | None = None,
    ) -> tuple[list[str], str | None]:
        """Add this run; return (what changed since the last run, a repeat warning or None).

        ``key`` is the run's :class:`~nbcompile.stages.key.ProgramKey` (complete): a run whose
        program and locations are those of the last run changed nothing. Source lines are
        compared only with an earlier run of the *same* cell (the kernel's cell id, or — where
        none is given — a cell that also defines the function): compiling a function from
        another cell is not an edit of the cell that defined it.
        """
        name = captured.fn_expr
        entry = Entry(
            lines=["", *captured.source.lines[1:]],
            signature=list(comp.signature),
            options=options,
            versions=_versions(),
            key=key.identity,
            program=key.program,
            compiled=compiled,
            cell=cell_id,
            defines=name in captured.defined,
        )
        past = self.entries.setdefault(name, [])
        previous = past[-1] if past else None
        past.append(entry)
        if previous is None or previous.key == entry.key:
            return [], None
        changes = [f"changed since the last run of `{name}`:"]
        same_cell = (
            previous.cell == entry.cell
            if entry.cell is not None
            else previous.defines == entry.defines
        )
        if same_cell:
            changes += source_changes(previous.lines, entry.lines)
        else:
            changes.append("compiled from a different cell than last time")
        changes += signature_changes(previous.signature, entry.signature)
        if previous.options != entry.options:
            changes.append(f"options: `{previous.options}` → `{entry.options}`")
        if previous.versions != entry.versions:
            changes.append(f"versions: {previous.versions} → {entry.versions}")
        done = (
            "compiled again"
            if compiled
            else "XLA skipped: this program was compiled earlier in the session"
        )
        if len(changes) == 1 and previous.program == entry.program:
            changes.append(
                "the same program, its code in other places (lines moved, or a cell it comes "
                f"from was edited): {done}, so the view names the lines as they are now"
            )
        elif len(changes) == 1:
            changes.append(
                "the traced program changed: something the code reads (a global, a class "
                "attribute, a module's function, a closed-over value, the model's structure "
                f"or flags) is not what it was; {done}"
            )
        return changes, self._repeat_warning(name)

    def _repeat_warning(self, name: str) -> str | None:
        compiles = [e for e in self.entries[name] if e.compiled]
        if len(compiles) < RECOMPILE_WARNING_AFTER or name in self.warned:
            return None
        self.warned.add(name)
        counts: Counter[str] = Counter()
        for a, b in itertools.pairwise(compiles):
            for change in signature_changes(a.signature, b.signature):
                counts[change.split(":", 1)[0].removeprefix("argument ")] += 1
        culprit = counts.most_common(1)[0][0] if counts else None
        why = (
            f"argument `{culprit}` keeps changing type/shape"
            if culprit
            else "the cell keeps changing"
        )
        return (
            f"`{name}` was compiled {len(compiles)} times in this session: {why}; "
            "pad or bucket shapes, or mark configuration arguments --static"
        )


_MISS = re.compile(
    r"TRACING CACHE MISS at (?P<at>[^\n]*)\n\s*for (?P<fn>\S+) defined at (?P<def>\S+)"
)


class RecompileWatcher(logging.Filter):
    """Collects JAX's cache-miss explanations for functions nbcompile bound in the notebook.

    Between :meth:`start` and :meth:`stop` (one cell), explanations are switched on with JAX's
    own context manager (``jax.explain_cache_misses``) and this filter, attached once to JAX's
    logger, takes the records it asked for, so they never reach the notebook raw. Misses whose
    call site is inside nbcompile (``freeze`` exporting a function, ``--bench``) are ignored.
    """

    LOGGER = "jax._src.interpreters.partial_eval"
    # The same switch makes JAX's compiler and compilation cache log every persistent-cache
    # miss and write as a WARNING (JAX 0.10.2): filtered here too, or they land in every cell.
    CACHE_LOGGERS = ("jax._src.compiler", "jax._src.compilation_cache")

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []
        self._context: Any = None
        for name in (self.LOGGER, *self.CACHE_LOGGERS):
            logging.getLogger(name).addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if self._context is None:
            return True  # not ours: the user's own explanations pass through
        msg = record.getMessage()
        if "TRACING CACHE MISS" in msg:
            self.messages.append(msg)
            return False
        return not ("persistent" in msg.lower() and "cache" in msg.lower())

    def start(self) -> None:
        if self._context is not None or jax.config.jax_explain_cache_misses:
            return  # already on (the user's own setting): leave their output alone
        self.messages.clear()
        self._context = jax.explain_cache_misses(True)
        self._context.__enter__()

    def stop(self, bound: dict[str, Any]) -> list[str]:
        """Stop watching; explanations for the compiled functions in ``bound`` (name -> fn)."""
        if self._context is not None:
            self._context.__exit__(None, None, None)
            self._context = None
        notes = []
        for msg in self.messages:
            m = _MISS.search(msg)
            if not m or _inside_nbcompile(m["at"]):
                continue
            name = next((n for n, fn in bound.items() if _defined_at(fn) == m["def"]), None)
            if name is None:
                continue
            reasons = [ln.strip().lstrip("* ") for ln in msg.splitlines()[3:] if ln.strip()]
            at = m["at"].split(" (")[0].rstrip(":")
            notes.append(
                f"`{name}` was compiled again (called at {at}): "
                + "; ".join(reasons)
                + " — each new shape/dtype compiles once; pad or bucket shapes to avoid it"
            )
        self.messages.clear()
        return notes

    def close(self) -> None:
        """Detach from JAX's logger (``%unload_ext``)."""
        self.stop({})
        for name in (self.LOGGER, *self.CACHE_LOGGERS):
            logging.getLogger(name).removeFilter(self)


def _inside_nbcompile(where: str) -> bool:
    package = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(package, "") in where


def _defined_at(fn: Any) -> str | None:
    import inspect

    code = getattr(inspect.unwrap(fn), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else None
