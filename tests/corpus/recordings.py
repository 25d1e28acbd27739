"""The valid recordings the corpus mutates: two of gpuscope's own (made by the test builders) and the reference files."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from gpuscope.model.ops import Op
from gpuscope.store.connect import connect_writer
from gpuscope.store.findings_history import save_findings
from gpuscope.store.stacks_write import insert_stacks
from tests.ingero_fixtures import ingero_fixture
from tests.unit.analysis.builder import MS, US, Events, end_session, steady_training
from tests.unit.query.builder import build_db
from tests.unit.store.recordings import add_aggregates

# A call stack as the stack collector stores it, given to every cudaMalloc of the ``steady`` recording.
STACK_HASH = 0x5EED
STACK_FRAMES = [
    {"kind": "native", "function": "cudaMalloc", "module": "libcudart.so.12", "offset": 64},
    {"kind": "python", "function": "alloc", "file": "kv.py", "line": 211},
]


@dataclass(frozen=True)
class Sources:
    """The valid files of one corpus run (never handed to a command: ``cases`` copies them first)."""

    steady: Path
    """gpuscope: two processes of steady cudaMalloc/cudaStreamSynchronize calls, the mallocs with a call stack."""
    training: Path
    """gpuscope: a closed training loop (launch + sync) slowed by a CPU neighbour, with per-second aggregates and
    the findings of an explain run stored."""
    ingero: Path
    """The reference system's sample recording of one node (a copy)."""
    ingero_other: Path
    """Its sample recording of a second node (a copy)."""


def build_sources(folder: Path) -> Sources:
    """Write the valid recordings into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    steady = build_db(folder / "steady.db", n=40, pids=(42, 43))
    conn = connect_writer(steady)
    try:
        insert_stacks(conn, [(STACK_HASH, json.dumps(STACK_FRAMES), "alloc (kv.py:211)", 1, 1, None)])
        conn.execute(
            "UPDATE event_log SET stack_hash = ? WHERE op_id = (SELECT id FROM ops WHERE name = 'cudaMalloc')",
            (STACK_HASH,),
        )
    finally:
        conn.close()

    ev = Events(comms={100: "train.py", 999: "stress"})
    syncs = steady_training(ev, n=120)
    for i, t in enumerate(syncs):
        if i % 4 == 0:  # every 4th sync 5 ms longer, a neighbour holding the CPU meanwhile
            ev.rows = [
                (r[0], r[1] + 5 * MS, *r[2:]) if r[0] == t and r[4] == int(Op.cudaStreamSynchronize) else r
                for r in ev.rows
            ]
            ev.sched(t + 20 * US, 5 * MS, preempted=True, by_pid=999)
    training = ev.to_db(folder / "training.db")
    add_aggregates(training, 1, ev)
    end = 121 * 10 * MS
    end_session(training, end, recorded=len(ev.rows))
    report = ev.report()
    save_findings(training, report.findings, session_id=1, window_start_ns=0, window_end_ns=end)

    ingero = folder / "ingero-node-01.db"
    ingero_other = folder / "ingero-node-02.db"
    for source, copy in (("sample-gpu-node-01.db", ingero), ("sample-gpu-node-02.db", ingero_other)):
        shutil.copyfile(ingero_fixture(source), copy)
        copy.chmod(0o644)
    return Sources(steady, training, ingero, ingero_other)
