"""The Python mirrors of bpf/include/events.h match what the C compiler lays out.

The header is read for every struct, enum and ``GS_*`` constant it defines; a
tiny C program compiled against it prints each size, offset and value, and
every one of them is compared with its Python mirror. A definition added to
the header without a mirror listed here fails the first test, so the check
cannot go stale.
"""

from __future__ import annotations

import enum
import re
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gpuscope.agent.tracer import LibState, Tracer
from gpuscope.bpf.wire import (
    AUX_HEADER_DTYPE,
    AUX_PAYLOAD,
    CODE_FILE,
    CODE_LINETABLE,
    CODE_NAME,
    COOKIE_CALIBRATE,
    COOKIE_SAMPLED,
    COOKIE_STEPPED,
    EVENT_DTYPE,
    LOAD_EVENT_DTYPE,
    LOAD_NAME,
    NATIVE_FRAME_DTYPE,
    PY_CODE_DTYPE,
    PY_CODE_UNDESCRIBED,
    PY_FRAME_DTYPE,
    PY_LIB_SHIFT,
    PY_MAX_LIBS,
    PY_OFFSETS_FIELDS,
    PY_SLOT_SHIFT,
    RECORD_DTYPE,
    RECORD_SIZE,
    RING_HEADER,
    STACK_HEADER_DTYPE,
    STACK_MAX_NATIVE,
    STACK_MAX_PY,
    STACK_OP_CODE,
    STACK_OP_CPU_SAMPLE,
    STAT_SLOTS,
    TASK_COMM_LEN,
    AuxKind,
    CodeFlag,
    Flag,
    HoldKind,
    PyStatus,
    Stat,
)
from gpuscope.model.ops import Op
from gpuscope.stacks.python import LAYOUTS, PyLayout
from gpuscope.stacks.python_files import PythonLibrary

ROOT = Path(__file__).resolve().parents[3]
HEADER = ROOT / "bpf" / "include" / "events.h"

# Records user space reads: each C struct and the numpy dtype that decodes it.
DTYPE_MIRRORS: dict[str, np.dtype] = {
    "gs_event": EVENT_DTYPE,
    "gs_aux_header": AUX_HEADER_DTYPE,
    "gs_stack_header": STACK_HEADER_DTYPE,
    "gs_native_frame": NATIVE_FRAME_DTYPE,
    "gs_py_frame": PY_FRAME_DTYPE,
    "gs_load_event": LOAD_EVENT_DTYPE,
    "gs_py_code": PY_CODE_DTYPE,
}
# Map values user space writes with struct.pack: checked by unpacking what it writes.
PACKED_MIRRORS = {
    "gs_py_offsets": "gpuscope.stacks.python.PyLayout.pack",
    "gs_py_proc": "gpuscope.agent.tracer.Tracer.set_python_process",
    "gs_py_exe_key": "gpuscope.agent.tracer.Tracer.set_python_exe",
    "gs_py_exe": "gpuscope.agent.tracer.Tracer.set_python_exe",
    "gs_lib_key": "gpuscope.agent.tracer.Tracer.mark_library",
    "gs_py_lib": "gpuscope.agent.tracer.Tracer.attach_python_library",
}
ENUM_MIRRORS: dict[str, tuple[str, type[enum.Enum]]] = {
    "gs_op": ("GS_OP_", Op),
    "gs_flag": ("GS_FLAG_", Flag),
    "gs_stat": ("GS_STAT_", Stat),
    "gs_aux_kind": ("GS_AUX_", AuxKind),
    "gs_py_status": ("GS_PY_", PyStatus),
    "gs_hold_kind": ("GS_HOLD_", HoldKind),
    "gs_lib_state": ("GS_LIB_", LibState),
    "gs_code_flag": ("GS_CODE_", CodeFlag),
}
# Enum members that bound the enum instead of naming a value a record carries.
ENUM_BOUNDS = {"GS_OP_MAX", "GS_STAT_MAX"}
CONSTANT_MIRRORS = {
    "GS_TASK_COMM_LEN": TASK_COMM_LEN,
    "GS_AUX_PAYLOAD": AUX_PAYLOAD,
    "GS_STACK_MAX_NATIVE": STACK_MAX_NATIVE,
    "GS_STACK_MAX_PY": STACK_MAX_PY,
    "GS_LOAD_NAME": LOAD_NAME,
    "GS_STACK_OP_CODE": STACK_OP_CODE,
    "GS_STACK_OP_CPU_SAMPLE": STACK_OP_CPU_SAMPLE,
    "GS_CODE_NAME": CODE_NAME,
    "GS_CODE_FILE": CODE_FILE,
    "GS_CODE_LINETABLE": CODE_LINETABLE,
    "GS_COOKIE_SAMPLED": COOKIE_SAMPLED,
    "GS_COOKIE_CALIBRATE": COOKIE_CALIBRATE,
    "GS_COOKIE_STEPPED": COOKIE_STEPPED,
    "GS_PY_SLOT_SHIFT": PY_SLOT_SHIFT,
    "GS_PY_CODE_UNDESCRIBED": PY_CODE_UNDESCRIBED,
    "GS_PY_MAX_LIBS": PY_MAX_LIBS,
    "GS_PY_LIB_SHIFT": PY_LIB_SHIFT,
}
# Bounds only the BPF side uses: user space takes each record's length from the record itself.
KERNEL_ONLY_CONSTANTS = {"GS_AUX_ENV_PAYLOAD", "GS_STACK_WINDOW"}

_DECLARATION = re.compile(r"(?P<type>__[us](?:8|16|32|64)|char)\s+(?P<name>\w+)(?:\[(?P<count>\w+)\])?")


@dataclass(frozen=True, slots=True)
class CField:
    name: str
    ctype: str
    count: str | None  # array length as written (a number or a GS_* constant)


@dataclass(frozen=True, slots=True)
class Header:
    """The definitions of events.h, as written in its text."""

    structs: dict[str, tuple[CField, ...]]
    enums: dict[str, tuple[str, ...]]
    constants: tuple[str, ...]


@dataclass
class Layout:
    """What the C compiler makes of the header."""

    sizeof: dict[str, int] = field(default_factory=dict)
    fields: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)  # struct -> {field: (offset, size)}
    values: dict[str, int] = field(default_factory=dict)  # enum members and constants


def _parse_header() -> Header:
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", HEADER.read_text(), flags=re.S)
    structs: dict[str, tuple[CField, ...]] = {}
    enums: dict[str, tuple[str, ...]] = {}
    for kind, name, body in re.findall(r"\b(struct|union|enum)\s+(\w+)\s*\{(.*?)\}\s*;", text, re.S):
        if kind == "enum":
            items = [item.strip() for item in body.split(",") if item.strip()]
            enums[name] = tuple(item.split("=")[0].strip() for item in items)
            continue
        assert kind == "struct", f"events.h: {kind} {name}: the wire contract uses plain structs only"
        declarations = [d.strip() for d in body.split(";") if d.strip()]
        parsed = [_DECLARATION.fullmatch(d) for d in declarations]
        unreadable = [d for d, m in zip(declarations, parsed, strict=True) if m is None]
        assert not unreadable, f"struct {name}: declarations this test cannot read: {unreadable}"
        structs[name] = tuple(CField(m["name"], m["type"], m["count"]) for m in parsed if m is not None)
    constants = tuple(re.findall(r"^#define\s+(GS_\w+)\s+\S", text, re.M))
    return Header(structs, enums, constants)


@pytest.fixture(scope="module")
def header() -> Header:
    return _parse_header()


@pytest.fixture(scope="module")
def layout(header: Header, tmp_path_factory: pytest.TempPathFactory) -> Layout:
    lines = ["#include <stdio.h>", "#include <stddef.h>", f'#include "{HEADER}"', "int main(void) {"]
    for struct, fields in header.structs.items():
        lines.append(f'printf("sizeof {struct} %zu\\n", sizeof(struct {struct}));')
        for f in fields:
            lines.append(
                f'printf("field {struct} {f.name} %zu %zu\\n", offsetof(struct {struct}, {f.name}), '
                f"sizeof(((struct {struct} *)0)->{f.name}));"
            )
    names = [*(m for members in header.enums.values() for m in members), *header.constants]
    lines.extend(f'printf("value {n} %lld\\n", (long long)({n}));' for n in names)
    lines.append("return 0; }")
    work = tmp_path_factory.mktemp("wire")
    (work / "layout.c").write_text("\n".join(lines))
    subprocess.run(["cc", "-Wall", "-Werror", "-o", str(work / "layout"), str(work / "layout.c")], check=True)
    out = subprocess.run([str(work / "layout")], check=True, capture_output=True, text=True).stdout
    res = Layout()
    for line in out.splitlines():
        what, *rest = line.split()
        if what == "sizeof":
            res.sizeof[rest[0]] = int(rest[1])
        elif what == "field":
            res.fields.setdefault(rest[0], {})[rest[1]] = (int(rest[2]), int(rest[3]))
        else:
            res.values[rest[0]] = int(rest[1])
    return res


def _expected_numpy_kind(f: CField) -> str:
    """The numpy dtype kind that decodes a C field: u/i for integers, S for byte arrays."""
    if f.count is not None:
        return "S"
    return "i" if f.ctype.startswith("__s") else "u"


def _read_field(data: bytes, f: CField, offset: int, size: int) -> int:
    return int.from_bytes(data[offset : offset + size], "little", signed=f.ctype.startswith("__s"))


def test_every_struct_enum_and_constant_of_the_header_has_a_checked_mirror(header: Header) -> None:
    # given the definitions found in the header text
    structs, enums, constants = set(header.structs), set(header.enums), set(header.constants)

    # then each has a mirror entry here, and no entry names something the header dropped
    assert structs == set(DTYPE_MIRRORS) | set(PACKED_MIRRORS), (
        "events.h structs and the mirrors this test checks differ: add the new struct's Python mirror "
        "to DTYPE_MIRRORS / PACKED_MIRRORS (or remove a stale entry)"
    )
    assert enums == set(ENUM_MIRRORS), "events.h enums and ENUM_MIRRORS differ: mirror the new enum in Python"
    assert set(constants) == set(CONSTANT_MIRRORS) | KERNEL_ONLY_CONSTANTS, (
        "events.h GS_* constants and CONSTANT_MIRRORS / KERNEL_ONLY_CONSTANTS differ"
    )


@pytest.mark.parametrize("struct", sorted(DTYPE_MIRRORS))
def test_every_decoded_record_has_the_fields_offsets_sizes_and_signedness_of_its_c_struct(
    struct: str, header: Header, layout: Layout
) -> None:
    dtype = DTYPE_MIRRORS[struct]
    c_fields = header.structs[struct]
    assert dtype.fields is not None
    assert list(dtype.names or ()) == [f.name for f in c_fields], struct
    assert dtype.itemsize == layout.sizeof[struct], struct
    for f in c_fields:
        py_type, py_offset = dtype.fields[f.name][:2]
        assert (py_offset, py_type.itemsize) == layout.fields[struct][f.name], f"{struct}.{f.name}"
        assert py_type.kind == _expected_numpy_kind(f), f"{struct}.{f.name}: {py_type} for {f.ctype}"


def test_a_ring_record_is_the_ring_header_then_the_event_padded_to_eight_bytes(layout: Layout) -> None:
    padded = (layout.sizeof["gs_event"] + 7) & ~7
    assert padded + RING_HEADER == RECORD_SIZE
    assert RECORD_DTYPE.fields is not None
    assert RECORD_DTYPE.fields["event"][1] == RING_HEADER


@pytest.mark.parametrize(("tid_is_pthread", "instr_is_int"), [(True, False), (False, True)])
def test_packed_python_offsets_put_every_value_where_the_c_struct_reads_it(
    tid_is_pthread: bool, instr_is_int: bool, header: Header, layout: Layout
) -> None:
    # given a layout whose in-kernel offsets are all different, one of them negative
    c_fields = header.structs["gs_py_offsets"]
    assert list(PY_OFFSETS_FIELDS) == [f.name for f in c_fields]
    numbers = {f.name: 100 + i for i, f in enumerate(c_fields)}
    numbers["cframe_frame"] = -1
    lay: PyLayout = replace(
        LAYOUTS[max(LAYOUTS)],
        **{k: v for k, v in numbers.items() if k not in ("_pad", "tid_is_pthread", "instr_is_int")},
        tid_is_pthread=tid_is_pthread,
        instr_is_int=instr_is_int,
    )

    # when it is packed for the py_offsets map
    packed = lay.pack()

    # then each field reads back at its C offset, and the padding is zero
    assert len(packed) == layout.sizeof["gs_py_offsets"]
    for f in c_fields:
        offset, size = layout.fields["gs_py_offsets"][f.name]
        expected = 0 if f.name == "_pad" else int(getattr(lay, f.name))
        assert _read_field(packed, f, offset, size) == expected, f.name


def test_a_registered_python_process_is_written_in_the_layout_of_gs_py_proc(header: Header, layout: Layout) -> None:
    # given a tracer whose BPF object records map writes
    writes: list[tuple[int, bytes, bytes]] = []
    tracer = Tracer.__new__(Tracer)
    tracer._cuda = SimpleNamespace(  # type: ignore[assignment]
        map_fd=lambda name: {"py_procs": 7}[name],
        lib=SimpleNamespace(map_update=lambda fd, key, value: writes.append((fd, key, value))),
    )

    # when a Python process is registered
    tracer.set_python_process(4242, runtime=0x7F00_1234_5678, version=3, code_type=-0x10_2340)

    # then the value has the size and field positions of struct gs_py_proc
    [(fd, _, value)] = writes
    assert fd == 7
    assert len(value) == layout.sizeof["gs_py_proc"]
    expected = {"runtime": 0x7F00_1234_5678, "version": 3, "code_type": -0x10_2340}
    assert {f.name for f in header.structs["gs_py_proc"]} == set(expected)
    for f in header.structs["gs_py_proc"]:
        offset, size = layout.fields["gs_py_proc"][f.name]
        assert _read_field(value, f, offset, size) == expected[f.name], f.name


def test_a_registered_python_executable_is_written_in_the_layouts_of_gs_py_exe_key_and_gs_py_exe(
    header: Header, layout: Layout
) -> None:
    # given a tracer whose BPF object records map writes
    writes: list[tuple[int, bytes, bytes]] = []
    tracer = Tracer.__new__(Tracer)
    tracer._python_exes = set()
    tracer._cuda = SimpleNamespace(  # type: ignore[assignment]
        map_fd=lambda name: {"py_exes": 7, "py_exe_count": 8}[name],
        lib=SimpleNamespace(map_update=lambda fd, key, value: writes.append((fd, key, value))),
    )

    # when an executable is registered (a negative distance: the runtime before the entry point)
    tracer.set_python_exe(0x1234_5678_9ABC, (259 << 20) | 3, -0x40, version=2, code_type=-0x10_2300)

    # then key and value have the size and field positions of their structs, and the count says one
    [(fd, key, value), (count_fd, _, count)] = writes
    assert (fd, count_fd, count) == (7, 8, (1).to_bytes(4, "little"))
    for struct_name, raw, expected in (
        ("gs_py_exe_key", key, {"ino": 0x1234_5678_9ABC, "dev": (259 << 20) | 3, "_pad": 0}),
        ("gs_py_exe", value, {"runtime_from_entry": -0x40, "version": 2, "code_type": -0x10_2300}),
    ):
        assert len(raw) == layout.sizeof[struct_name]
        assert {f.name for f in header.structs[struct_name]} == set(expected)
        for f in header.structs[struct_name]:
            offset, size = layout.fields[struct_name][f.name]
            assert _read_field(raw, f, offset, size) == expected[f.name], (struct_name, f.name)


def test_a_registered_libpython_is_written_in_the_layout_of_gs_py_lib_with_its_probe_cookies(
    header: Header, layout: Layout
) -> None:
    # given a tracer whose BPF object records map writes and probe attachments
    writes: list[tuple[int, bytes, bytes]] = []
    probes: list[tuple[str, str, list[int], list[int]]] = []
    tracer = Tracer.__new__(Tracer)
    tracer._python_libs = ["/first/libpython3.12.so.1.0"]  # one slot taken already
    tracer.multi = True

    def attach(prog: str, path: str, offsets: list[int], cookies: list[int], *, retprobe: bool) -> None:
        probes.append((prog, path, offsets, cookies))

    tracer._cuda = SimpleNamespace(  # type: ignore[assignment]
        map_fd=lambda name: {"py_libs": 11}[name],
        lib=SimpleNamespace(map_update=lambda fd, key, value: writes.append((fd, key, value))),
        attach_uprobe_multi=attach,
    )
    lib = PythonLibrary(
        "/opt/py/lib/libpython3.12.so.1.0", 0x1234_5678_9ABC, (259 << 20) | 3, (3, 12, 1), 0x64_3340, 0x1000,
        ((0x30_25E0, 0x30_15E0), (0x2D_40B0, 0x2D_30B0)), LAYOUTS[12], -0x10_F220,
    )  # fmt: skip

    # when it is registered
    assert tracer.attach_python_library(lib, version=2)

    # then slot 1 holds it, in the size and field positions of struct gs_py_lib
    [(fd, key, value)] = writes
    assert (fd, key) == (11, (1).to_bytes(4, "little"))
    assert len(value) == layout.sizeof["gs_py_lib"]
    expected = {
        "ino": 0x1234_5678_9ABC,
        "runtime": 0x64_3340,
        "text_delta": 0x1000,
        "version": 2,
        "code_type": -0x10_F220,
    }
    assert {f.name for f in header.structs["gs_py_lib"]} == set(expected)
    for f in header.structs["gs_py_lib"]:
        offset, size = layout.fields["gs_py_lib"][f.name]
        assert _read_field(value, f, offset, size) == expected[f.name], f.name
    # and each start function is probed at its file offset, its cookie its address and the slot
    assert probes == [
        (
            "gs_py_start",
            lib.path,
            [0x30_15E0, 0x2D_30B0],
            [0x30_25E0 << PY_LIB_SHIFT | 1, 0x2D_40B0 << PY_LIB_SHIFT | 1],
        )
    ]


def test_a_library_key_is_written_in_the_layout_of_gs_lib_key(header: Header, layout: Layout) -> None:
    # given a tracer whose late-load BPF object records map writes
    writes: list[tuple[int, bytes, bytes]] = []
    tracer = Tracer.__new__(Tracer)
    tracer._loads = SimpleNamespace(  # type: ignore[assignment]
        map_fd=lambda name: {"lib_state": 9}[name],
        lib=SimpleNamespace(map_update=lambda fd, key, value: writes.append((fd, key, value))),
    )

    # when a library file is marked as probed
    tracer.mark_library((0x0FD0_0001, 0x1234_5678_9ABC), LibState.PROBED)

    # then the key has the size and field positions of struct gs_lib_key, and the value is one byte
    [(fd, key, value)] = writes
    assert fd == 9
    assert len(key) == layout.sizeof["gs_lib_key"]
    expected = {"dev": 0x0FD0_0001, "ino": 0x1234_5678_9ABC}
    assert {f.name for f in header.structs["gs_lib_key"]} == set(expected)
    for f in header.structs["gs_lib_key"]:
        offset, size = layout.fields["gs_lib_key"][f.name]
        assert _read_field(key, f, offset, size) == expected[f.name], f.name
    assert value == bytes([LibState.PROBED])


@pytest.mark.parametrize("c_enum", sorted(ENUM_MIRRORS))
def test_every_enum_member_has_a_python_member_of_the_same_name_and_value(
    c_enum: str, header: Header, layout: Layout
) -> None:
    prefix, mirror = ENUM_MIRRORS[c_enum]

    def normal(name: str) -> str:
        # C spells GS_OP_CUDA_MEMCPY_HTOD where Python spells cuMemcpyHtoD: compare without case or underscores.
        return name.replace("_", "").upper()

    c_members = {normal(m.removeprefix(prefix)): layout.values[m] for m in header.enums[c_enum] if m not in ENUM_BOUNDS}
    py_members = {normal(name): int(member.value) for name, member in mirror.__members__.items()}
    assert c_members == py_members


def test_every_op_id_fits_the_maps_indexed_by_op(layout: Layout) -> None:
    assert all(0 <= int(op) < layout.values["GS_OP_MAX"] for op in Op)


def test_the_stats_map_has_one_slot_per_stat(layout: Layout) -> None:
    assert layout.values["GS_STAT_MAX"] == STAT_SLOTS == len(Stat)


@pytest.mark.parametrize("name", sorted(CONSTANT_MIRRORS))
def test_every_shared_constant_has_the_value_of_its_python_mirror(name: str, layout: Layout) -> None:
    assert layout.values[name] == CONSTANT_MIRRORS[name]
