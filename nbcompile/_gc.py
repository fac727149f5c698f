"""The cyclic garbage collector paused while nbcompile builds large object graphs.

Tracing and lowering a model, and analysing it, allocate 10^5-10^6 small objects that live until
the stage ends and are then freed by reference counting (measured on the GPT-2 small train step:
no cyclic garbage at all per ``%%compile`` re-run). While they live, the collector runs many
young collections over them and promotes them, and the promotions trigger a full collection of
the whole heap (JAX's included): ~300 ms on that model, paid by whichever cell crosses the
threshold. Paused, the objects are gone by the time the collector runs again, so those
collections are not shifted to a later cell: they do not happen. Garbage in cycles made meanwhile
is collected at the next collection after the stage, as it would have been a little earlier.

The pause is shared between threads (the collector's switch is the process's): the analysis
work done beside XLA's compile pauses it in its thread while the compiling thread may pause
it too, so the first pause in records whether the collector was on and the last one out puts
it back.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["paused"]

_LOCK = threading.Lock()
_HELD = [0, False]  # pauses under way, whether the collector was on when the first began


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Automatic collection off for the body, back as it was after (also when the body raises;
    a caller that had it off keeps it off). Nested and concurrent pauses (other threads) end
    with the last one."""
    with _LOCK:
        if _HELD[0] == 0:
            _HELD[1] = gc.isenabled()
            gc.disable()
        _HELD[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _HELD[0] -= 1
            if _HELD[0] == 0 and _HELD[1]:
                gc.enable()
