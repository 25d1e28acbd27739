"""Read the CO-RE relocations of a BPF object (.BTF and .BTF.ext), by name.

Each relocation is what libbpf will fix up at load time: an instruction, its
kind, and the access it stands for, spelled with type and member names
(``user_pt_regs.regs[5]``), so objects built against different headers can be
compared. Members without a name (anonymous structs and unions) are left out
of the spelling: libbpf looks through them when it matches by name.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from gpuscope.platform.elf import ElfFile

# enum bpf_core_relo_kind (include/uapi/linux/bpf.h)
KINDS = [
    "field_byte_offset",
    "field_byte_size",
    "field_exists",
    "field_signed",
    "field_lshift_u64",
    "field_rshift_u64",
    "type_id_local",
    "type_id_target",
    "type_exists",
    "type_size",
    "enumval_exists",
    "enumval_value",
    "type_matches",
]
_INT, _PTR, _ARRAY, _STRUCT, _UNION, _ENUM, _FWD, _TYPEDEF, _VOLATILE, _CONST, _RESTRICT = range(1, 12)
_FUNC, _FUNC_PROTO, _VAR, _DATASEC, _FLOAT, _DECL_TAG, _TYPE_TAG, _ENUM64 = range(12, 20)
# bytes after the common 12-byte header: fixed, or per vlen entry
_FIXED = {_INT: 4, _ARRAY: 12, _VAR: 4, _DECL_TAG: 4}
_PER_ENTRY = {_STRUCT: 12, _UNION: 12, _ENUM: 8, _FUNC_PROTO: 8, _DATASEC: 12, _ENUM64: 12}


@dataclass(frozen=True)
class BtfType:
    kind: int
    name: str
    ref: int  # size or referenced type id
    members: tuple[tuple[str, int], ...] = ()  # (name, type) of struct/union members, enumerator names
    elem: int = 0  # array element type


@dataclass(frozen=True)
class Relocation:
    section: str
    insn_off: int
    kind: str
    access: str  # e.g. "user_pt_regs.regs[5]", "enum cgroup_subsys_id::memory_cgrp_id"


def _read(path: Path, name: str) -> bytes:
    with ElfFile(str(path)) as elf:
        sec = elf.section(name)
        if sec is None:
            raise ValueError(f"{path}: no {name} section")
        return elf.read(sec.offset, sec.size)


def _types(btf: bytes) -> tuple[dict[int, BtfType], bytes]:
    magic, _ver, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<HBBIIIII", btf)
    if magic != 0xEB9F:
        raise ValueError("not BTF")
    strings = btf[hdr_len + str_off : hdr_len + str_off + str_len]

    def name(off: int) -> str:
        return strings[off : strings.index(b"\0", off)].decode()

    types: dict[int, BtfType] = {}
    pos, end, tid = hdr_len + type_off, hdr_len + type_off + type_len, 1
    while pos < end:
        name_off, info, ref = struct.unpack_from("<III", btf, pos)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        pos += 12
        members: list[tuple[str, int]] = []
        elem = 0
        if kind in (_STRUCT, _UNION):
            for i in range(vlen):
                m_name, m_type, _off = struct.unpack_from("<III", btf, pos + 12 * i)
                members.append((name(m_name), m_type))
        elif kind in (_ENUM, _ENUM64):
            size = _PER_ENTRY[kind]
            members = [(name(struct.unpack_from("<I", btf, pos + size * i)[0]), 0) for i in range(vlen)]
        elif kind == _ARRAY:
            elem = struct.unpack_from("<I", btf, pos)[0]
        pos += _FIXED.get(kind, 0) + _PER_ENTRY.get(kind, 0) * vlen
        types[tid] = BtfType(kind, name(name_off), ref, tuple(members), elem)
        tid += 1
    return types, strings


def _skip_mods(types: dict[int, BtfType], tid: int) -> int:
    while types[tid].kind in (_TYPEDEF, _VOLATILE, _CONST, _RESTRICT, _TYPE_TAG):
        tid = types[tid].ref
    return tid


def _spell(types: dict[int, BtfType], root: int, kind: str, access: list[int]) -> str:
    t = types[root]
    if kind.startswith("enumval"):
        return f"enum {t.name}::{t.members[access[0]][0]}"
    if not kind.startswith("field"):
        return t.name
    tid = _skip_mods(types, root)
    out = types[tid].name or "(anonymous)"
    if access[0]:
        out += f"[{access[0]}]"
    for idx in access[1:]:
        cur = types[tid]
        if cur.kind == _ARRAY:
            out += f"[{idx}]"
            tid = _skip_mods(types, cur.elem)
        else:
            m_name, m_type = cur.members[idx]
            if m_name:
                out += f".{m_name}"
            tid = _skip_mods(types, m_type)
    return out


def core_relocations(path: Path) -> list[Relocation]:
    """Every CO-RE relocation in the object at ``path``, in file order."""
    types, strings = _types(_read(path, ".BTF"))
    ext = _read(path, ".BTF.ext")
    _magic, _ver, _flags, hdr_len = struct.unpack_from("<HBBI", ext)
    if hdr_len < 32:
        return []
    core_off, core_len = struct.unpack_from("<II", ext, 24)
    pos = hdr_len + core_off
    end = pos + core_len
    rec_size = struct.unpack_from("<I", ext, pos)[0]
    pos += 4

    def string(off: int) -> str:
        return strings[off : strings.index(b"\0", off)].decode()

    out: list[Relocation] = []
    while pos < end:
        sec_off, n = struct.unpack_from("<II", ext, pos)
        pos += 8
        for _ in range(n):
            insn_off, type_id, access_off, kind_no = struct.unpack_from("<IIII", ext, pos)
            pos += rec_size
            kind = KINDS[kind_no]
            access = [int(a) for a in string(access_off).split(":")]
            out.append(Relocation(string(sec_off), insn_off, kind, _spell(types, type_id, kind, access)))
    return out


def e_machine(path: Path) -> int:
    """The ELF header's e_machine: 62 x86-64, 183 AArch64, 247 BPF."""
    return int(struct.unpack_from("<H", path.read_bytes()[:20], 18)[0])
