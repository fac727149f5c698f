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

import bisect
import difflib
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .hlo import count_opcodes

__all__ = ["PassLog", "PassLogWatcher", "PassStep", "read_pass_log", "unified_diff"]

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


#: a gap between anchors this small (lines x lines) is matched by difflib itself
_SMALL = 40_000
#: nested gaps looked through for anchors of their own, at most (then difflib matches the gap)
_DEPTH = 32


def unified_diff(a: list[str], b: list[str], fromfile: str, tofile: str, n: int = 3) -> str:
    """A unified diff of two line lists (``n`` lines of context), as ``difflib.unified_diff``
    writes one, matched line for line where it counts: consecutive XLA passes leave most of a
    module as it was, and difflib's matcher is quadratic in what it is given (0.3-0.4 s for the
    24 changed steps of a 12-layer train step). So common first and last lines are taken as they
    are, the lines that occur once on each side anchor the match in between (the longest run of
    them in the same order: a patience diff), and difflib matches only the small gaps left
    between anchors. Any matching gives a correct diff; this one matches the unique lines a
    reader follows (instruction definitions), as ``git diff --patience`` does."""
    if a == b:
        return ""
    blocks: list[tuple[int, int, int]] = []
    _matching_blocks(a, b, 0, len(a), 0, len(b), blocks, 0)
    matcher = _Given(_opcodes(blocks, len(a), len(b)))
    out = [f"--- {fromfile}\n", f"+++ {tofile}\n"]
    for group in matcher.get_grouped_opcodes(n):
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in a[i1:i2])
                continue
            if tag != "insert":
                out.extend("-" + line for line in a[i1:i2])
            if tag != "delete":
                out.extend("+" + line for line in b[j1:j2])
    return "".join(out)


class _Given(difflib.SequenceMatcher):
    """difflib's grouping of opcodes into hunks, of opcodes found here."""

    def __init__(self, opcodes: list[tuple[str, int, int, int, int]]) -> None:
        super().__init__(None, (), ())
        self._given = opcodes

    def get_opcodes(self) -> list[tuple[str, int, int, int, int]]:
        return self._given


def _range(start: int, stop: int) -> str:
    """A hunk's line range, as unified diffs write it (1-based; an empty range names the line
    before it)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if not length else start + 1},{length}"


def _matching_blocks(
    a: list[str],
    b: list[str],
    alo: int,
    ahi: int,
    blo: int,
    bhi: int,
    out: list[tuple[int, int, int]],
    depth: int,
) -> None:
    """Append ``(i, j, size)`` for runs ``a[i:i+size] == b[j:j+size]`` matched in
    ``a[alo:ahi]`` and ``b[blo:bhi]``, in order."""
    i, j = alo, blo
    while i < ahi and j < bhi and a[i] == b[j]:
        i, j = i + 1, j + 1
    if i > alo:
        out.append((alo, blo, i - alo))
    alo, blo = i, j
    tail = 0
    while ahi - tail > alo and bhi - tail > blo and a[ahi - 1 - tail] == b[bhi - 1 - tail]:
        tail += 1
    ahi, bhi = ahi - tail, bhi - tail
    if alo < ahi and blo < bhi:
        anchors = (
            _anchors(a, b, alo, ahi, blo, bhi)
            if (ahi - alo) * (bhi - blo) > _SMALL and depth < _DEPTH
            else []
        )
        if anchors:
            for ai, bj in anchors:
                if alo < ai or blo < bj:
                    _matching_blocks(a, b, alo, ai, blo, bj, out, depth + 1)
                out.append((ai, bj, 1))
                alo, blo = ai + 1, bj + 1
            _matching_blocks(a, b, alo, ahi, blo, bhi, out, depth + 1)
        else:
            matcher = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            out.extend((alo + i, blo + j, k) for i, j, k in matcher.get_matching_blocks() if k)
    if tail:
        out.append((ahi, bhi, tail))


def _anchors(
    a: list[str], b: list[str], alo: int, ahi: int, blo: int, bhi: int
) -> list[tuple[int, int]]:
    """``(i, j)`` of lines that occur once in ``a[alo:ahi]`` and once in ``b[blo:bhi]``: the
    longest chain of them in the same order on both sides."""
    part_a, part_b = a[alo:ahi], b[blo:bhi]
    count_a, count_b = Counter(part_a), Counter(part_b)  # counted in C
    once = {x for x, n in count_a.items() if n == 1}
    once.intersection_update(x for x, n in count_b.items() if n == 1)
    if not once:
        return []
    where_b = {x: j for j, x in enumerate(part_b, blo) if x in once}
    pairs = [(i, where_b[x]) for i, x in enumerate(part_a, alo) if x in once]
    # the longest increasing run of j (patience sorting: piles' tops, and each one's back link)
    tops: list[int] = []
    top_at: list[int] = []
    back: list[int] = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pile = bisect.bisect_left(tops, j)
        if pile == len(tops):
            tops.append(j)
            top_at.append(k)
        else:
            tops[pile], top_at[pile] = j, k
        back[k] = top_at[pile - 1] if pile else -1
    chain: list[tuple[int, int]] = []
    k = top_at[-1] if top_at else -1
    while k >= 0:
        chain.append(pairs[k])
        k = back[k]
    chain.reverse()
    return chain


def _opcodes(
    blocks: list[tuple[int, int, int]], len_a: int, len_b: int
) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes (``equal`` / ``replace`` / ``delete`` / ``insert`` ranges) of matching
    blocks in order."""
    ops: list[tuple[str, int, int, int, int]] = []
    i = j = 0
    for ai, bj, size in [*blocks, (len_a, len_b, 0)]:
        if i < ai and j < bj:
            ops.append(("replace", i, ai, j, bj))
        elif i < ai:
            ops.append(("delete", i, ai, j, bj))
        elif j < bj:
            ops.append(("insert", i, ai, j, bj))
        if size:
            if ops and ops[-1][0] == "equal" and ops[-1][2] == ai and ops[-1][4] == bj:
                ops[-1] = ("equal", ops[-1][1], ai + size, ops[-1][3], bj + size)
            else:
                ops.append(("equal", ai, ai + size, bj, bj + size))
        i, j = ai + size, bj + size
    return ops


class PassLog:
    """The steps of XLA's pipeline for one program, with the module text after each."""

    __slots__ = ("_before", "_diffs", "_ends", "_texts", "module", "steps")

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
        self._diffs: dict[int, str] = {}  # made early (beside XLA's compile), handed over once

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
        early = self._diffs.pop(i, None)
        if early is not None:
            return early
        return _step_diff(
            self._before if i == 0 else self._texts[i - 1], self._texts[i], self.steps[i]
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


def _step_diff(before: str, after: str, step: PassStep) -> str:
    return unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"before {step.pipeline}/{step.name}",
        f"after {step.pipeline}/{step.name}",
    )


class _Reader:
    """:func:`read_pass_log`'s work, a step file at a time in XLA's order (so that
    :class:`PassLogWatcher` can do it while XLA still compiles)."""

    def __init__(self, folder: Path, module: str, before: str) -> None:
        self.folder, self.module, self.before = folder, module, before
        self.paths: list[Path] = []
        self.steps: list[PassStep] = []
        self.texts: list[str] = []
        self.ends: list[float] = []
        self.diffs: dict[int, str] = {}
        self.previous_text = before
        self.previous = count_opcodes(before) if before else Counter()

    def add(self, pipeline: str, name: str, path: Path) -> None:
        index = len(self.steps)
        text = path.read_text()
        changed = text != self.previous_text
        previous = self.previous
        counts = count_opcodes(text) if changed or index == 0 else previous
        self.steps.append(
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
        self.paths.append(path)
        self.texts.append(text if changed else self.previous_text)  # one copy if unchanged
        self.ends.append(path.stat().st_mtime_ns / 1e9)
        self.previous_text, self.previous = text, counts

    def diff_last(self) -> None:
        """Make the last step's diff now (it is asked for by the view)."""
        i = len(self.steps) - 1
        if self.steps[i].changed:
            before = self.before if i == 0 else self.texts[i - 1]
            self.diffs[i] = _step_diff(before, self.texts[i], self.steps[i])

    def follows(self, module: str, files: list[tuple[int, str, str, Path]]) -> bool:
        """Whether what was read is the start of ``module``'s ``files``."""
        return module == self.module and [f[3] for f in files[: len(self.paths)]] == self.paths

    def log(self) -> PassLog:
        out = PassLog(self.module, self.steps, self.texts, self.before, self.ends)
        out._diffs.update(self.diffs)
        return out


def _before_text(folder: Path, module: str) -> str | None:
    found = sorted(folder.glob(f"module_*.{module}.before_optimizations.txt"))
    return found[-1].read_text() if found else None


def read_pass_log(folder: str | Path, early: PassLogWatcher | None = None) -> PassLog | None:
    """The :class:`PassLog` of the module dumped in ``folder``; None when it holds no pass dumps
    (XLA ran no passes there, or dumping was not asked for). ``early``: a watcher of the same
    folder, stopped; what it read while XLA compiled is taken as it is, the rest read here."""
    folder = Path(folder)
    module, files = step_files(folder)
    if not files:
        return None
    reader = early.reader if early is not None else None
    if reader is None or reader.folder != folder or not reader.follows(module, files):
        reader = _Reader(folder, module, _before_text(folder, module) or "")
    for _, pipeline, name, path in files[len(reader.steps) :]:
        reader.add(pipeline, name, path)
    return reader.log()


class PassLogWatcher:
    """Reads XLA's pass dump in ``folder`` while XLA still compiles: XLA runs its passes on one
    thread for about the first half of a CPU compile (the code generation after them uses
    more), writing a step file after each, and the dump is then read (~0.3 s for a 12-layer
    train step's 51 steps) and each step diffed (~0.15 s) on the otherwise idle core; the
    compiling thread lets go of the GIL. A step file is read once the next one exists (XLA has
    closed it), each changed step's diff made then. :meth:`stop` ends it (call it when the
    compile returns); :func:`read_pass_log` then reads the rest."""

    POLL = 0.02  # seconds between looks at the folder

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.reader: _Reader | None = None
        self._over = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nbcompile-pass-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._over.wait(self.POLL):
                self._catch_up()
        except Exception:  # read again where it is needed, and raised there if it must be
            self.reader = None

    def _catch_up(self) -> None:
        module, files = step_files(self.folder)
        if not files:
            return
        reader = self.reader
        if reader is None or not reader.follows(module, files):
            before = _before_text(self.folder, module)
            if before is None:  # not written yet
                return
            reader = self.reader = _Reader(self.folder, module, before)
        for _, pipeline, name, path in files[len(reader.steps) : len(files) - 1]:
            if self._over.is_set():
                return
            reader.add(pipeline, name, path)
            reader.diff_last()

    def stop(self) -> None:
        self._over.set()
        self._thread.join()
