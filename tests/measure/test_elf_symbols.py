"""The kernels' symbols read from XLA:CPU's objects with ``struct`` (``_dump_check.elf_functions``)
agree with pyelftools, on a real dump and on hand-made objects of the other layouts (ELF32,
big-endian), and a lying object defines nothing instead of failing the look-up."""

from __future__ import annotations

import io
import struct

import pytest

from nbcompile.measure._dump_check import ELF_MACHINES, elf_functions, whole_elf


def _pyelftools(blob: bytes) -> tuple[str, list[tuple[str, int, int, int]]]:
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(blob))
    out = []
    for symbol in elf.get_section_by_name(".symtab").iter_symbols():
        if symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_shndx"] != "SHN_UNDEF":
            section = elf.get_section(symbol["st_shndx"])
            out.append((symbol.name, section["sh_offset"], symbol["st_value"], symbol["st_size"]))
    return elf.header["e_machine"], out


def _object(wide: bool, order: str, machine: int) -> bytes:
    """A relocatable ELF object: .text holding two functions, a symbol table with a file
    symbol, an undefined function, an object and the two functions, its string tables."""
    text = bytes(range(48))
    names = b"\0kernel_a\0fusion_3\0extern_fn\0table\0x.c\0"

    def at(name: bytes) -> int:
        return names.index(name + b"\0")

    # (name, info, shndx, value, size): STT_FILE 4, STT_FUNC 2 (GLOBAL 0x10), STT_OBJECT 1
    symbols = [
        (0, 0, 0, 0, 0),
        (at(b"x.c"), 4, 0xFFF1, 0, 0),
        (at(b"kernel_a"), 0x12, 1, 0, 16),
        (at(b"fusion_3"), 0x12, 1, 16, 24),
        (at(b"extern_fn"), 0x12, 0, 0, 0),
        (at(b"table"), 0x11, 1, 40, 8),
    ]
    if wide:
        sym = struct.Struct(order + "IBBHQQ")
        symtab = b"".join(sym.pack(n, i, 0, s, v, z) for n, i, s, v, z in symbols)
    else:
        sym = struct.Struct(order + "IIIBBH")
        symtab = b"".join(sym.pack(n, v, z, i, 0, s) for n, i, s, v, z in symbols)
    shnames = b"\0.text\0.symtab\0.strtab\0.shstrtab\0"
    ehsize, shentsize = (64, 64) if wide else (52, 40)
    body = bytearray(b"\0" * ehsize)
    offsets = []
    for blob in (text, symtab, names, shnames):
        offsets.append(len(body))
        body += blob
        body += b"\0" * (-len(body) % 8)
    shoff = len(body)
    sections = [
        (0, 0, 0, 0, 0, 0, 0),
        (shnames.index(b".text"), 1, offsets[0], len(text), 0, 0, 0),
        (shnames.index(b".symtab"), 2, offsets[1], len(symtab), 3, 2, sym.size),
        (shnames.index(b".strtab"), 3, offsets[2], len(names), 0, 0, 0),
        (shnames.index(b".shstrtab"), 3, offsets[3], len(shnames), 0, 0, 0),
    ]
    for name, kind, offset, size, link, info, entsize in sections:
        if wide:
            body += struct.pack(
                order + "IIQQQQIIQQ", name, kind, 0, 0, offset, size, link, info, 1, entsize
            )
        else:
            body += struct.pack(
                order + "IIIIIIIIII", name, kind, 0, 0, offset, size, link, info, 1, entsize
            )
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if order == "<" else 2, 1]) + b"\0" * 9
    if wide:
        header = struct.pack(
            order + "HHIQQQIHHHHHH",
            1,
            machine,
            1,
            0,
            0,
            shoff,
            0,
            ehsize,
            0,
            0,
            shentsize,
            len(sections),
            4,
        )
    else:
        header = struct.pack(
            order + "HHIIIIIHHHHHH",
            1,
            machine,
            1,
            0,
            0,
            shoff,
            0,
            ehsize,
            0,
            0,
            shentsize,
            len(sections),
            4,
        )
    body[:ehsize] = ident + header
    return bytes(body)


@pytest.mark.parametrize(
    ("wide", "order", "machine"),
    [(True, "<", 62), (True, ">", 183), (False, "<", 62), (False, ">", 40)],
    ids=["elf64-le-x86", "elf64-be-aarch64", "elf32-le", "elf32-be-arm"],
)
def test_hand_made_objects_read_as_pyelftools_reads_them(
    wide: bool, order: str, machine: int
) -> None:
    blob = _object(wide, order, machine)
    assert whole_elf(blob)
    got, want = elf_functions(blob), _pyelftools(blob)
    assert got[1] == want[1]
    # the ISAs disassembled are named as pyelftools names them; another is its number
    assert got[0] == (want[0] if machine in ELF_MACHINES else f"EM_{machine}")
    assert [name for name, *_ in got[1]] == ["kernel_a", "fusion_3"]  # not the undefined one


def test_a_real_dumps_objects_read_as_pyelftools_reads_them() -> None:
    import jax.numpy as jnp

    import nbcompile
    from nbcompile.measure import metal

    def f(x, w):
        return jnp.tanh(x @ w).sum(axis=0) * 2.0

    c = nbcompile.compile(f, jnp.ones((16, 32)), jnp.ones((32, 8)), passes=True)
    dump = c._metal_dump()
    assert dump.objects
    for blob in dump.objects.values():
        assert elf_functions(blob) == _pyelftools(blob)
    index = metal._function_index(dump)
    assert index, "no function found in XLA's objects"
    machine, blob, at, _address, size = next(iter(index.values()))
    assert machine in ("EM_X86_64", "EM_AARCH64") and size > 0 and blob[at : at + size]


@pytest.mark.parametrize(
    "lie",
    ["symtab link past the table", "name past the strings", "symbols past the end", "cut short"],
)
def test_a_lying_object_defines_nothing_or_is_refused_not_a_crash(lie: str) -> None:
    blob = bytearray(_object(True, "<", 62))
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    symtab_header = shoff + 2 * 64
    if lie == "symtab link past the table":
        struct.pack_into("<I", blob, symtab_header + 40, 99)
    elif lie == "name past the strings":
        offset = struct.unpack_from("<Q", blob, symtab_header + 24)[0]
        struct.pack_into("<I", blob, offset + 2 * 24, 10**6)  # kernel_a's name
    elif lie == "symbols past the end":
        struct.pack_into("<Q", blob, symtab_header + 32, 10**9)
    else:
        blob = blob[: len(blob) // 2]
    try:
        machine, functions = elf_functions(bytes(blob))
    except ValueError:
        return  # refused as not whole: the index skips it
    assert machine == "EM_X86_64"
    for name, *_ in functions:
        assert isinstance(name, str)
