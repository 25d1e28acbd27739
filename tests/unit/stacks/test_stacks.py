"""Stacks in user space: line tables, symbol lookup by build id, merging, policy, read-back."""

from __future__ import annotations

import os
import sqlite3
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuscope.bpf.wire import NATIVE_FRAME_DTYPE, PY_OFFSETS_FIELDS, STACK_HEADER_DTYPE, PyStatus
from gpuscope.errors import UsageError
from gpuscope.model.ops import Op
from gpuscope.stacks.files import FileIndex
from gpuscope.stacks.frames import Frame, Stack
from gpuscope.stacks.policy import DEFAULT_STACK_EVERY, parse_overrides, stack_policy
from gpuscope.stacks.python import LAYOUTS, line_310, line_311
from gpuscope.stacks.records import RawStack, decode
from gpuscope.stacks.report import describe_call_sites, top_call_sites
from gpuscope.stacks.resolve import StackResolver, _merge
from gpuscope.stacks.scan import Callee, CallInstruction, calls_before, is_return_address, scan
from gpuscope.stacks.symbols import SymbolCache, SymbolTable
from gpuscope.store.connect import connect_writer


def _sample(a: int, b: int) -> int:
    x = a + 1
    y = b * 2
    return x + y


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PEP 657 location table")
def test_the_311_location_table_gives_the_line_of_every_instruction() -> None:
    code = _sample.__code__
    for start, end, line in code.co_lines():
        for byte in range(start, end, 2):
            assert line_311(code.co_linetable, code.co_firstlineno, byte // 2) == line


def test_the_310_line_table_decodes_byte_ranges() -> None:
    # given a table: 4 bytes on firstlineno+1, 6 bytes with no line, 2 bytes on +3
    table = bytes([4, 1, 6, 0x80, 2, 2])
    # then
    assert line_310(table, 10, 0) == 11
    assert line_310(table, 10, 5) is None
    assert line_310(table, 10, 10) == 13


def test_every_shipped_layout_packs_into_the_c_struct() -> None:
    for lay in LAYOUTS.values():
        assert len(lay.pack()) == 4 * len(PY_OFFSETS_FIELDS)  # struct gs_py_offsets: all u32/s32
        assert 0 <= lay.slot < 8


def _libc() -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            if "/libc.so" in line:
                return line.split()[-1]
    pytest.skip("no libc mapped")
    raise AssertionError


def test_a_build_id_frame_is_named_without_the_process(tmp_path: Path) -> None:
    # given libc indexed by build id, and a frame at getpid's file offset from a pid that does not exist
    path = _libc()
    files = FileIndex()
    bid = files.add_path(path)
    assert bid
    table, _ = SymbolTable.from_elf(path)
    vaddr = next(int(s) for s, n in zip(table.starts, table.names, strict=True) if n == "getpid")
    seg = next(s for s in table.segments if s.vaddr <= vaddr < s.vaddr + s.filesz)
    offset = vaddr - seg.vaddr + seg.offset
    hdr = np.zeros(1, STACK_HEADER_DTYPE)
    hdr["pid"], hdr["tid"], hdr["op"], hdr["n_native"] = 2**31 - 5, 1, int(Op.cudaMalloc), 1
    frame = np.zeros(1, NATIVE_FRAME_DTYPE)
    frame["status"], frame["build_id"], frame["offset_or_ip"] = 1, bytes.fromhex(bid), offset + 4
    raw = decode(hdr.tobytes() + frame.tobytes())
    assert isinstance(raw, RawStack)
    # when it is resolved (symbol tables cached on disk under tmp_path)
    stack = StackResolver(files, SymbolCache(tmp_path)).resolve(raw)
    # then
    assert stack.frames[0].function == "getpid"
    assert stack.frames[0].offset == 4
    assert (tmp_path / f"{bid}.npz").exists()
    # and a second cache loads the table from disk
    again = SymbolCache(tmp_path).table(path, bid)
    assert again is not None and again.lookup(vaddr) == ("getpid", 0)


def test_an_unknown_build_id_keeps_the_raw_frame_with_a_marker() -> None:
    hdr = np.zeros(1, STACK_HEADER_DTYPE)
    hdr["n_native"] = 1
    frame = np.zeros(1, NATIVE_FRAME_DTYPE)
    frame["status"], frame["build_id"], frame["offset_or_ip"] = 1, b"\x01" * 20, 0x1234
    raw = decode(hdr.tobytes() + frame.tobytes())
    assert isinstance(raw, RawStack) and raw.py_status is PyStatus.NONE
    stack = StackResolver(FileIndex()).resolve(raw)
    assert stack.marker == "unknown build id"
    assert stack.frames[0].offset == 0x1234


def test_truncated_records_are_refused() -> None:
    hdr = np.zeros(1, STACK_HEADER_DTYPE)
    hdr["n_native"] = 3
    assert decode(hdr.tobytes()) is None
    assert decode(b"\0" * 8) is None


def test_python_frames_replace_the_interpreter_frames() -> None:
    native = [
        Frame("native", "cudaMalloc", "/l/libcudart.so.12", 0),
        Frame("native", "ffi_call", "/l/libffi.so.8", 1),
        Frame("native", "_PyEval_EvalFrameDefault", "/p/libpython3.11.so.1.0", 9),
        Frame("native", "_PyEval_EvalFrameDefault", "/p/libpython3.11.so.1.0", 9),
        Frame("native", "__libc_start_call_main", "/l/libc.so.6", 2),
    ]
    python = [
        Frame("python", "forward", file="train.py", line=142),
        Frame("python", "<module>", file="train.py", line=9),
    ]
    merged = _merge(native, python)
    assert [f.function for f in merged] == ["cudaMalloc", "ffi_call", "forward", "<module>", "__libc_start_call_main"]
    assert Stack(tuple(merged), 5, 2, None).call_site == "forward (train.py:142)"


def test_the_policy_takes_full_stacks_once_per_site_and_one_call_in_n_for_every_api_op() -> None:
    pol = dict(stack_policy())
    assert pol[int(Op.cudaLaunchKernel)] == DEFAULT_STACK_EVERY
    assert pol[int(Op.cudaMalloc)] == DEFAULT_STACK_EVERY
    assert pol[int(Op.ncclAllReduce)] == DEFAULT_STACK_EVERY
    assert int(Op.sched_switch) not in pol
    assert dict(stack_policy(overrides={"cudaFree": 0}))[int(Op.cudaFree)] == 0
    with pytest.raises(UsageError):
        parse_overrides(["cudaMalloc"])
    with pytest.raises(UsageError):
        stack_policy(overrides={"nope": 1})


def test_top_call_sites_reads_the_share_of_each_site(tmp_path: Path) -> None:
    # given a recording with 3 slow cudaMalloc calls from one site and 1 from another
    conn = connect_writer(tmp_path / "a.db")
    conn.execute("INSERT INTO sessions(id, uuid, node, started_wall_ns, started_mono_ns) VALUES (1, 'u', 'n', 0, 0)")
    for i, site in enumerate(["alloc (kv.py:211)"] * 3 + ["other (x.py:1)"]):
        h = hash(site) & 0xFFFF
        conn.execute("INSERT OR IGNORE INTO stacks VALUES (?, '[]', ?, 1, 1, NULL)", (h, site))
        conn.execute(
            "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, cgroup_id, op_id, flags, ret, bytes, "
            "handle, stream, arg0, arg1) VALUES (1, ?, 1000, 7, 7, 0, ?, 0, 0, 0, 0, 0, 0, 0)",
            (i, int(Op.cudaMalloc)),
        )
        conn.execute("INSERT INTO event_stacks VALUES (1, 7, 7, ?, ?)", (i, h))
    conn.commit()
    # when
    sites = top_call_sites(conn, op="cudaMalloc", min_duration_ns=500)
    # then
    assert [(s.call_site, s.calls) for s in sites] == [("alloc (kv.py:211)", 3), ("other (x.py:1)", 1)]
    assert describe_call_sites(sites, "slow cudaMalloc calls") == (
        "75% of the slow cudaMalloc calls come from alloc (kv.py:211); then other (x.py:1) (25%)"
    )
    assert top_call_sites(sqlite3.connect(":memory:")) == []


def test_maps_of_this_process_locate_its_own_code() -> None:
    files = FileIndex()
    assert files.add_process(os.getpid())
    addr = struct.unpack("<Q", struct.pack("<Q", id(files)))[0]
    assert files.locate(os.getpid(), addr) is None  # heap: no file


@pytest.mark.parametrize(
    ("code", "length"),
    [
        (bytes.fromhex("ffd0"), 2),  # call *%rax
        (bytes.fromhex("41ffd3"), 3),  # call *%r11
        (bytes.fromhex("ff1510000000"), 6),  # call *0x10(%rip)
        (bytes.fromhex("ff542408"), 4),  # call *0x8(%rsp)
        (bytes.fromhex("ff94c300100000"), 7),  # call *0x1000(%rbx,%rax,8)
        (bytes.fromhex("3effd0"), 3),  # notrack call *%rax
        (bytes.fromhex("ff10"), 2),  # call *(%rax)
        (bytes.fromhex("ff14c578563412"), 7),  # call *0x12345678(,%rax,8)
    ],
)
def test_the_bytes_before_a_return_address_decode_as_an_indirect_call(code: bytes, length: int) -> None:
    # given the call preceded by unrelated bytes (mov %rdi,%rax; nop)
    before = bytes.fromhex("4889f890") + code
    # then
    assert CallInstruction(length, None) in calls_before(before)


def test_a_direct_call_gives_its_displacement_and_other_bytes_are_no_call() -> None:
    # call rel32 = -0x20 (e8 e0 ff ff ff) after a nop
    assert calls_before(bytes.fromhex("90e8e0ffffff")) == [CallInstruction(5, -0x20)]
    assert calls_before(bytes.fromhex("ffe0")) == []  # jmp *%rax: FF /4, not a call
    assert calls_before(bytes.fromhex("4889c7")) == []  # mov %rax,%rdi
    assert calls_before(b"") == []


def test_scanning_follows_direct_calls_to_the_callee_and_skips_stale_return_addresses() -> None:
    # given a file whose functions are f (0x100), g (0x200), h (0x300), main (0x400);
    # g calls f at 0x210 (return 0x215), h calls g at 0x310, main calls h at 0x410,
    # and 0x230 follows a call to h (stale: g did not call h in this stack)
    funcs = [(0x100, "f"), (0x200, "g"), (0x300, "h"), (0x400, "main")]
    calls = {0x215: 0x100, 0x230: 0x300, 0x315: 0x200, 0x415: 0x300}

    def function_at(path: str, off: int) -> tuple[str, int] | None:
        start, name = max((s, n) for s, n in funcs if s <= off)
        return name, off - start

    def code_before(path: str, off: int) -> bytes:
        if off not in calls:
            return bytes.fromhex("4889c7")
        return b"\x90\xe8" + (calls[off] - off).to_bytes(4, "little", signed=True)

    base = 0x5555_0000_0000
    window = (base + 0x150, 42, base + 0x230, 0x7FFF_0000_1000, base + 0x215, base + 0x315, 7, base + 0x415, 0)

    def locate(addr: int) -> tuple[str, int] | None:
        return ("/bin/app", addr - base) if base <= addr < base + 0x1000 else None

    # when the scan starts above f's frame
    found = scan(window, 1, Callee("/bin/app", "f"), locate, code_before, function_at, limit=8)
    # then g, h and main are found, and the stale return address is not
    assert [(s.index, function_at("", s.file_offset - 1)) for s in found] == [
        (4, ("g", 0x14)),
        (5, ("h", 0x14)),
        (7, ("main", 0x14)),
    ]
    # and a direct call to a PLT stub (unnamed) is taken only when the callee is in another file
    assert is_return_address(
        "/bin/app", 0x215, Callee("/lib/libcudart.so", "cudaMalloc"), code_before, lambda p, o: None
    )
    assert not is_return_address("/bin/app", 0x215, Callee("/bin/app", "f"), code_before, lambda p, o: None)


def test_a_record_carries_its_stack_window_after_the_frames() -> None:
    hdr = np.zeros(1, STACK_HEADER_DTYPE)
    hdr["n_native"] = 1
    frame = np.zeros(1, NATIVE_FRAME_DTYPE)
    frame["status"], frame["offset_or_ip"] = 2, 0x1234
    body = hdr.tobytes() + frame.tobytes()
    raw = decode(body + struct.pack("<3Q", 1, 2, 3))
    assert isinstance(raw, RawStack) and raw.window == (1, 2, 3)
    # the window is not part of the frames' key (the collector adds the words that are code)
    again = decode(body)
    assert isinstance(again, RawStack) and again.window == () and again.key == raw.key
