"""What a compile across JAX processes shows: on process 0 the processes, their hosts and
devices, the collectives that cross processes and, after ``--profile``, every process's profile
side by side; one line on every other process.

The view travels from an ipyparallel engine to the notebook as display data, where the engine's
widgets cannot follow (their comms end at the engine), so process 0 shows the self-contained
HTML view and its text.
"""

from __future__ import annotations

from typing import Any

import jax

from ..analysis.namestack import shown
from ._agree import program_devices

__all__ = ["one_line", "processes_view"]


def _op_name(op_name: str | None) -> str | None:
    """An op_name with each absurdly long scope cut (``analysis.namestack.shown``)."""
    return "/".join(shown(part) for part in op_name.split("/")) if op_name else op_name


def processes_view(comp: Any) -> dict[str, Any] | None:
    """The view's ``processes`` entry on process 0 (JSON-ready, with ``text``); None with one
    process."""
    infos = comp.processes
    if not infos:
        return None
    lines = [f"processes: {len(infos)}, one program (fingerprint {infos[0].fingerprint[:12]})"]
    for p in infos:
        lines.append(f"  process {p.index} on {p.host}: {', '.join(p.devices)}")
    devices = program_devices(comp)
    owner = [d.process_index for d in devices]
    crossing = []
    for c in comp.collectives:
        if c.get("crosses_processes"):
            groups = c["groups"] or [range(len(owner))]
            procs = sorted({owner[i] for g in groups for i in g if i < len(owner)})
            crossing.append(c)
            lines.append(
                f"  collective {c['op']} ({_op_name(c.get('op_name')) or c['name']}): "
                f"{c['bytes']} bytes "
                f"per device, crosses processes {', '.join(map(str, procs))}"
            )
    if not crossing:
        lines.append("  no collective crosses processes")
    out: dict[str, Any] = {
        "processes": [p.to_json() for p in infos],
        "crossing": [c["name"] for c in crossing],
    }
    profiles = getattr(comp.profile, "processes", None)  # --profile on every process
    if profiles is not None:
        out["profiles"] = profiles.to_json()
        lines.extend(profiles.text().splitlines())
    return {**out, "text": "\n".join(lines)}


def one_line(comp: Any) -> str | None:
    """What a process other than 0 shows (the view is on process 0); None on process 0."""
    infos = comp.processes
    me = jax.process_index()
    if not infos or me == 0:
        return None
    return (
        f"{comp.name}: compiled on process {me} of {len(infos)}, the same program as "
        f"process 0 (fingerprint {infos[me].fingerprint[:12]}); the view is on process 0"
    )
