"""Python mirror of bpf/include/events.h.

``EVENT_DTYPE`` decodes ``struct gs_event`` records straight out of the ring
buffer. tests/unit/bpf/test_wire_mirror.py compiles the C header and checks every
size and offset here against it.
"""

from __future__ import annotations

import enum

import numpy as np

TASK_COMM_LEN = 16

EVENT_FIELDS: list[tuple[str, str]] = [
    ("ts_ns", "<u8"),
    ("duration_ns", "<u8"),
    ("pid", "<u4"),
    ("tid", "<u4"),
    ("cgroup_id", "<u8"),
    ("op", "<u2"),
    ("flags", "<u2"),
    ("ret", "<i4"),
    ("bytes", "<u8"),
    ("handle", "<u8"),
    ("stream", "<u8"),
    ("arg0", "<u8"),
    ("arg1", "<u8"),
    ("cgroup_v1_id", "<u8"),
    ("site", "<u8"),
    ("comm", f"S{TASK_COMM_LEN}"),
]
EVENT_DTYPE = np.dtype(EVENT_FIELDS, align=True)
EVENT_SIZE = EVENT_DTYPE.itemsize

# One ring record: 8-byte header (u32 len | BUSY/DISCARD bits, u32 pg_off),
# then the event, padded to 8 bytes.
RING_HEADER = 8
RECORD_SIZE = RING_HEADER + ((EVENT_SIZE + 7) & ~7)
RECORD_DTYPE = np.dtype([("len", "<u4"), ("pg_off", "<u4"), ("event", EVENT_DTYPE)])


# Bits of a uprobe cookie above the op id (GS_COOKIE_* in events.h).
COOKIE_SAMPLED = 1 << 32  # probed in windows under the overhead budget, emitted only while the gate is open
COOKIE_CALIBRATE = 1 << 33  # a probe on the calibration library: a record's work, discarded
COOKIE_STEPPED = 1 << 34  # the probed instruction is single-stepped: the record carries Flag.STEPPED


class Flag(enum.IntFlag):
    ENTRY_ONLY = 1 << 0
    PREEMPTED = 1 << 1
    GROUP_EXIT = 1 << 2
    STEPPED = 1 << 3


class Stat(enum.IntEnum):
    """Slots of the per-CPU ``stats`` map (enum gs_stat)."""

    SUBMITTED = 0
    DROP_CUDA = 1
    DROP_DRIVER = 2
    DROP_HOST = 3
    CALL_DEPTH = 4
    UNMATCHED_RET = 5
    DROP_NCCL = 6
    DROP_AUX = 7
    DROP_STACK = 8
    HOLD = 9
    HOLD_EXPIRED = 10
    DROP_LOAD = 11
    CPU_SAMPLES = 12
    CPU_SAMPLE_NS = 13
    DROP_CPU_SAMPLE = 14


STAT_SLOTS = 15
DROP_STATS = (Stat.DROP_CUDA, Stat.DROP_DRIVER, Stat.DROP_HOST, Stat.DROP_NCCL)

# struct gs_aux_header + payload on the aux ring (variable length, rare).
AUX_HEADER_DTYPE = np.dtype([("ts_ns", "<u8"), ("pid", "<u4"), ("tid", "<u4"), ("kind", "<u4"), ("len", "<u4")])
AUX_PAYLOAD = 512


class AuxKind(enum.IntEnum):
    EXEC_ARGV = 1
    EXEC_ENV = 2


# struct gs_load_event on the `load_events` ring (bpf/loads.bpf.c).
LOAD_NAME = 64
LOAD_EVENT_DTYPE = np.dtype(
    [
        ("ts_ns", "<u8"),
        ("pid", "<u4"),
        ("tid", "<u4"),
        ("dev", "<u8"),
        ("ino", "<u8"),
        ("fd", "<i4"),
        ("held", "<u4"),
        ("name", f"S{LOAD_NAME}"),
    ]
)


class HoldKind(enum.IntEnum):
    """What the kernel did with a process that mapped an unknown library (enum gs_hold_kind)."""

    NONE = 0
    STOPPED = 1
    VISIBLE = 2


# Stack records on the `stack_events` ring (struct gs_stack_header, then
# n_native gs_native_frame, then n_py gs_py_frame).
STACK_HEADER_DTYPE = np.dtype(
    [
        ("ts_ns", "<u8"),
        ("pid", "<u4"),
        ("tid", "<u4"),
        ("op", "<u2"),
        ("py_status", "<u2"),
        ("n_native", "<u2"),
        ("n_py", "<u2"),
        ("ret_ip", "<u8"),
        ("ret_ino", "<u8"),
        ("ret_off", "<u8"),
        ("site", "<u8"),
    ]
)
NATIVE_FRAME_DTYPE = np.dtype([("status", "<i4"), ("build_id", "S20"), ("offset_or_ip", "<u8")])
PY_FRAME_DTYPE = np.dtype([("code", "<u8"), ("instr", "<u8")])
# Bit 0 of a frame's code: its description could not go on the ring; an earlier object's may be cached.
PY_CODE_UNDESCRIBED = 1
PY_OFFSETS_FIELDS = (
    "interp_head",
    "threads_head",
    "tstate_next",
    "tstate_tid",
    "tstate_frame",
    "cframe_frame",
    "frame_code",
    "frame_previous",
    "frame_instr",
    "tid_is_pthread",
    "instr_is_int",
    "co_filename",
    "co_qualname",
    "co_firstlineno",
    "co_linetable",
    "ascii_size",
    "compact_size",
    "_pad",
)
STACK_MAX_NATIVE = 32
STACK_MAX_PY = 32
# A code object's description on the same ring: a stack header whose op is
# STACK_OP_CODE, then struct gs_py_code.
STACK_OP_CODE = 0xFFFF
# An on-CPU sample's stack (bpf/include/profile.bpf.h); the header's ts_ns is the sample's time.
STACK_OP_CPU_SAMPLE = 0xFFFE
CODE_NAME = 128
CODE_FILE = 256
CODE_LINETABLE = 1024
PY_CODE_DTYPE = np.dtype(
    [
        ("code", "<u8"),
        ("firstlineno", "<i4"),
        ("linetable_len", "<u4"),
        ("qualname_len", "<u4"),
        ("filename_len", "<u4"),
        ("qualname_kind", "u1"),
        ("filename_kind", "u1"),
        ("flags", "<u2"),
        ("_pad", "<u4"),
        ("qualname", f"S{CODE_NAME}"),
        ("filename", f"S{CODE_FILE}"),
        ("linetable", f"S{CODE_LINETABLE}"),
    ]
)


class CodeFlag(enum.IntFlag):
    """What went wrong describing a code object in BPF (enum gs_code_flag)."""

    NOT_CODE = 1
    UNREADABLE = 2


# gs_stack_header.py_status: the walk's outcome in the low byte, and for a walk that succeeded the
# py_offsets slot it walked with above it.
PY_SLOT_SHIFT = 8
# A libpython registered by its file (struct gs_py_lib in `py_libs`): at most this many, and each start
# probe's cookie is the symbol's address in the file << PY_LIB_SHIFT | the library's slot.
PY_MAX_LIBS = 16
PY_LIB_SHIFT = 8


class PyStatus(enum.IntEnum):
    """Outcome of the in-kernel Python walk (enum gs_py_status)."""

    NONE = 0
    OK = 1
    NO_THREAD = 2
    NO_OFFSETS = 3
