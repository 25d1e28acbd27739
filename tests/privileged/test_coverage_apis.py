"""NCCL and CUDA Graph calls are recorded exactly, with ranks, communicators and handles."""

from __future__ import annotations

import re


def test_nccl_calls_of_three_ranks_are_counted_and_joined_to_their_communicator(build_workload, trace_command, standin):
    # given three ranks of one job, launched together
    exe = build_workload("nccl_ranks.c")
    script = " & ".join(f"RANK={r} WORLD_SIZE=3 {exe} 30" for r in range(3)) + " & wait"
    # when
    run = trace_command(["/bin/sh", "-c", script], libs=[standin.nccl])
    # then
    assert run.returncode == 0, run.stderr
    pids = {int(m.group(2)): int(m.group(1)) for m in re.finditer(r"pid (\d+) rank (\d+)", run.stdout)}
    assert sorted(pids) == [0, 1, 2]
    rows = run.query(
        "SELECT rank, comm_rank, nranks, op, count(*) FROM nccl_calls WHERE op NOT LIKE 'ncclGroup%' "
        "GROUP BY pid, op ORDER BY rank, op"
    )
    per_rank: dict[int, dict[str, int]] = {}
    for rank, comm_rank, nranks, op, n in rows:
        assert comm_rank == rank and nranks == 3, (rank, comm_rank, nranks, op)
        per_rank.setdefault(int(rank), {})[str(op)] = int(n)
    for r in range(3):
        assert per_rank[r] == {
            "ncclAllReduce": 30,
            "ncclSend": 30,
            "ncclRecv": 30,
            "ncclBroadcast": 3,
            "ncclCommInitRank": 1,
            "ncclCommDestroy": 1,
        }, per_rank[r]
    # one communicator: the same unique-id hash in every rank
    assert run.query("SELECT count(DISTINCT comm_hash) FROM nccl_comms") == [(1,)]
    # per call: element count, bytes (float32), peers of the ring
    assert run.query("SELECT DISTINCT count, bytes, datatype FROM nccl_calls WHERE op = 'ncclAllReduce'") == [
        (1024, 4096, 7)
    ]
    sends = run.query("SELECT DISTINCT rank, peer FROM nccl_calls WHERE op = 'ncclSend' ORDER BY rank")
    assert sends == [(0, 1), (1, 2), (2, 0)]
    assert run.query("SELECT count(*) FROM events WHERE op = 'ncclGroupStart'") == [(90,)]
    # rank works as a plain filter on every event
    assert run.query("SELECT count(*) FROM events WHERE rank = 1 AND op = 'ncclAllReduce'") == [(30,)]


def test_graph_capture_instantiate_launch_can_be_followed_by_handle(build_workload, trace_command):
    exe = build_workload("graphs.c")
    run = trace_command([str(exe), "25", "3"])
    assert run.returncode == 0, run.stderr
    counts = run.op_counts()
    assert counts["cudaStreamBeginCapture"] == 4 and counts["cudaStreamEndCapture"] == 4
    assert counts["cudaGraphInstantiate"] == 4 and counts["cudaGraphLaunch"] == 28
    assert counts["cuStreamBeginCapture"] == 1 and counts["cuGraphInstantiate"] == 1 and counts["cuGraphLaunch"] == 1
    printed = re.search(r"graph (0x[0-9a-f]+) exec (0x[0-9a-f]+)", run.stdout)
    assert printed
    graph, exec_ = int(printed.group(1), 16), int(printed.group(2), 16)
    # capture -> instantiate -> launch, joined by handles in SQL
    chain = run.query(
        "SELECT count(*) FROM graph_events l JOIN graph_events i ON i.graph_exec = l.graph_exec "
        "AND i.op = 'cudaGraphInstantiate' JOIN graph_events c ON c.graph = i.graph AND c.op = 'cudaStreamEndCapture' "
        "WHERE l.op = 'cudaGraphLaunch' AND c.graph = ?",
        (graph,),
    )
    assert chain == [(25,)]
    assert run.query(
        "SELECT DISTINCT graph_exec FROM graph_events WHERE op = 'cudaGraphLaunch' AND graph_exec = ?", (exec_,)
    )
    assert run.query("SELECT capture_mode FROM graph_events WHERE op = 'cudaStreamBeginCapture' ORDER BY ts_ns") == [
        (0,),
        (2,),
        (2,),
        (2,),
    ]
