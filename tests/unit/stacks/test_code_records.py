"""Code objects described by BPF (struct gs_py_code): decoded, cached, and used once the process is gone."""

from __future__ import annotations

import numpy as np

from gpuscope.bpf.wire import (
    CODE_LINETABLE,
    PY_CODE_DTYPE,
    PY_CODE_UNDESCRIBED,
    PY_FRAME_DTYPE,
    PY_SLOT_SHIFT,
    STACK_HEADER_DTYPE,
    STACK_OP_CODE,
    CodeFlag,
    PyStatus,
)
from gpuscope.stacks.python import LAYOUTS, Interpreter
from gpuscope.stacks.records import CodeRecord, RawStack, decode
from gpuscope.stacks.resolve import StackResolver

DEAD_PID = 2**22 + 17  # above pid_max's default: no such process


def _code_record(
    pid: int, code: int, qualname: str, filename: str, table: bytes, *, kind: int = 1, flags: int = 0
) -> bytes:
    h = np.zeros(1, dtype=STACK_HEADER_DTYPE)
    h["pid"], h["op"] = pid, STACK_OP_CODE
    c = np.zeros(1, dtype=PY_CODE_DTYPE)
    codec = {1: "latin-1", 2: "utf-16-le"}[kind]
    c["code"], c["firstlineno"], c["flags"] = code, 10, flags
    c["qualname_len"], c["qualname_kind"] = len(qualname), kind
    c["filename_len"], c["filename_kind"] = len(filename), 1
    c["linetable_len"] = len(table)
    body = bytearray(h.tobytes() + c.tobytes())
    fields = PY_CODE_DTYPE.fields
    assert fields is not None
    base = STACK_HEADER_DTYPE.itemsize
    for name, data in (
        ("qualname", qualname.encode(codec)),
        ("filename", filename.encode("latin-1")),
        ("linetable", table[:CODE_LINETABLE]),
    ):
        at = base + fields[name][1]
        body[at : at + len(data)] = data
    return bytes(body)


def _stack(pid: int, frames: list[tuple[int, int]], *, slot: int = 1) -> RawStack:
    h = np.zeros(1, dtype=STACK_HEADER_DTYPE)
    h["pid"], h["op"], h["n_py"] = pid, 3, len(frames)
    h["py_status"] = PyStatus.OK | slot << PY_SLOT_SHIFT
    py = np.array(frames, dtype=PY_FRAME_DTYPE)
    raw = decode(h.tobytes() + py.tobytes())
    assert isinstance(raw, RawStack)
    return raw


# 3.11 location table: one entry of 2 code units on line firstlineno + 2, zero
# columns (code 13, "no column": 0b1_1101_001 then a signed varint delta 2 -> 4).
TABLE_311 = bytes([0b1_1101_001, 4])


def test_a_code_record_decodes_its_names_line_table_and_completeness() -> None:
    # given a record with a UCS2 qualname and a line table that fits
    body = _code_record(7, 0x1000, "Modèle.ŝync", "/srv/m.py", TABLE_311, kind=2)
    # when it is decoded
    rec = decode(body)
    # then
    assert isinstance(rec, CodeRecord)
    assert (rec.pid, rec.code, rec.qualname, rec.filename, rec.firstlineno) == (
        7,
        0x1000,
        "Modèle.ŝync",
        "/srv/m.py",
        10,
    )
    assert rec.linetable == TABLE_311 and rec.complete and rec.flags == CodeFlag(0)


def test_a_line_table_longer_than_the_record_marks_the_description_incomplete() -> None:
    table = bytes(range(256)) * 5
    rec = decode(_code_record(7, 0x1000, "f", "/srv/m.py", table))
    assert isinstance(rec, CodeRecord)
    assert len(rec.linetable) == CODE_LINETABLE and not rec.complete


def test_frames_of_an_exited_process_resolve_from_the_code_records_bpf_sent() -> None:
    # given a resolver that knows the interpreter of a process that no longer exists
    lay = LAYOUTS[11]
    resolver = StackResolver()
    resolver.interpreters[DEAD_PID] = Interpreter(DEAD_PID, "/usr/lib/libpython3.11.so", (3, 11, 7), 0, lay)
    inner, outer = 0x7000_0000, 0x7000_2000
    for code, name in ((inner, "inner"), (outer, "outer")):
        rec = decode(_code_record(DEAD_PID, code, name, "/srv/app.py", TABLE_311))
        assert isinstance(rec, CodeRecord)
        resolver.note_code(rec)
    # when a stack naming both code objects resolves (instr = first code unit)
    raw = _stack(DEAD_PID, [(inner, inner + lay.co_code_adaptive), (outer, outer + lay.co_code_adaptive)])
    python = resolver._python(raw)
    # then each frame has its function, file and executing line, innermost first
    assert [(f.function, f.file, f.line) for f in python] == [
        ("inner", "/srv/app.py", 12),
        ("outer", "/srv/app.py", 12),
    ]


def test_a_frame_whose_executable_is_not_code_is_left_out() -> None:
    lay = LAYOUTS[12]
    resolver = StackResolver()
    resolver.interpreters[DEAD_PID] = Interpreter(DEAD_PID, "/usr/lib/libpython3.12.so", (3, 12, 1), 0, lay)
    shim = decode(_code_record(DEAD_PID, 0x5000, "", "", b"", flags=CodeFlag.NOT_CODE))
    real = decode(_code_record(DEAD_PID, 0x9000, "work", "/srv/app.py", TABLE_311))
    assert isinstance(shim, CodeRecord) and isinstance(real, CodeRecord)
    resolver.note_code(shim)
    resolver.note_code(real)
    raw = _stack(DEAD_PID, [(0x9000, 0x9000 + lay.co_code_adaptive), (0x5000, 0)])
    assert [f.function for f in resolver._python(raw)] == ["work"]


def test_frames_of_a_process_registered_by_the_kernel_alone_are_named_with_the_layout_they_were_walked_with() -> None:
    # given a process user space never located (the start of its libpython registered it; it exited at once),
    # and the 3.10 and 3.11 layouts loaded in their slots
    resolver = StackResolver()
    resolver.layouts = {LAYOUTS[10].slot: LAYOUTS[10], LAYOUTS[11].slot: LAYOUTS[11]}
    rec = decode(_code_record(DEAD_PID, 0x7000_0000, "step", "/srv/app.py", TABLE_311))
    assert isinstance(rec, CodeRecord)
    resolver.note_code(rec)
    # when its stack says it was walked with the 3.11 slot
    lay = LAYOUTS[11]
    raw = _stack(DEAD_PID, [(0x7000_0000, 0x7000_0000 + lay.co_code_adaptive)], slot=lay.slot)
    assert (raw.py_status, raw.py_slot) == (PyStatus.OK, lay.slot)
    # then its frame is named with 3.11's line table rules
    assert [(f.function, f.line) for f in resolver._python(raw)] == [("step", 12)]
    # and a stack with no slot the resolver knows says its interpreter was not located
    other = _stack(DEAD_PID, [(0x7000_0000, 0)], slot=LAYOUTS[13].slot)
    assert [f.marker for f in resolver._python(other)] == ["python: interpreter not located"]


def test_a_frame_whose_description_was_lost_is_never_named_after_an_earlier_object_at_its_address() -> None:
    # given an exited process whose function `old` was described at an address, then freed
    lay = LAYOUTS[11]
    resolver = StackResolver()
    resolver.layouts = {lay.slot: lay}
    old = decode(_code_record(DEAD_PID, 0x7000_0000, "old", "/srv/app.py", TABLE_311))
    assert isinstance(old, CodeRecord)
    resolver.note_code(old)
    # when a later stack shows another object there whose description could not go on the ring
    raw = _stack(DEAD_PID, [(0x7000_0000 | PY_CODE_UNDESCRIBED, 0x7000_0000 + lay.co_code_adaptive)], slot=lay.slot)
    (frame,) = resolver._python(raw)
    # then the frame is unnamed (the process cannot be read), not `old`
    assert frame.function is None and frame.address == "0x70000000", frame
    # and a new object's description at a known address is reported as replacing the old one
    new = decode(_code_record(DEAD_PID, 0x7000_0000, "new", "/srv/app.py", TABLE_311))
    assert isinstance(new, CodeRecord)
    assert resolver.note_code(new) is True
