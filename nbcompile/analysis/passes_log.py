"""XLA's pass pipeline for one program, read back from XLA's own dump: files -> :class:`PassLog`.

A compile with ``xla_dump_to=D`` and ``xla_dump_hlo_pass_re=.*`` (nbcompile/measure/metal.py)
writes the module as text at the start of every pass pipeline and after every pass that reported
a change, in the order XLA ran them (checked with JAX 0.10.2 on XLA:CPU)::

    module_0006.jit_f.0014.HLO_passes_after_layout_assignment.after_fusion.before_fusion-wrapper.txt
    module_0006.jit_f.0017.copy-insertion.after_adding_copies_to_resolve_interference.txt

(number, pipeline, the pass just run — ``pipeline-start`` at a pipeline's start — and the next
one; copy insertion names its own stages). The same layout on jaxlib 0.12.0.1 (a few passes
renamed or added: ``async-collective-custom-call-rewriter``; tests/measure/test_metal_reaches.py
fails naming the layout if it changes). Passes that changed nothing are not dumped, so they
are not steps. Each step's counts are read from its text with the one HLO reader
(:func:`~nbcompile.analysis.hlo.parse_hlo`): ``instructions`` counts the instructions of *every*
computation (fused computations included), exactly as ``parse_hlo(c.hlo).instruction_count()``
counts the optimised module, so the last step's figure equals the optimised module's.

Timing: XLA's per-pass timings (``HloModuleMetadata``) are not written through JAX's compile
path (``xla_dump_module_metadata`` writes no file there; jaxlib 0.10.2 and 0.12.0.1), so
``PassStep.seconds`` is ``None``.
What the dump does give is *when* each file was written: :attr:`PassLog.by_pipeline` sums the
wall time between consecutive dumps per pipeline (a coarse measure: it includes writing the
dumps and the passes that changed nothing).
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .hlo import count_opcodes

__all__ = ["PassLog", "PassStep", "read_pass_log", "unified_diff"]

#: ``module_0006.jit_f.0014.<pipeline>.after_<pass>[.before_<next>].txt``
_STEP_FILE = re.compile(r"^module_(\d+)\.(.+?)\.(\d{4,})\.(.+)\.txt$")
_START = "pipeline-start"


@dataclass(frozen=True)
class PassStep:
    """One dumped step of XLA's pipeline: ``name`` is the pass just run (``pipeline-start``: the
    module as the pipeline ``pipeline`` received it); ``changed`` whether the module's text
    differs from the step before (the first step: from the module before optimisations);
    ``instructions`` / ``fusions`` the counts after it; ``added`` / ``removed`` the opcodes it
    added and removed ({opcode: count}); ``seconds`` is None (see the module docstring)."""

    index: int
    name: str
    pipeline: str
    changed: bool
    seconds: float | None
    instructions: int
    fusions: int
    added: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)


_HUNK = re.compile(r"@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@")


def unified_diff(a: list[str], b: list[str], fromfile: str, tofile: str, n: int = 3) -> str:
    """``difflib.unified_diff`` of two line lists, its hunks' line numbers those of the whole
    files, computed on the lines between their common first and last lines (with ``n`` lines of
    context each side): consecutive XLA passes leave most of a module as it was, and difflib's
    matcher is quadratic in what it is given."""
    head = 0
    end = min(len(a), len(b))
    while head < end and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < end - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    if head == len(a) == len(b):
        return ""
    start = max(head - n, 0)
    stop_a, stop_b = len(a) - max(tail - n, 0), len(b) - max(tail - n, 0)

    def shift(m: re.Match[str]) -> str:
        return f"@@ -{int(m[1]) + start}{m[2]} +{int(m[3]) + start}{m[4]} @@"

    out = []
    for line in difflib.unified_diff(
        a[start:stop_a], b[start:stop_b], fromfile=fromfile, tofile=tofile, n=n
    ):
        out.append(_HUNK.sub(shift, line, count=1) if line.startswith("@@") else line)
    return "".join(out)


class PassLog:
    """The steps of XLA's pipeline for one program, with the module text after each."""

    __slots__ = ("_before", "_ends", "_texts", "module", "steps")

    def __init__(
        self,
        module: str,
        steps: list[PassStep],
        texts: list[str],
        before: str,
        ends: list[float] | None = None,
    ) -> None:
        self.module = module
        self.steps = steps
        self._texts = texts
        self._before = before
        self._ends = ends or []

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        changed = sum(s.changed for s in self.steps)
        return f"<PassLog {self.module}: {len(self.steps)} steps, {changed} changed the module>"

    def hlo(self, i: int) -> str:
        """The module's text after step ``i``."""
        return self._texts[self._index(i)]

    def diff(self, i: int) -> str:
        """Unified diff of the module after step ``i`` against step ``i - 1`` (step 0: against
        the module before optimisations); empty when the step changed nothing."""
        i = self._index(i)
        before = self._texts[i - 1] if i > 0 else self._before
        name = self.steps[i]
        return unified_diff(
            before.splitlines(keepends=True),
            self._texts[i].splitlines(keepends=True),
            f"before {name.pipeline}/{name.name}",
            f"after {name.pipeline}/{name.name}",
        )

    def changed(self) -> list[PassStep]:
        """The steps that changed the module."""
        return [s for s in self.steps if s.changed]

    @property
    def by_pipeline(self) -> dict[str, float]:
        """{pipeline: seconds}: wall time between consecutive dumps, given to the later dump's
        pipeline (coarse: includes writing the dumps); empty without file times."""
        out: dict[str, float] = {}
        ends = self._ends
        for i in range(1, min(len(ends), len(self.steps))):
            pipeline = self.steps[i].pipeline
            out[pipeline] = out.get(pipeline, 0.0) + max(ends[i] - ends[i - 1], 0.0)
        return out

    @property
    def last_dump_time(self) -> float | None:
        """When the last step's file was written (seconds since the epoch), if known."""
        return self._ends[-1] if self._ends else None

    def text(self) -> str:
        """One line per step: index, pipeline/pass, changed, counts and what it added/removed."""
        rows = []
        for s in self.steps:
            delta = " ".join(
                [f"+{n} {op}" for op, n in s.added.items()]
                + [f"-{n} {op}" for op, n in s.removed.items()]
            )
            mark = "*" if s.changed else " "
            rows.append(
                f"{s.index:3d} {mark} {s.pipeline}/{s.name}: {s.instructions} instructions, "
                f"{s.fusions} fusions {delta}".rstrip()
            )
        return "\n".join(rows)

    def _index(self, i: int) -> int:
        if not -len(self._texts) <= i < len(self._texts):
            raise IndexError(f"step {i} out of range: the log has {len(self._texts)} steps")
        return i % len(self._texts)


def _split_step(rest: str) -> tuple[str, str]:
    """(pipeline, pass) of a step file's ``<pipeline>.after_<pass>[.before_<next>]``."""
    pipeline, _, after = rest.partition(".after_")
    name = after.split(".before_", 1)[0]
    return pipeline, name or rest


def step_files(folder: Path) -> tuple[str, list[tuple[int, str, str, Path]]]:
    """(module name, [(number, pipeline, pass, path)]) of the last module dumped in ``folder``,
    in XLA's order."""
    found: dict[tuple[int, str], list[tuple[int, str, str, Path]]] = {}
    for path in folder.iterdir():
        match = _STEP_FILE.match(path.name)
        if match is None:
            continue
        pipeline, name = _split_step(match.group(4))
        key = (int(match.group(1)), match.group(2))
        found.setdefault(key, []).append((int(match.group(3)), pipeline, name, path))
    if not found:
        return "", []
    key = max(found)
    return key[1], sorted(found[key])


def read_pass_log(folder: str | Path) -> PassLog | None:
    """The :class:`PassLog` of the module dumped in ``folder``; None when it holds no pass dumps
    (XLA ran no passes there, or dumping was not asked for)."""
    folder = Path(folder)
    module, files = step_files(folder)
    if not files:
        return None
    before_files = sorted(folder.glob(f"module_*.{module}.before_optimizations.txt"))
    before = before_files[-1].read_text() if before_files else ""
    previous_text, previous = before, count_opcodes(before) if before else Counter()
    steps, texts, ends = [], [], []
    for index, (_, pipeline, name, path) in enumerate(files):
        text = path.read_text()
        changed = text != previous_text
        counts = count_opcodes(text) if changed or index == 0 else previous
        steps.append(
            PassStep(
                index=index,
                name=name,
                pipeline=pipeline,
                changed=changed,
                seconds=None,
                instructions=sum(counts.values()),
                fusions=counts.get("fusion", 0),
                added=dict(sorted((counts - previous).items())),
                removed=dict(sorted((previous - counts).items())),
            )
        )
        texts.append(text if changed else previous_text)  # one copy of an unchanged module
        ends.append(path.stat().st_mtime_ns / 1e9)
        previous_text, previous = text, counts
    return PassLog(module, steps, texts, before, ends)
