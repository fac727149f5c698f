"""The ``nbcompile`` command: inspect and run frozen `.nbc` models; render notebooks.

    nbcompile inspect model.nbc [--json] [--no-verify] [--timeout S]
    nbcompile run model.nbc --input x.npy [--input y.npy ...] [--output out.npy|out.npz]
                            [--timeout S] [--max-bytes N]
    nbcompile render notebook.ipynb -o out.html [--no-execute]

Exit status: 0 ok, 1 the file (or an input) was refused or the model ran out of time — the
error code is printed on stderr, no traceback —, 2 usage error. Every string that comes from a
file (model, weight and input names, error messages quoting them) is printed with control,
bidirectional-override and unpaired-surrogate characters escaped, so a file cannot drive the
terminal. Each subcommand is one ``_add_*`` function registering its parser and handler.

Inputs are read by `read_input`: the ``.npy`` header is parsed first and checked against the
model's signature (native numeric dtype, shape) and the file's real size before any data is
read, and never unpickled. ``--output`` is written atomically (a locked temp file in the
folder, renamed over the target). Timeouts must be finite, positive and at most a week.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TextIO

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from nbcompile._compat import quiet_backend_start
from nbcompile.errors import FreezeError, NbcompileError
from nbcompile.units import format_bytes

Handler = Callable[[argparse.Namespace], int]

#: seconds ``nbcompile run`` lets a model load and run before giving up (``--timeout``)
RUN_TIMEOUT_S = 600
#: seconds ``nbcompile inspect`` waits for its load-and-call check child (``--timeout``)
INSPECT_TIMEOUT_S = 60
#: the largest ``--timeout`` any subcommand takes (a week)
MAX_TIMEOUT_S = 7 * 24 * 3600
#: largest ``.npy`` header read (NumPy's own default limit)
MAX_NPY_HEADER = 10_000

# C0/C1 controls (ESC, BEL, CR, ...), bidirectional marks and overrides, unpaired surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


class _Refused(Exception):
    """An input or output problem reported like a refused file (exit 1)."""


def seconds(text: str) -> float:
    """argparse type of ``--timeout``: a finite number of seconds > 0 and <= a week."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise argparse.ArgumentTypeError(
            f"[NBC521] {text!r} is not a number of seconds > 0 and <= {MAX_TIMEOUT_S} (a week)"
        )
    return value


def positive_int(text: str) -> int:
    """argparse type of ``--max-bytes``: a whole number > 0."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"[NBC521] {text!r} is not a whole number > 0")
    return value


def safe(text: object) -> str:
    """``text`` with every character that could drive a terminal written as an escape."""

    def escape(match: re.Match[str]) -> str:
        code = ord(match[0])
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _UNSAFE.sub(escape, str(text))


def _say(text: str, file: TextIO | None = None) -> None:
    """Print our own lines (every value in them passed through `safe`) in any encoding."""
    out = file or sys.stdout
    encoding = getattr(out, "encoding", None) or "utf-8"
    clean = "\n".join(safe(line) for line in text.split("\n"))
    print(clean.encode(encoding, "backslashreplace").decode(encoding), file=out)


def _signature_line(label: str, sig: dict[str, Any]) -> str:
    from nbcompile.frozen import leaf_names, shape_text

    parts = [
        f"{safe(n) or '(value)'} {safe(leaf['dtype'])}{safe(shape_text(leaf['shape']))}"
        for n, leaf in zip(leaf_names(sig["tree"]), sig["leaves"], strict=True)
    ]
    return f"  {label}: " + (", ".join(parts) or "none")


def _inspect_text(info: dict[str, Any], verification: dict[str, Any] | None) -> str:
    m, s, prog = info["manifest"], info["sections"], info["program"]
    w = m["writer"]
    weights = m["weights"]
    shown = ", ".join(f"{safe(x['name'])} {safe(x['dtype'])}{x['shape']}" for x in weights[:8])
    more = f", ... ({len(weights) - 8} more)" if len(weights) > 8 else ""
    lines = [
        f"{safe(info['path'])}: nbcompile frozen model, format {info['format_version']}",
        f"  name: {safe(m['name'])}   created: {safe(m['created_utc'])}",
        f"  written by: nbcompile {safe(w['nbcompile'])}, jax {safe(w['jax'])}, "
        f"jaxlib {safe(w['jaxlib'])} (export serialization {w['export_serialization_version']}, "
        f"calling convention {w['calling_convention_version']})",
        f"  platforms: {', '.join(m['platforms'])} ({m['device_count']} device(s)); mode: "
        + ("constants baked in" if m["constants_mode"] else "weights as arguments"),
        _signature_line("inputs", m["inputs"]),
        _signature_line("outputs", m["outputs"]),
        f"  weights: {len(weights)} tensors, {format_bytes(info['weight_bytes'])}"
        + (f": {shown}{more}" if weights else ""),
        f"  sizes: file {format_bytes(info['file_bytes'])} = header {s['header']} B + manifest "
        f"{format_bytes(s['manifest'])} + weights {format_bytes(s['weights'])} + program "
        f"{format_bytes(s['program'])}",
        f"  program (read from the program): {prog['stablehlo_ops']} StableHLO ops, longest "
        f"chain {prog['longest_chain']}, nesting {prog['nesting']}; custom calls: "
        + (", ".join(safe(t) for t in prog["custom_calls"]) or "none"),
    ]
    if verification is None:
        lines.append("  verification: skipped")
    elif verification["ok"]:
        lines.append(
            f"  verification: ok (loaded and ran on {safe(verification.get('platform'))} in "
            f"{verification.get('load_seconds', 0) + verification.get('call_seconds', 0):.2f} s)"
        )
    else:
        lines.append(f"  verification: FAILED {safe(verification.get('message', ''))}")
    return "\n".join(lines)


def _cmd_inspect(args: argparse.Namespace) -> int:
    from nbcompile.frozen import describe, verify

    info = describe(args.path)
    verification = None if args.no_verify else verify(args.path, timeout=args.timeout)
    if args.json:  # ensure_ascii: every non-ASCII character (controls included) is escaped
        print(json.dumps({**info, "verification": verification}, indent=1, ensure_ascii=True))
    else:
        _say(_inspect_text(info, verification))
    if verification is not None and not verification["ok"]:
        _say(f"nbcompile: {safe(verification.get('message', 'verification failed'))}", sys.stderr)
        return 1
    return 0


def _add_inspect(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show a .nbc file's header, signature, sizes; verify it")
    p.add_argument("path", help="the .nbc file")
    p.add_argument("--json", action="store_true", help="print the facts as JSON")
    p.add_argument("--no-verify", action="store_true", help="skip the load-and-call check")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=INSPECT_TIMEOUT_S,
        help=f"seconds the load-and-call check may take (default {INSPECT_TIMEOUT_S})",
    )
    p.set_defaults(handler=_cmd_inspect)


def _bad_input(path: str, why: str) -> FreezeError:
    return FreezeError(
        f"input {path!r} is not a plain .npy array: {why}",
        code="NBC520",
        hint="save the input with numpy.save(path, array) (no pickled objects)",
    )


def _open_regular(path: str) -> Any:
    """``path`` opened for reading: a regular file (a FIFO or device is refused unopened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise _bad_input(path, err.strerror or type(err).__name__) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _bad_input(path, "not a regular file")
    return os.fdopen(fd, "rb")


def _header(f: Any, path: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"format version {version} (1.0 and 2.0 are read)")
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, fortran, dtype = read(f, max_header_size=MAX_NPY_HEADER)
    except Exception as err:  # NumPy's header parser (ast, tokenize) on hostile text
        raise _bad_input(path, f"{(str(err).splitlines() or [''])[0][:200]}") from None
    return tuple(shape), bool(fortran), np.dtype(dtype)


def _check_dtype(path: str, dtype: np.dtype) -> None:
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biufc":
        raise FreezeError(
            f"input {path!r} has dtype {dtype.str!r}: not a numeric array",
            code="NBC507",
            hint="save a numeric array (bool, int, uint, float, complex)",
        )
    if not dtype.isnative:
        little = dtype.newbyteorder("<").str
        raise FreezeError(
            f"input {path!r} is stored big-endian ({dtype.str!r})",
            code="NBC507",
            hint=f"save it little-endian: numpy.save(path, x.astype({little!r}))",
        )


def _check_shape(path: str, shape: tuple[int, ...], dtype: np.dtype, want: dict) -> None:
    from nbcompile.frozen import _batch

    wanted = want["shape"]
    uses_b = bool(wanted) and wanted[0] == _batch.BATCH_DIM
    size = shape[0] if uses_b and shape else 1
    import jax

    # as `jax.jit` would: float64 runs as float32 where JAX's 64-bit mode is off
    if (
        np.dtype(jax.dtypes.canonicalize_dtype(dtype)).name != want["dtype"]
        or size < 1
        or len(shape) != len(wanted)
        or shape != _batch.concrete_shape(wanted, size)
    ):
        raise FreezeError(
            f"input {path!r} is {dtype.name}{list(shape)}, the model takes "
            f"{want['dtype']}{_batch.show(wanted)}"
            + (" (b: any batch size >= 1)" if uses_b else ""),
            code="NBC507",
            hint=f"pass an array of shape {_batch.show(wanted)} and dtype {want['dtype']}",
        )


def read_input(path: str, want: dict[str, Any] | None = None) -> np.ndarray:
    """The array in the ``.npy`` file ``path``, checked before its data is read.

    The header is parsed without unpickling; the dtype must be native numeric and, when
    ``want`` (the model's input leaf: ``{"shape": [...], "dtype": ...}``) is given, match it
    with the shape (NBC507, naming the fix); the data the header claims must be in the file
    (NBC520 otherwise), so a lying header cannot make us allocate or read more than the file.
    """
    with _open_regular(path) as f:
        shape, fortran, dtype = _header(f, path)
        _check_dtype(path, dtype)
        if any(d < 0 for d in shape):
            raise _bad_input(path, f"the header's shape {list(shape)} has a negative dimension")
        if want is not None:
            _check_shape(path, shape, dtype, want)
        need = math.prod(shape) * dtype.itemsize
        have = os.fstat(f.fileno()).st_size - f.tell()
        if need > have:
            raise _bad_input(path, f"the header claims {need} bytes of data, the file holds {have}")
        out = np.empty(shape, dtype, order="F" if fortran else "C")
        flat = out.reshape(-1, order="F" if fortran else "C").view(np.uint8)
        try:
            got = f.readinto(memoryview(flat)) if need else 0
        except OSError as err:
            raise _bad_input(path, err.strerror or type(err).__name__) from None
        if got != need:
            raise _bad_input(path, f"the file ended after {got} of {need} bytes of data")
    return out


def _write_output(path: str, flat: list[np.ndarray]) -> None:
    """Write the outputs to ``path`` (.npy for one, .npz for several), atomically."""
    from nbcompile.frozen import _atomic

    if path.endswith(".npz"):
        arrays = {f"out{i}": a for i, a in enumerate(flat)}
        _atomic.replace_with(path, lambda out: np.savez(out, **arrays), code="NBC524")
    elif len(flat) == 1:
        arr = flat[0]
        _atomic.replace_with(path, lambda out: np.save(out, arr, allow_pickle=False), code="NBC524")
    else:
        raise _Refused(f"the model has {len(flat)} outputs: give --output a .npz path")


def _watchdog(seconds: float) -> threading.Timer:
    """End the process (exit 1, NBC508) if the model has not finished within ``seconds``.

    A program can loop for ever inside XLA, where Python cannot interrupt it; a timer thread
    runs while XLA holds no Python lock, reports and ends the process.
    """

    def expire() -> None:
        err = FreezeError(
            f"the model did not finish within {seconds:g} s (--timeout)",
            code="NBC508",
            hint="give a larger --timeout if the model is known to be slow",
        )
        _say(f"nbcompile: [{err.code}] {err.message}", sys.stderr)
        sys.stderr.flush()
        os._exit(1)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


def _cmd_run(args: argparse.Namespace) -> int:
    from nbcompile.frozen import load

    timer = _watchdog(args.timeout)
    try:
        model = load(args.path, platform=args.platform, max_bytes=args.max_bytes)
        want = model.signature["inputs"]["leaves"]
        if len(args.input) != len(want):
            raise FreezeError(
                f"{len(args.input)} inputs given, the model takes {len(want)} "
                f"({', '.join(model.input_names) or 'none'})",
                code="NBC507",
            )
        inputs = [read_input(p, w) for p, w in zip(args.input, want, strict=True)]
        flat = [np.asarray(x) for x in model.call_leaves(inputs)]
    finally:
        timer.cancel()
    names = model.output_names
    if args.output is None:
        for name, arr in zip(names, flat, strict=True):
            body = np.array2string(arr, threshold=20, edgeitems=3)
            _say(f"{safe(name) or 'output'} {arr.dtype}{list(arr.shape)}\n{body}")
    elif len(flat) != 1 and not args.output.endswith(".npz"):
        raise _Refused(f"the model has {len(flat)} outputs: give --output a .npz path")
    else:
        _write_output(args.output, flat)
    return 0


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run a .nbc model on .npy inputs")
    p.add_argument("path", help="the .nbc file")
    p.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="X.npy",
        help="an input array (repeat for several inputs, in signature order)",
    )
    p.add_argument("--output", metavar="Y.npy", help="write the output (.npz for several)")
    p.add_argument("--platform", help="run on this platform of the file (default: local)")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=RUN_TIMEOUT_S,
        help=f"seconds to load and run before giving up (default {RUN_TIMEOUT_S})",
    )
    p.add_argument(
        "--max-bytes",
        type=positive_int,
        default=None,
        help="memory budget in bytes (default: the memory available now)",
    )
    p.set_defaults(handler=_cmd_run)


def _cmd_render(args: argparse.Namespace) -> int:
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    from nbcompile.render import render

    try:
        out = render(
            args.notebook, args.output, run=not args.no_execute, timeout=math.ceil(args.timeout)
        )
    except CellExecutionError as err:
        what = f"{getattr(err, 'ename', 'Error')}: {getattr(err, 'evalue', '') or err}"
        raise _Refused(f"a cell of {args.notebook} failed: {what[:400]}") from None
    except (CellTimeoutError, DeadKernelError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise _Refused(f"running {args.notebook} failed: {first}") from None
    _say(f"wrote {safe(out)} ({out.stat().st_size // 1024} KB, viewable offline)")
    return 0


def _add_render(sub: Any) -> None:
    p = sub.add_parser(
        "render", help="execute a notebook and export HTML with graphs visible offline"
    )
    p.add_argument("notebook", help="the .ipynb file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.html", help="the HTML file")
    p.add_argument(
        "--no-execute", action="store_true", help="export the stored outputs as they are"
    )
    p.add_argument("--timeout", type=seconds, default=600, help="seconds per cell (default 600)")
    p.set_defaults(handler=_cmd_render)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nbcompile", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_inspect, _add_run, _add_render):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nbcompile`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    # With libtpu or the CUDA plugin installed and no such device, start JAX on the CPU without
    # their start-up noise on stderr (as %load_ext does; nothing changes where a device exists)
    quiet_backend_start()
    try:
        return handler(args)
    except NbcompileError as err:
        hint = f"\n  \N{RIGHTWARDS ARROW} {safe(err.hint)}" if err.hint else ""
        _say(f"nbcompile: [{err.code}] {safe(err.message)}{hint}", sys.stderr)
        return 1
    except (_Refused, OSError) as err:
        _say(f"nbcompile: {safe(err)}", sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
