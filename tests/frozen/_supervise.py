"""Run untrusted-file work in a child process with a time and memory limit per item.

The child (a worker script) prints one line per item: ``START <id>`` before it begins and
``DONE <id> <json>`` when it finishes. The supervisor kills the child when an item runs past
its time limit or the child's resident memory passes the limit, records that item as
``hang`` / ``memory`` (or ``signal N`` when the child died by a signal, ``exit N`` when it
exited), and starts a new child at the next item. Everything else is the worker's own
outcome for the item.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _env() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1]), str(HERE)])
    return env


def run(
    worker: str,
    ids: Sequence[str],
    args: Sequence[str],
    *,
    item_seconds: float,
    memory_bytes: int,
    startup_seconds: float = 60.0,
) -> dict[str, Any]:
    """Run ``worker`` over ``ids`` (passed as ``--from INDEX`` after ``args``); outcomes by id."""
    outcomes: dict[str, Any] = {}
    start = 0
    while start < len(ids):
        proc = subprocess.Popen(
            [sys.executable, str(HERE / worker), *args, "--from", str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_env(),
            cwd=HERE.parents[1],
        )
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        buffer = b""
        current: str | None = None
        deadline = time.monotonic() + startup_seconds + item_seconds
        killed: str | None = None
        peak = 0
        while True:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    line = raw.decode("utf-8", "replace")
                    if line.startswith("START "):
                        current = line[6:]
                        deadline = time.monotonic() + item_seconds
                        peak = 0
                    elif line.startswith("DONE "):
                        name, _, payload = line[5:].partition(" ")
                        outcomes[name] = {**json.loads(payload), "peak_rss": peak}
                        current = None
            rss = _rss_bytes(proc.pid)
            peak = max(peak, rss)
            if rss > memory_bytes:
                killed = "memory"
            elif time.monotonic() > deadline:
                killed = "hang"
            if killed:
                proc.send_signal(signal.SIGKILL)
                break
        code = proc.wait()
        proc.stdout.close()
        if current is None and killed is None and code == 0:
            break  # the worker finished every item from ``start``
        if current is None:  # died between items (start-up): report on the next item
            current = ids[start] if start < len(ids) and ids[start] not in outcomes else None
            if current is None:
                break
        if killed:
            outcome = killed
        elif code < 0:
            outcome = f"signal {-code}"
        else:
            outcome = f"exit {code}"
        outcomes[current] = {"outcome": outcome, "peak_rss": peak}
        start = ids.index(current) + 1
    return outcomes
