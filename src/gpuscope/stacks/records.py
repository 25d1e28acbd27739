"""Decode raw stack records from the ring (struct gs_stack_header + frames + stack window, bpf/include/events.h)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.bpf.wire import NATIVE_FRAME_DTYPE, PY_FRAME_DTYPE, STACK_HEADER_DTYPE, PyStatus


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


def decode(body: bytes) -> RawStack | None:
    """One record, or None when it is truncated."""
    hsize = STACK_HEADER_DTYPE.itemsize
    if len(body) < hsize:
        return None
    h = np.frombuffer(body, dtype=STACK_HEADER_DTYPE, count=1)[0]
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
    try:
        status = PyStatus(int(h["py_status"]))
    except ValueError:
        status = PyStatus.NONE
    end_py = end_native + npy * PY_FRAME_DTYPE.itemsize
    # The stack window is whatever follows the frames (absent when scanning is off).
    window = np.frombuffer(body, dtype="<u8", count=(len(body) - end_py) // 8, offset=end_py)
    key = body[8:12] + body[16:end_py]  # pid + op + frames: not the time, not the thread
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
    )
