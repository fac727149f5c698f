"""Whether XLA's dump folder holds what XLA meant to write, and why a pass log may be missing.

XLA does not fail a compile it cannot dump: on a full disk it logs ``Could not write XLA debug
data ... No space left on device`` and goes on, leaving empty files and object files cut short
(checked with a 64 KB tmpfs holding 12 KB free, jaxlib 0.10.2), which pyelftools then refused
with a raw ``ELFError: Magic number does not match``. :func:`check_dump` finds such a dump
first and :func:`dump_cut_short` says so with the folder and the fix (NBC610); the program's
executable does not depend on the dump, so the compile itself stands.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from ..errors import TargetError
from ..stages._dump import dump_unwritable, free_space, move_dump_hint

__all__ = [
    "ELF_MACHINES",
    "check_dump",
    "dump_cut_short",
    "dump_unwritable",
    "elf_functions",
    "no_passes_reason",
    "whole_elf",
]

#: a file holding the whole module as text: a pass step (``.0014.<pipeline>...``), the module
#: before and after optimisations
_STEP_OR_MODULE = re.compile(
    r"^module_\d+\..+\.(?:\d{4,}\..+|before_optimizations|(?:\w+_)?after_optimizations)\.txt$"
)
#: the XLA_FLAGS words that shape XLA's dump (named when a dump holds no passes)
_DUMP_FLAG = re.compile(r"--xla_dump_[a-z_]+(?:=\S*)?")


def _section_table(blob: bytes) -> tuple[str, bool, list[tuple[int, int, int, int, int]]] | None:
    """(byte order, ELF64, [(type, offset, size, link, entry size)] of every section) of ELF
    object ``blob``, read from the ELF header's fixed fields (ELF64 and ELF32, either byte
    order) with ``struct``; None where it is no ELF or its section table runs past its end."""
    if len(blob) < 52 or blob[:4] != b"\x7fELF" or blob[4] not in (1, 2) or blob[5] not in (1, 2):
        return None
    wide, order = blob[4] == 2, "<" if blob[5] == 1 else ">"
    try:
        if wide:
            shoff, shentsize, shnum = struct.unpack_from(order + "Q10xHH", blob, 0x28)
            fields, layout = struct.Struct(order + "4xI16xQQIIQQ"), 64
        else:
            shoff, shentsize, shnum = struct.unpack_from(order + "I10xHH", blob, 0x20)
            fields, layout = struct.Struct(order + "4xI8xIIIIII"), 40
        if shnum and (shentsize < layout or shoff + shnum * shentsize > len(blob)):
            return None
        table = []
        for i in range(shnum):
            kind, offset, size, link, _info, _align, entsize = fields.unpack_from(
                blob, shoff + i * shentsize
            )
            table.append((kind, offset, size, link, entsize))
    except struct.error:
        return None
    return order, wide, table


def whole_elf(blob: bytes) -> bool:
    """Whether ``blob`` is a complete ELF object: its magic, its header, and its section table
    and every section's bytes within its length (:func:`_section_table`: importing pyelftools
    for this took longer, ~0.15 s, than a small program's whole dumped compile takes to
    read)."""
    found = _section_table(blob)
    if found is None:
        return False
    # SHT_NOBITS (8, .bss) has no bytes in the file
    return all(kind == 8 or offset + size <= len(blob) for kind, offset, size, *_ in found[2])


#: ``e_machine`` values of the ISAs kernel code is disassembled for
ELF_MACHINES = {62: "EM_X86_64", 183: "EM_AARCH64"}


def elf_functions(blob: bytes) -> tuple[str, list[tuple[str, int, int, int]]]:
    """(``e_machine`` as pyelftools names it, [(name, offset in ``blob``, value, size)] of
    every function ``blob`` defines): its ``.symtab`` entries of type ``STT_FUNC`` with a
    section, each at its section's offset. Read with ``struct`` from the ELF64/ELF32 symbol
    layout: pyelftools took ~3 ms an object for this (0.18 s for a 12-layer train step's 59
    objects), this ~0.1 ms. A malformed object defines nothing (``ValueError``)."""
    found = _section_table(blob)
    if found is None:
        raise ValueError("not a whole ELF object")
    order, wide, table = found
    machine = struct.unpack_from(order + "H", blob, 18)[0]
    # Elf64_Sym: name, info, other, shndx, value, size; Elf32_Sym: name, value, size, info,
    # other, shndx
    sym = struct.Struct(order + ("IBBHQQ" if wide else "IIIBBH"))
    out = []
    for kind, offset, size, link, entsize in table:
        if kind != 2 or link >= len(table) or entsize < sym.size:  # SHT_SYMTAB
            continue
        _k, names_at, names_size, *_ = table[link]
        names = blob[names_at : names_at + names_size]
        end = min(offset + size, len(blob))
        for at in range(offset, end - sym.size + 1, entsize):
            if wide:
                name, info, _other, shndx, value, length = sym.unpack_from(blob, at)
            else:
                name, value, length, info, _other, shndx = sym.unpack_from(blob, at)
            # STT_FUNC, defined (not SHN_UNDEF nor a reserved index)
            if info & 0xF != 2 or shndx == 0 or shndx >= len(table):
                continue
            stop = names.find(b"\0", name)
            text = names[name : stop if stop >= 0 else len(names)].decode("utf-8", "replace")
            out.append((text, table[shndx][1], value, length))
    return ELF_MACHINES.get(machine, f"EM_{machine}"), out


def _ends_a_module(path: Path) -> bool:
    """Whether HLO module text file ``path`` ends as a module does (its last computation's
    closing brace): a file cut short by a full disk does not."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(size - 64, 0))
        return f.read().rstrip().endswith(b"}")


def check_dump(root: Path, objects: dict[str, bytes]) -> list[str]:
    """The names of the files in dump folder ``root`` that XLA did not write whole: empty ones
    (XLA:GPU's PTX of a module with no kernel excepted), HLO module texts that stop before
    their last ``}``, object files (``objects``, read already) that are not whole ELF."""
    damaged = []
    for path in sorted(root.iterdir()):
        if not path.is_file() or path.suffix == ".ptx":
            continue
        empty = path.stat().st_size == 0
        if empty or (_STEP_OR_MODULE.match(path.name) and not _ends_a_module(path)):
            damaged.append(path.name)
    damaged += [name for name, blob in objects.items() if blob and not whole_elf(blob)]
    return list(dict.fromkeys(damaged))


def dump_cut_short(root: Path, damaged: list[str]) -> TargetError:
    """NBC610: XLA's dump in ``root`` is cut short (``damaged`` files): names the folder, the
    free space on its disk and the fix."""
    first = damaged[0] if len(damaged[0]) <= 100 else damaged[0][:97] + "..."
    return TargetError(
        f"XLA's dump of this compile in {root} is cut short: {len(damaged)} of its files are "
        f"empty or incomplete (the first: {first}); {free_space(root.parent)} free on that disk, "
        "which is likely full",
        code="NBC610",
        hint=move_dump_hint(str(root.parent)),
    )


def no_passes_reason(root: Path) -> str:
    """Why dump folder ``root`` holds no pass log: what is there, and the dump flags of
    ``XLA_FLAGS`` (nbcompile's own dump options override them, see _compat.xla_dump_options)."""
    files = [p.name for p in root.iterdir() if p.is_file()]
    flags = _DUMP_FLAG.findall(os.environ.get("XLA_FLAGS", ""))
    said = f"; XLA_FLAGS sets {' '.join(flags)[:300]}" if flags else ""
    return (
        f"XLA wrote no pass files (module_*.NNNN.<pipeline>.after_<pass>.txt) in this compile's "
        f"dump ({len(files)} other files){said}: this XLA did not dump its passes with "
        "xla_dump_hlo_pass_re=.*, so c.passes is None; c.hlo is the optimised program"
    )
