"""Reading another process's memory: any pointer value, however wild, is an unreadable address, not a crash."""

from __future__ import annotations

import ctypes
import os

import pytest

from gpuscope.stacks.python import ProcessMemory


@pytest.mark.parametrize("addr", [0, -8, 1 << 47, (1 << 63) - 4, 1 << 63, (1 << 64) - 8, 1 << 70])
def test_a_pointer_outside_user_space_reads_as_nothing(addr: int) -> None:
    # given this process's own memory, readable through /proc (what a torn read of a frame yields)
    mem = ProcessMemory(os.getpid())
    try:
        # when a garbage pointer is followed
        # then it is unreadable, as an unmapped address is, and nothing is raised
        assert mem.read(addr, 8) is None
        assert mem.u64(addr) is None
    finally:
        mem.close()


def test_a_mapped_address_reads_its_bytes() -> None:
    value = ctypes.c_uint64(0x1122334455667788)
    mem = ProcessMemory(os.getpid())
    try:
        assert mem.u64(ctypes.addressof(value)) == 0x1122334455667788
    finally:
        mem.close()
