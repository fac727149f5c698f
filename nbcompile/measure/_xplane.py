"""Run a program under JAX's profiler and read back one record per call: kernel spans by name.

Facts this relies on (JAX/jaxlib 0.10.2, docs/profile.md has the details):

* ``jax.profiler.start_trace(dir)`` / ``stop_trace()`` write ``<dir>/plugins/profile/<run>/
  <host>.xplane.pb``; :class:`jax.profiler.ProfileData` reads it (no TensorBoard, no xprof).
* XLA:CPU records, on the plane ``/host:CPU``, one event per kernel execution named after the
  HLO instruction (``ynn_fusion.6``, ``wrapped_tanh``, ``dot.81``, ``while.6``) with the stats
  ``hlo_op``, ``hlo_module`` and ``run_id`` (one id per call), on the client's and the Eigen
  pool's thread lines. An asynchronous kernel (a dot handed to the thread pool) returns early;
  its completion is a later ``end: <name>`` event, so a kernel runs from its event's start to
  the end of its ``end:`` marker. ``ThunkExecutor::Execute*`` events cover the executor's work.
* On GPU/TPU the kernels are on ``/device:...`` planes; the event name is the device kernel's
  name and the stats ``hlo_op`` / ``hlo_module`` name the HLO instruction and module.

Each call is wrapped in a :class:`jax.profiler.TraceAnnotation` named :data:`MARKER` (its
wall-clock window); kernel spans are grouped per call by ``run_id`` where the profiler gives one,
else by the window they start in.
"""

from __future__ import annotations

import bisect
import collections
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax

from .._compat import tpu_profiler_skipped
from ..errors import TargetError
from ._timeline import Span
from ._timing import Prepared

__all__ = ["MARKER", "CallRecord", "Trace", "capture", "extract"]

MARKER = "nbcompile.profile call"
_EXECUTOR = "ThunkExecutor::Execute"
_END = "end: "


@dataclass
class CallRecord:
    """One traced call: its wall-clock window, kernel spans and executor spans (ns)."""

    start: int
    end: int
    spans: list[Span] = field(default_factory=list)
    busy: list[tuple[int, int]] = field(default_factory=list)

    @property
    def wall(self) -> int:
        return self.end - self.start


@dataclass
class Trace:
    """What the profiler saw: per-call records and where the kernel events were found."""

    calls: list[CallRecord]
    where: str  # "host threads" (XLA:CPU) or the device plane names
    outside: int = 0  # kernel spans that fell in no call window
    other_modules: int = 0  # kernel-named events of another program (filtered out)
    #: device events inside an XLA:GPU command buffer (a CUDA graph) that name no kernel of the
    #: program: library kernels (cuBLAS) launched by a custom call the graph holds
    unnamed_in_graphs: int = 0


def _stats(event: Any) -> dict[str, Any]:
    return {k: v for k, v in event.stats if k is not None}


def _device_lines(plane: Any) -> list[Any]:
    """The lines of a device plane that hold each kernel once. A GPU's kernels are on its
    ``Stream #N`` lines, and an exported trace may add summary lines (``XLA Ops``, ``XLA
    Modules``, ``Steps``) that repeat them; a TPU's own op line is ``XLA Ops``."""
    lines = list(plane.lines)
    streams = [line for line in lines if line.name.startswith("Stream")]
    if streams:
        return streams
    ops = [line for line in lines if line.name == "XLA Ops"]
    return ops or lines


def extract(space: Any, names: set[str], module: str | None, library: Sequence[str] = ()) -> Trace:
    """Group the kernel events of ``space`` (a ProfileData) by call.

    ``names``: the HLO instruction names of the program's kernels; ``module``: its HLO module
    name (events of other modules are ignored); ``library``: its library custom calls (cuBLAS
    GEMMs) in the schedule's order, for naming the kernels a CUDA graph runs for them (see
    :func:`_name_graph_kernels`).

    jaxlib 0.12's ``event.stats`` warns (a ``DeprecationWarning``: its iterator type has no
    ``__module__``) from C++; where warnings are errors (``-W error``, pytest's
    ``filterwarnings = error``) that warning aborts the whole process inside nanobind, so it is
    ignored while the events are read.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _extract(space, names, module, list(library))


def _extract(space: Any, names: set[str], module: str | None, library: list[str]) -> Trace:
    windows: list[tuple[int, int]] = []
    host: list[tuple[Span, Any]] = []
    device: list[tuple[Span, Any]] = []
    busy: list[tuple[int, int]] = []
    device_busy: list[tuple[int, int]] = []
    ends: dict[str, list[int]] = collections.defaultdict(list)
    other_modules = 0
    in_graphs: list[Span] = []
    # a GPU kernel's function is its fusion's name with "." as "_" (input_reduce_fusion_1)
    ptx = {n.replace(".", "_"): n for n in names}
    device_planes = []
    for plane in space.planes:
        on_device = plane.name.startswith("/device:")
        if not on_device and not plane.name.startswith("/host:"):
            continue
        for line in _device_lines(plane) if on_device else plane.lines:
            for ev in line.events:
                name = ev.name
                if name == MARKER:
                    windows.append((ev.start_ns, ev.end_ns))
                    continue
                if on_device:
                    stats = _stats(ev)
                    op = str(stats.get("hlo_op") or name)
                    name = op if op in names else _kernel_of(name, names, ptx)
                    if name is None:  # copies, library kernels of no known op: still busy
                        device_busy.append((ev.start_ns, ev.end_ns))
                        if op.startswith("command_buffer") and stats.get("hlo_module") in (
                            None,
                            module,
                        ):
                            in_graphs.append(Span(ev.name, ev.start_ns, ev.end_ns, plane.name))
                        continue
                elif name in names:
                    stats = _stats(ev)
                elif name.startswith(_END):
                    ends[name[len(_END) :]].append(ev.end_ns)
                    continue
                elif name.startswith(_EXECUTOR):
                    busy.append((ev.start_ns, ev.end_ns))
                    continue
                else:
                    continue
                if module and stats.get("hlo_module") not in (None, module):
                    other_modules += 1
                    continue
                span = Span(name, ev.start_ns, ev.end_ns, f"{plane.name}/{line.name}")
                (device if on_device else host).append((span, stats.get("run_id")))
                if on_device and plane.name not in device_planes:
                    device_planes.append(plane.name)
    named, unnamed = _name_graph_kernels(in_graphs, windows, library)
    device += [(span, None) for span in named]
    # Device events are the kernels themselves; host events of the same names (launches) are not.
    chosen = device or host
    if not device:
        chosen = _close_async(chosen, ends)
    calls, outside = _group(windows, chosen, device_busy if device else busy)
    return Trace(
        calls=calls,
        where=", ".join(device_planes) if device else "host threads",
        outside=outside,
        other_modules=other_modules,
        unnamed_in_graphs=unnamed,
    )


def _name_graph_kernels(
    spans: list[Span], windows: list[tuple[int, int]], library: list[str]
) -> tuple[list[Span], int]:
    """Name the kernels a CUDA graph ran that carry no instruction name (cuBLAS's GEMM kernels
    launched by the program's library custom calls), and count those left unnamed.

    A command buffer records its kernels in the schedule's order and replays them on one
    stream, so in one call the i-th such kernel is the i-th library call -- where the counts
    agree (one kernel per call: measured for cuBLAS GEMMs on an H200). Where a call ran more or
    fewer (a GEMM split into two kernels), its kernels are left unnamed, not guessed."""
    if not spans:
        return [], 0
    named: list[Span] = []
    left = 0
    per_window: dict[int, list[Span]] = collections.defaultdict(list)
    bounds = sorted(windows)
    starts = [s for s, _e in bounds]
    for span in spans:
        i = bisect.bisect_right(starts, span.start) - 1
        if i >= 0 and span.start < bounds[i][1]:
            per_window[i].append(span)
        else:
            left += 1
    for group in per_window.values():
        group.sort(key=lambda span: span.start)
        if library and len(group) == len(library):
            named += [
                Span(n, s.start, s.end, s.thread) for n, s in zip(library, group, strict=True)
            ]
        else:
            left += len(group)
    return named, left


def _kernel_of(event: str, names: set[str], ptx: dict[str, str]) -> str | None:
    """The program's kernel a device event is, by the event's own name, where its ``hlo_op``
    stat does not name one: inside an XLA:GPU command buffer (a CUDA graph, on by default) every
    event's ``hlo_op`` is the buffer (``command_buffer_1``), and a fusion's kernel is named
    after the fusion, "." written "_" (measured on an H200, JAX 0.11.2)."""
    if event in names:
        return event
    return ptx.get(event)


def _close_async(spans: list[tuple[Span, Any]], ends: dict[str, list[int]]) -> list:
    """Extend each span to its ``end: <name>`` marker (the first at or after its start), but
    never past the next kernel its own thread starts: an asynchronous kernel's work goes on in
    the pool while its thread waits, but the executor also writes markers late when the thread
    went straight on to the next kernel (seen on a busy machine), and a thread running another
    kernel is not running this one."""
    starts: dict[str, list[int]] = collections.defaultdict(list)
    by_name: dict[str, list[int]] = collections.defaultdict(list)
    for i, (span, _) in enumerate(spans):
        by_name[span.name].append(i)
        starts[span.thread].append(span.start)
    for values in starts.values():
        values.sort()
    out = list(spans)
    for name, idxs in by_name.items():
        marks = sorted(ends.get(name, ()))
        if not marks:
            continue
        k = 0
        for i in sorted(idxs, key=lambda j: spans[j][0].start):
            span, run = spans[i]
            while k < len(marks) and marks[k] < span.start:
                k += 1
            if k == len(marks):
                break
            mark, k = marks[k], k + 1
            following = starts[span.thread]
            nxt = bisect.bisect_right(following, span.start)
            limit = following[nxt] if nxt < len(following) else mark
            end = min(mark, limit)
            if end > span.end:
                out[i] = (Span(span.name, span.start, end, span.thread), run)
    return out


def _group(
    windows: list[tuple[int, int]], spans: list[tuple[Span, Any]], busy: list[tuple[int, int]]
) -> tuple[list[CallRecord], int]:
    """Calls in time order, and how many kernel spans fell in no call."""
    calls = [CallRecord(s, e) for s, e in sorted(windows)]
    if not calls:
        return calls, len(spans)
    starts = [c.start for c in calls]

    def window_of(t: int) -> int | None:
        # the last window starting at or before t, if t is inside it
        lo, hi = 0, len(starts)
        while lo < hi:
            mid = (lo + hi) // 2
            if starts[mid] <= t:
                lo = mid + 1
            else:
                hi = mid
        i = lo - 1
        return i if i >= 0 and t < calls[i].end else None

    # run_id, where given, names the call; its window is where most of its spans start
    by_run: dict[Any, list[Span]] = collections.defaultdict(list)
    for span, run in spans:
        by_run[run].append(span)
    outside = 0
    for run, group in by_run.items():
        if run is None:
            for span in group:
                i = window_of(span.start)
                if i is None:
                    outside += 1
                else:
                    calls[i].spans.append(span)
            continue
        votes = collections.Counter(window_of(s.start) for s in group)
        votes.pop(None, None)
        if votes:
            calls[votes.most_common(1)[0][0]].spans.extend(group)
        else:
            outside += len(group)
    for start, end in busy:
        i = window_of(start)
        if i is not None:
            calls[i].busy.append((start, end))
    return calls, outside


def _tpu_runtime_without_tpu() -> bool:
    """libtpu's profiler is registered in this process but there is no TPU.

    Starting a profiler session then crashes the process with a segmentation fault (measured
    with JAX/jaxlib 0.10.2 and its libtpu; no option avoids it), so this must be known before
    starting one. nbcompile's own deviceless TPU compiles load libtpu without registering its
    profiler (``_compat.tpu_plugin_without_profiler``): only libtpu loaded some other way (the
    user's own ``get_topology_desc``, a TPU backend started without a TPU) counts. Read from
    the process's memory map (Linux, the only platform libtpu ships for)."""
    if tpu_profiler_skipped():  # libtpu was loaded by nbcompile, without its profiler
        return False
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: no libtpu
        return False
    if "libtpu" not in maps:
        return False
    try:
        return not jax.devices("tpu")
    except RuntimeError:  # documented: no TPU backend in this process
        return True


def capture(
    call: Callable[[], None] | Prepared,
    calls: int,
    names: set[str],
    module: str | None,
    library: Sequence[str] = (),
) -> Trace:
    """Run ``call`` (which blocks until the result is ready) ``calls`` times under the profiler;
    a :class:`Prepared` call's inputs are made before each call, outside its window."""
    if _tpu_runtime_without_tpu():
        raise TargetError(
            "cannot profile in this process: libtpu was loaded here with its profiler but "
            "without a TPU (not through nbcompile's --topology compile), and JAX's profiler "
            "then crashes the process when it starts",
            hint="restart the kernel and compile for TPU topologies through nbcompile "
            "(%%compile --topology, nbcompile.compile(topology=...)), which loads libtpu "
            "without its profiler",
        )
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # Python frames are not needed and slow every call down
    options.enable_hlo_proto = False  # the HLO is known already
    with tempfile.TemporaryDirectory(prefix="nbcompile-profile-") as tmp:
        try:
            jax.profiler.start_trace(tmp, profiler_options=options)
        except RuntimeError as err:  # documented: a trace is already running
            raise TargetError(
                "cannot profile: JAX's profiler is already tracing in this process",
                hint="stop the running jax.profiler trace (jax.profiler.stop_trace()) and retry",
            ) from err
        try:
            for _ in range(calls):
                if isinstance(call, Prepared):
                    inputs = call.prepare()
                    with jax.profiler.TraceAnnotation(MARKER):
                        call.run(inputs)
                    continue
                with jax.profiler.TraceAnnotation(MARKER):
                    call()
        finally:
            jax.profiler.stop_trace()
        files = sorted(Path(tmp).glob("plugins/profile/*/*.xplane.pb"))
        if not files:
            raise TargetError("the profiler wrote no trace", hint="check the JAX installation")
        space = jax.profiler.ProfileData.from_file(str(files[-1]))
        return extract(space, names, module, library)
