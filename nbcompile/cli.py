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
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TextIO

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from nbcompile._compat import quiet_backend_start
from nbcompile.errors import FreezeError
from nbcompile.units import format_bytes

Handler = Callable[[argparse.Namespace], int]

#: seconds ``nbcompile run`` lets a model load and run before giving up (``--timeout``)
RUN_TIMEOUT_S = 600
#: seconds ``nbcompile inspect`` waits for its load-and-call check child (``--timeout``)
INSPECT_TIMEOUT_S = 60

# C0/C1 controls (ESC, BEL, CR, ...), bidirectional marks and overrides, unpaired surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


class _Refused(Exception):
    """An input or output problem reported like a refused file (exit 1)."""


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
        type=float,
        default=INSPECT_TIMEOUT_S,
        help=f"seconds the load-and-call check may take (default {INSPECT_TIMEOUT_S})",
    )
    p.set_defaults(handler=_cmd_inspect)


def _load_input(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as err:
        raise _Refused(f"{path}: not a plain .npy array ({err})") from None


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
        flat = [np.asarray(x) for x in model.call_leaves([_load_input(p) for p in args.input])]
    finally:
        timer.cancel()
    names = model.output_names
    if args.output is None:
        for name, arr in zip(names, flat, strict=True):
            body = np.array2string(arr, threshold=20, edgeitems=3)
            _say(f"{safe(name) or 'output'} {arr.dtype}{list(arr.shape)}\n{body}")
    elif args.output.endswith(".npz"):
        np.savez(args.output, **{f"out{i}": a for i, a in enumerate(flat)})
    elif len(flat) == 1:
        np.save(args.output, flat[0], allow_pickle=False)
    else:
        raise _Refused(f"the model has {len(flat)} outputs: give --output a .npz path")
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
        type=float,
        default=RUN_TIMEOUT_S,
        help=f"seconds to load and run before giving up (default {RUN_TIMEOUT_S})",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=None,
        help="memory budget in bytes (default: the memory available now)",
    )
    p.set_defaults(handler=_cmd_run)


def _cmd_render(args: argparse.Namespace) -> int:
    from nbclient.exceptions import CellExecutionError

    from nbcompile.render import remote_references, render

    try:
        out = render(args.notebook, args.output, run=not args.no_execute, timeout=args.timeout)
    except CellExecutionError as err:
        what = f"{getattr(err, 'ename', 'Error')}: {getattr(err, 'evalue', '') or err}"
        raise _Refused(f"a cell of {args.notebook} failed: {what[:400]}") from None
    remote = remote_references(out.read_text(encoding="utf-8"))
    if remote:
        raise _Refused(f"{out} references the network ({remote[0]}...)")
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
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
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
    except FreezeError as err:
        hint = f"\n  \N{RIGHTWARDS ARROW} {safe(err.hint)}" if err.hint else ""
        _say(f"nbcompile: [{err.code}] {safe(err.message)}{hint}", sys.stderr)
        return 1
    except (_Refused, OSError) as err:
        _say(f"nbcompile: {safe(err)}", sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
