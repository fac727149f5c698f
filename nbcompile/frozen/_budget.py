"""The memory budget a frozen model is loaded and run within.

``load(path, max_bytes=...)`` states the budget; by default it is the memory the operating
system reports as available when ``load`` is called (Linux ``MemAvailable``; elsewhere the
physical memory). Three checks use it, each refusal NBC508 naming both figures:

1. before reading the file: twice its size (the file's bytes and the weights placed on the
   device from them exist at the same time while loading);
2. before compiling: the bytes of the program's outputs at the input shapes of the call;
3. before the first run at each input shape: XLA's memory analysis of the compiled program
   (arguments + outputs + temporaries + generated code - aliased bytes).

The limits that hold whatever the budget (operations, chain, nesting, one array's size,
location text) are ``_program``'s: they protect XLA itself, which aborts or exhausts memory
before any of these figures could be checked.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.units import format_bytes

_HINT = "pass load(path, max_bytes=...) with a larger budget if the machine has room"


def available_memory() -> int | None:
    """Bytes the OS can give this process now without swapping (None if unknown)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def resolve(max_bytes: int | None) -> int | None:
    """The budget in bytes: ``max_bytes`` if given, else the available memory (None: unknown)."""
    if max_bytes is None:
        return available_memory()
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise FreezeError(f"max_bytes must be a positive integer, got {max_bytes!r}", code="NBC508")
    return max_bytes


def array_bytes(shapes: Iterable[tuple[Sequence[int], Any]]) -> int:
    """Total bytes of arrays given as (shape, dtype) pairs (exact integers, no overflow)."""
    return sum(
        math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize for shape, dtype in shapes
    )


def check_outputs(nbytes: int, budget: int | None, where: str) -> None:
    """Refuse (NBC508) a program whose outputs alone exceed the budget."""
    if budget is not None and nbytes > budget:
        raise FreezeError(
            f"the program's outputs {where} take {format_bytes(nbytes)} ({nbytes} bytes), "
            f"above the memory budget of {format_bytes(budget)}",
            code="NBC508",
            hint=_HINT,
        )


def compiled_bytes(compiled: Any) -> int | None:
    """XLA's memory analysis of a compiled program as one figure, None where XLA has none.

    JAX documents the analysis as best effort: None on some backends, an "unimplemented"
    runtime error on others; both mean the figure is unknown (``FrozenModel.memory`` says so).
    """
    try:
        stats = compiled.memory_analysis()
    except (NotImplementedError, RuntimeError):
        return None
    if stats is None:
        return None
    parts = [
        getattr(stats, name, None)
        for name in (
            "argument_size_in_bytes",
            "output_size_in_bytes",
            "temp_size_in_bytes",
            "generated_code_size_in_bytes",
        )
    ]
    if any(p is None or p < 0 for p in parts):
        return None
    alias = getattr(stats, "alias_size_in_bytes", 0) or 0
    return int(sum(parts) - max(alias, 0))


def check_compiled(needed: int | None, budget: int | None, where: str) -> None:
    """Refuse (NBC508) a compiled program whose XLA memory figure exceeds the budget."""
    if budget is not None and needed is not None and needed > budget:
        raise FreezeError(
            f"running the program {where} needs {format_bytes(needed)} ({needed} bytes: XLA's "
            f"memory analysis), above the memory budget of {format_bytes(budget)}",
            code="NBC508",
            hint=_HINT,
        )
