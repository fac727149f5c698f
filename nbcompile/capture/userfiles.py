"""Which source files are the user's: notebook cells and their own modules, not libraries.

Used wherever nbcompile must tell the user's code from library code: the call capture groups by
the user's functions, and source locations prefer the nearest frame in user code over a frame
inside Flax, Equinox, Keras or JAX. Code with no file of its own is the user's too when typed at
a Python prompt (``<stdin>``, Python 3.13's ``<python-input-0>``, IDLE's ``<pyshell#3>``), given
to ``python -c`` or ``exec``'d (``<string>``); not the code Python's own modules generate under
those names (dataclasses' ``__init__``, namedtuples' ``__new__``), nor other ``<...>`` names
(``<frozen ...>``).
"""

from __future__ import annotations

import functools
import os
import re
import site
import sys
import sysconfig
from typing import Any

__all__ = ["is_user_code", "is_user_file"]

# IPython / ipykernel cell files: "<ipython-input-3-abc>" and ".../ipykernel_123/abc.py".
_CELL = re.compile(r"(?:^<ipython-input-\d+-\w+>$|ipykernel_\d+[/\\]\w+\.py$)")
# code typed or passed as a string: the prompt, python -c, exec
_TYPED = re.compile(r"^<(?:stdin|string|console|input|python-input-\d+|pyshell#\d+)>$")
# code Python's standard library generates under those names: dataclasses' methods, and
# namedtuples' ``__new__`` (``lambda _cls, a, b: _tuple_new(_cls, (a, b))``, eval'd: JAX makes
# thousands of namedtuples while tracing, each a call the recorder would otherwise watch)
_GENERATED = "__create_fn__."
_NAMEDTUPLE_NEW = ("_tuple_new",)  # the only global a namedtuple's ``__new__`` reads


def _install_folders(entries: tuple[str, ...]) -> set[str]:
    """``sys.path`` entries that hold installed distributions (``*.dist-info``): ``pip install
    --target`` folders, ``PYTHONPATH`` site folders, .pth-added site directories — library code
    wherever it was installed. (Not ``*.egg-info``: a setuptools editable install leaves one in
    the user's own project folder, which is user code.)"""
    found = set()
    for entry in entries:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        if any(n.endswith(".dist-info") for n in names):
            found.add(entry)
    return found


@functools.lru_cache(maxsize=8)
def _library_roots(entries: tuple[str, ...]) -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
    roots |= _install_folders(entries)
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # nbcompile itself
    return tuple(sorted(os.path.join(os.path.abspath(r), "") for r in roots if r))


@functools.lru_cache(maxsize=4096)
def is_user_file(filename: str | None) -> bool:
    """True for cell files and for files outside Python's library folders and nbcompile."""
    if not filename:
        return False
    if _CELL.search(filename):
        return True
    if filename.startswith("<"):  # <frozen ...>; <string>, <stdin>: see is_user_code
        return bool(_TYPED.match(filename))
    if re.search(r"[/\\](?:site|dist)-packages[/\\]", filename):
        return False
    path = os.path.join(os.path.abspath(filename), "")
    return not any(path.startswith(root) for root in _library_roots(tuple(sys.path)))


def is_user_code(code: Any) -> bool:
    """:func:`is_user_file` for a code object, less what Python generates as ``<string>``."""
    if not is_user_file(code.co_filename):
        return False
    if not code.co_filename.startswith("<"):
        return True
    qualname = code.co_qualname
    if qualname.startswith(_GENERATED):
        return False
    return not (qualname == "<lambda>" and code.co_names == _NAMEDTUPLE_NEW)
