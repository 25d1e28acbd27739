"""Decode raw stack records from the ring (struct gs_stack_header + frames + stack window, bpf/include/events.h)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.bpf.wire import (
    NATIVE_FRAME_DTYPE,
    PY_CODE_DTYPE,
    PY_FRAME_DTYPE,
    PY_SLOT_SHIFT,
    STACK_HEADER_DTYPE,
    STACK_OP_CODE,
    CodeFlag,
    PyStatus,
)


@dataclass(frozen=True, slots=True)
class NativeFrame:
    status: int  # 1: build_id + file offset, 2: raw ip
    build_id: str
    value: int  # file offset (status 1) or address (status 2)


@dataclass(frozen=True, slots=True)
class RawStack:
    ts_ns: int
    pid: int
    tid: int
    op: int
    py_status: PyStatus
    native: tuple[NativeFrame, ...]
    ret_ip: int
    ret_ino: int
    ret_off: int
    python: tuple[tuple[int, int], ...]  # (code object, instruction), innermost first
    key: bytes  # pid, op and frames (not ts/tid, not the window): identical keys share the unwound frames
    window: tuple[int, ...] = ()  # the user stack from sp up ([0] is ret_ip), for stack scanning
    site: int = 0  # the call site's id, which the site's later calls name (gs_event.site)
    py_slot: int = -1  # the py_offsets slot the frames were walked with (-1: none walked)


_SITE_AT = STACK_HEADER_DTYPE.fields["site"][1]  # type: ignore[index]


@dataclass(frozen=True, slots=True)
class CodeRecord:
    """A code object as BPF read it the first time the process showed it (struct gs_py_code)."""

    pid: int
    code: int
    flags: CodeFlag
    qualname: str
    filename: str
    firstlineno: int
    linetable: bytes
    complete: bool  # nothing was cut to the record's bounds


_KIND_CODEC = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}


def _text(raw: bytes, kind: int, length: int) -> tuple[str, bool]:
    """A compact str's characters as BPF copied them, and whether they are all there."""
    codec = _KIND_CODEC.get(kind)
    if codec is None:
        return "", False
    data = raw[: length * kind]
    data = data[: len(data) - len(data) % kind]
    return data.decode(codec, "replace"), len(data) == length * kind


def _decode_code(body: bytes, pid: int) -> CodeRecord | None:
    start = STACK_HEADER_DTYPE.itemsize
    if len(body) < start + PY_CODE_DTYPE.itemsize:
        return None
    c = np.frombuffer(body, dtype=PY_CODE_DTYPE, count=1, offset=start)[0]
    fields = PY_CODE_DTYPE.fields
    assert fields is not None

    def raw(name: str) -> bytes:
        # Sliced from the body, not read through the "S" field, which drops trailing NUL bytes.
        at = start + int(fields[name][1])
        return body[at : at + fields[name][0].itemsize]

    qualname, q_ok = _text(raw("qualname"), int(c["qualname_kind"]), int(c["qualname_len"]))
    filename, f_ok = _text(raw("filename"), int(c["filename_kind"]), int(c["filename_len"]))
    table_len = int(c["linetable_len"])
    table = raw("linetable")[:table_len]
    return CodeRecord(
        pid,
        int(c["code"]),
        CodeFlag(int(c["flags"]) & 3),
        qualname,
        filename,
        int(c["firstlineno"]),
        table,
        q_ok and f_ok and len(table) == table_len,
    )


def decode(body: bytes) -> RawStack | CodeRecord | None:
    """One record (a stack, or a code object's description), or None when it is truncated."""
    hsize = STACK_HEADER_DTYPE.itemsize
    if len(body) < hsize:
        return None
    h = np.frombuffer(body, dtype=STACK_HEADER_DTYPE, count=1)[0]
    if int(h["op"]) == STACK_OP_CODE:
        return _decode_code(body, int(h["pid"]))
    nn, npy = int(h["n_native"]), int(h["n_py"])
    end_native = hsize + nn * NATIVE_FRAME_DTYPE.itemsize
    if len(body) < end_native + npy * PY_FRAME_DTYPE.itemsize:
        return None
    nat = np.frombuffer(body, dtype=NATIVE_FRAME_DTYPE, count=nn, offset=hsize)
    py = np.frombuffer(body, dtype=PY_FRAME_DTYPE, count=npy, offset=end_native)
    native = tuple(
        NativeFrame(int(s), bytes(b).hex() if s == 1 else "", int(v))
        for s, b, v in zip(nat["status"].tolist(), nat["build_id"].tolist(), nat["offset_or_ip"].tolist(), strict=True)
        if s in (1, 2)
    )
    py_status = int(h["py_status"])
    try:
        status = PyStatus(py_status & ((1 << PY_SLOT_SHIFT) - 1))
    except ValueError:
        status = PyStatus.NONE
    end_py = end_native + npy * PY_FRAME_DTYPE.itemsize
    # The stack window is whatever follows the frames (absent when scanning is off).
    window = np.frombuffer(body, dtype="<u8", count=(len(body) - end_py) // 8, offset=end_py)
    # pid, op, frames and the [sp] caller: not the time, the thread or the site id
    key = body[8:12] + body[16:_SITE_AT] + body[hsize:end_py]
    return RawStack(
        int(h["ts_ns"]),
        int(h["pid"]),
        int(h["tid"]),
        int(h["op"]),
        status,
        native,
        int(h["ret_ip"]),
        int(h["ret_ino"]),
        int(h["ret_off"]),
        tuple(zip(py["code"].tolist(), py["instr"].tolist(), strict=True)),
        key,
        tuple(window.tolist()),
        int(h["site"]),
        py_status >> PY_SLOT_SHIFT if status == PyStatus.OK else -1,
    )
