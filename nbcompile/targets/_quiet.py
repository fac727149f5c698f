"""Capture what native libraries (libtpu, XLA) print on file descriptor 2 around one call.

libtpu writes warnings about TPU_ACCELERATOR_TYPE / TPU_WORKER_HOSTNAMES straight to fd 2 from
C++ on a machine without a TPU; they would land in the notebook as noise. We point fd 2 at a
temporary file for the call and always put the original back, so the text can be shown on
failure instead.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Captured", "captured_stderr"]


class Captured:
    """What was written to fd 2 while the block ran (``text``, filled in on exit)."""

    text: str = ""


@contextmanager
def captured_stderr() -> Iterator[Captured]:
    """Redirect fd 2 to a temporary file for the block; restore it even on error."""
    captured = Captured()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2 (embedded interpreters): nothing to hide
        yield captured
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", errors="replace")
