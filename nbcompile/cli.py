"""The ``nbcompile`` command: inspect and run frozen `.nbc` models; render notebooks.

    nbcompile inspect model.nbc [--json] [--no-verify]
    nbcompile run model.nbc --input x.npy [--input y.npy ...] [--output out.npy|out.npz]
    nbcompile render notebook.ipynb -o out.html [--no-execute]

Exit status: 0 ok, 1 the file (or an input) was refused — the error code is printed on stderr,
no traceback —, 2 usage error. Each subcommand is one ``_add_*`` function registering its parser
and handler, so adding one is a local change.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from nbcompile.errors import FreezeError

Handler = Callable[[argparse.Namespace], int]


class _Refused(Exception):
    """An input or output problem reported like a refused file (exit 1)."""


def _fmt_size(n: int) -> str:
    return f"{n} B" if n < 1000 else f"{n / 1000:.1f} KB" if n < 1e6 else f"{n / 1e6:.1f} MB"


def _describe(path: str) -> dict[str, Any]:
    """Header facts of a file that passes the structural checks (no deserialisation)."""
    from nbcompile.frozen import _format, _manifest, _safetensors

    sections = _format.check_sections(_format.read_file(path))
    manifest = _manifest.parse(sections.manifest, sections.format_version)
    tensors, _ = _safetensors.parse(sections.weights)
    return {
        "path": path,
        "format_version": sections.format_version,
        "file_bytes": sections.file_bytes,
        "sections": {
            "header": _format.HEADER_SIZE,
            "manifest": len(sections.manifest),
            "weights": len(sections.weights),
            "program": len(sections.program),
        },
        "weight_bytes": sum(t.end - t.start for t in tensors),
        "manifest": manifest,
    }


def _signature_lines(label: str, sig: dict[str, Any]) -> str:
    from nbcompile.frozen import _batch, _manifest

    names = _manifest.leaf_paths(sig["tree"])
    parts = [
        f"{n or '(value)'} {leaf['dtype']}{_batch.show(leaf['shape'])}"
        for n, leaf in zip(names, sig["leaves"], strict=True)
    ]
    return f"  {label}: " + (", ".join(parts) or "none")


def _inspect_text(info: dict[str, Any], verification: dict[str, Any] | None) -> str:
    m, s = info["manifest"], info["sections"]
    w = m["writer"]
    weights = m["weights"]
    shown = ", ".join(f"{x['name']} {x['dtype']}{x['shape']}" for x in weights[:8])
    more = f", ... ({len(weights) - 8} more)" if len(weights) > 8 else ""
    lines = [
        f"{info['path']}: nbcompile frozen model, format {info['format_version']}",
        f"  name: {m['name']}   created: {m['created_utc']}",
        f"  written by: nbcompile {w['nbcompile']}, jax {w['jax']}, jaxlib {w['jaxlib']} "
        f"(export serialization {w['export_serialization_version']}, "
        f"calling convention {w['calling_convention_version']})",
        f"  platforms: {', '.join(m['platforms'])} ({m['device_count']} device(s)); mode: "
        + ("constants baked in" if m["constants_mode"] else "weights as arguments"),
        _signature_lines("inputs", m["inputs"]),
        _signature_lines("outputs", m["outputs"]),
        f"  weights: {len(weights)} tensors, {_fmt_size(info['weight_bytes'])}"
        + (f": {shown}{more}" if weights else ""),
        f"  sizes: file {_fmt_size(info['file_bytes'])} = header {s['header']} B + manifest "
        f"{_fmt_size(s['manifest'])} + weights {_fmt_size(s['weights'])} + program {_fmt_size(s['program'])}",
        f"  program: {m['program']['stablehlo_ops']} StableHLO ops; custom calls: "
        + (", ".join(m["program"].get("custom_calls") or []) or "none"),
    ]
    if verification is None:
        lines.append("  verification: skipped")
    elif verification["ok"]:
        lines.append(
            f"  verification: ok (loaded and ran on {verification.get('platform')} in "
            f"{verification.get('load_seconds', 0) + verification.get('call_seconds', 0):.2f} s)"
        )
    else:
        lines.append(f"  verification: FAILED {verification.get('message', '')}")
    return "\n".join(lines)


def _cmd_inspect(args: argparse.Namespace) -> int:
    from nbcompile.frozen import verify

    info = _describe(args.path)
    verification = None if args.no_verify else verify(args.path)
    if args.json:
        print(json.dumps({**info, "verification": verification}, indent=1))
    else:
        print(_inspect_text(info, verification))
    if verification is not None and not verification["ok"]:
        print(f"nbcompile: {verification.get('message', 'verification failed')}", file=sys.stderr)
        return 1
    return 0


def _add_inspect(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show a .nbc file's header, signature, sizes; verify it")
    p.add_argument("path", help="the .nbc file")
    p.add_argument("--json", action="store_true", help="print the facts as JSON")
    p.add_argument("--no-verify", action="store_true", help="skip the load-and-call check")
    p.set_defaults(handler=_cmd_inspect)


def _load_input(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as err:
        raise _Refused(f"{path}: not a plain .npy array ({err})") from None


def _cmd_run(args: argparse.Namespace) -> int:
    import jax

    from nbcompile.frozen import _manifest, load

    model = load(args.path, platform=args.platform)
    sig = model.signature
    leaves = [_load_input(p) for p in args.input]
    if len(leaves) != len(sig["inputs"]["leaves"]):
        raise FreezeError(
            f"{len(leaves)} --input files given, the model takes {len(sig['inputs']['leaves'])} "
            f"({', '.join(_manifest.leaf_paths(sig['inputs']['tree']))})",
            code="NBC507",
        )
    out = model(*_manifest.unflatten(sig["inputs"]["tree"], leaves))
    flat = [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]
    names = _manifest.leaf_paths(sig["outputs"]["tree"])
    if args.output is None:
        for name, arr in zip(names, flat, strict=True):
            body = np.array2string(arr, threshold=20, edgeitems=3)
            print(f"{name or 'output'} {arr.dtype}{list(arr.shape)}\n{body}")
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
    print(f"wrote {out} ({out.stat().st_size // 1024} KB, viewable offline)")
    return 0


def _add_render(sub: Any) -> None:
    p = sub.add_parser("render", help="execute a notebook and export HTML with graphs visible offline")
    p.add_argument("notebook", help="the .ipynb file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.html", help="the HTML file")
    p.add_argument("--no-execute", action="store_true", help="export the stored outputs as they are")
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
    try:
        return handler(args)
    except FreezeError as err:
        print(f"nbcompile: {err}", file=sys.stderr)
        return 1
    except (_Refused, OSError) as err:
        print(f"nbcompile: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
