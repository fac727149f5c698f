"""The folder XLA dumps one compile into (``--passes``), and NBC610 when none can be made.

Here, not in ``measure/`` (which reads the dump), because the stage that compiles makes the
folder: a compile never imports the layers that analyse it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..errors import TargetError

__all__ = ["dump_unwritable", "free_space", "move_dump_hint"]


def free_space(folder: Path | str) -> str:
    """The free space on ``folder``'s disk, for a person ("812 KB", "3,204 MB")."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return "unknown space"
    return f"{free / 1024:,.0f} KB" if free < 10 * 2**20 else f"{free / 2**20:,.0f} MB"


def move_dump_hint(parent: str) -> str:
    """The fix for a dump that could not be written under ``parent``."""
    return (
        f"free space under {parent}, or have XLA dump elsewhere: import tempfile; "
        "tempfile.tempdir = '/a/folder/with/room' (or set TMPDIR before starting Python); "
        "then read c.passes again. The program itself compiled and runs without the dump"
    )


def dump_unwritable(error: OSError) -> TargetError:
    """NBC610: the folder for XLA's dump could not be made (``error``), e.g. a full disk."""
    parent = tempfile.gettempdir()
    return TargetError(
        f"no folder for XLA's dump could be made in {parent} ({error.strerror or error}); "
        f"{free_space(parent)} free there",
        code="NBC610",
        hint=move_dump_hint(parent),
    )
