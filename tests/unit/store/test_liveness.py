"""Who holds a recording open, read from the kernel's lock list (a /proc/locks text written by the test)."""

from __future__ import annotations

import os
from pathlib import Path

from gpuscope.store.liveness import lock_holders, recording_holders


def _key(path: Path) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


def test_holders_of_a_recording_are_read_from_its_file_and_its_shm_locks(tmp_path: Path) -> None:
    db, shm, other = tmp_path / "r.db", tmp_path / "r.db-shm", tmp_path / "other.db"
    for p in (db, shm, other):
        p.write_bytes(b"")
    locks = tmp_path / "locks"
    locks.write_text(
        f"1: POSIX  ADVISORY  READ 101 {_key(db)} 128 128\n"
        f"2: OFDLCK ADVISORY  READ -1 {_key(db)} 0 EOF\n"  # an OFD lock names no pid (-1): still a holder
        f"3: POSIX  ADVISORY  WRITE 202 {_key(shm)} 0 EOF\n"
        f"4: POSIX  ADVISORY  READ 303 {_key(other)} 0 EOF\n"
        f"5: -> POSIX  ADVISORY  WRITE 404 {_key(db)} 0 EOF\n"  # waiting, not holding
        f"6: FLOCK  ADVISORY  WRITE 505 {_key(db)} 0 EOF\n"  # flock: not SQLite's
        "garbage line\n"
    )
    assert lock_holders(db, proc_locks=locks) == {101, -1}
    assert recording_holders(db, proc_locks=locks) == {101, -1, 202}
    shm.unlink()  # no -shm: the file's own holders only
    assert recording_holders(db, proc_locks=locks) == {101, -1}
    assert recording_holders(tmp_path / "missing.db", proc_locks=locks) == set()
    assert lock_holders(db, proc_locks=tmp_path / "no-such-locks") == set()
