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
    key: str
    compiled: bool


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
        self, captured: Any, comp: Any, options: Any, key: str, *, compiled: bool
    ) -> tuple[list[str], str | None]:
        """Add this run; return (what changed since the last run, a repeat warning or None)."""
        name = captured.target_expr
        entry = Entry(
            lines=["", *captured.source.lines[1:]], signature=list(comp.signature),
            options=options.describe()["options"], versions=_versions(), key=key,
            compiled=compiled,
        )
        past = self.entries.setdefault(name, [])
        previous = past[-1] if past else None
        past.append(entry)
        if previous is None or previous.key == key:
            return [], None
        changes = [f"changed since the last run of `{name}`:"]
        changes += source_changes(previous.lines, entry.lines)
        changes += signature_changes(previous.signature, entry.signature)
        if previous.options != entry.options:
            changes.append(f"options: `{previous.options}` → `{entry.options}`")
        if previous.versions != entry.versions:
            changes.append(f"versions: {previous.versions} → {entry.versions}")
        if len(changes) == 1:
            changes.append("a value the function reads from the notebook (a closed-over global) "
                           "changed, so it was traced and compiled again")
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
        why = f"argument `{culprit}` keeps changing type/shape" if culprit else "the cell keeps changing"
        return (f"`{name}` was compiled {len(compiles)} times in this session: {why}; "
                "pad or bucket shapes, or mark configuration arguments --static")


_MISS = re.compile(r"TRACING CACHE MISS at (?P<at>[^\n]*)\n\s*for (?P<fn>\S+) defined at (?P<def>\S+)")


class _QuietCacheLogs(logging.Filter):
    """Drop the persistent-cache chatter JAX logs while cache-miss explanations are on."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage().lower()
        return not ("persistent" in text and "cache" in text)


_QUIET = _QuietCacheLogs()
_CACHE_LOGGERS = ("jax._src.compiler", "jax._src.compilation_cache")


class RecompileWatcher(logging.Handler):
    """Collects JAX's cache-miss explanations for functions nbcompile bound in the notebook."""

    LOGGER = "jax._src.interpreters.partial_eval"

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []
        self._old: tuple[bool, bool] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "TRACING CACHE MISS" in msg:
            self.messages.append(msg)

    def start(self) -> None:
        logger = logging.getLogger(self.LOGGER)
        self._old = (jax.config.jax_explain_cache_misses, logger.propagate)
        self.messages.clear()
        jax.config.update("jax_explain_cache_misses", True)
        logger.addHandler(self)
        logger.propagate = False
        for name in _CACHE_LOGGERS:
            logging.getLogger(name).addFilter(_QUIET)

    def stop(self, bound: dict[str, Any]) -> list[str]:
        """Stop watching; explanations for the compiled functions in ``bound`` (name -> fn)."""
        logger = logging.getLogger(self.LOGGER)
        logger.removeHandler(self)
        for name in _CACHE_LOGGERS:
            logging.getLogger(name).removeFilter(_QUIET)
        if self._old is not None:
            jax.config.update("jax_explain_cache_misses", self._old[0])
            logger.propagate = self._old[1]
            self._old = None
        notes = []
        for msg in self.messages:
            m = _MISS.search(msg)
            if not m:
                continue
            name = next((n for n, fn in bound.items() if _defined_at(fn) == m["def"]), None)
            if name is None:
                continue
            reasons = [ln.strip().lstrip("* ") for ln in msg.splitlines()[3:] if ln.strip()]
            at = m["at"].split(" (")[0].rstrip(":")
            notes.append(
                f"`{name}` was compiled again (called at {at}): " + "; ".join(reasons)
                + " — each new shape/dtype compiles once; pad or bucket shapes to avoid it"
            )
        return notes


def _defined_at(fn: Any) -> str | None:
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else None
