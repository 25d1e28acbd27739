"""Chrome Trace Event JSON for ui.perfetto.dev and chrome://tracing, written as a stream.

Layout: one process track per node (``pid`` = node number, named after the
node), one thread track per traced thread (``tid`` = the real thread id,
named ``comm [pid/tid]``). Calls with a duration are complete events
(``"ph": "X"``); entry-only records are thread-scoped instants. Findings are
global instant markers whose colour (``cname``) follows severity. Per-op
call rates are counter events (``"ph": "C"``) on each node's track.

Times are microseconds since the earliest session start, written with three
decimals so nanoseconds survive (a JSON double of absolute Unix µs would not).
Rows are read from the cursor and written one by one: memory stays constant
whatever the size of the recording (the set of seen threads aside).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from gpuscope.export.base import ExportOptions, ExportStats
from gpuscope.query.engine import GuardedReader
from gpuscope.query.findings import FindingMarker, explain_markers, stored_markers
from gpuscope.store.connect import database_path
from gpuscope.store.events_read import count_events, export_rows, op_counts_by_interval
from gpuscope.store.imported_read import imported_chain_rows
from gpuscope.store.sessions_read import session_clocks

SEVERITY_COLORS = {"CRITICAL": "terrible", "HIGH": "bad", "MEDIUM": "yellow", "LOW": "good"}
_ENTRY_ONLY = 1


def us(ns: int) -> str:
    """Nanoseconds as a decimal microsecond literal, exact (``1234567`` -> ``1234.567``)."""
    if ns < 0:
        return "-" + us(-ns)
    whole, frac = divmod(ns, 1000)
    return f"{whole}.{frac:03d}"


class PerfettoJsonExporter:
    name = "perfetto"
    description = "Chrome Trace Event JSON (opens in ui.perfetto.dev and chrome://tracing)"

    def export(self, reader: GuardedReader, out: TextIO, options: ExportOptions) -> ExportStats:
        """Write the whole (filtered) recording to ``out``; returns what was written and cut."""
        return _Writer(reader, out, options).run()


class _Writer:
    def __init__(self, reader: GuardedReader, out: TextIO, options: ExportOptions) -> None:
        self.conn = reader.conn
        self.out = out
        self.options = options
        self.stats = ExportStats()
        self.first = True
        sessions = session_clocks(self.conn)
        self.t0 = min((s.started_wall_ns for s in sessions), default=0)
        nodes: dict[str, int] = {}
        self.session_pid: dict[int, int] = {}
        self.session_offset: dict[int, int] = {}  # ts_ns -> ns since t0
        for s in sessions:
            self.session_pid[s.session_id] = nodes.setdefault(s.node, len(nodes) + 1)
            self.session_offset[s.session_id] = s.started_wall_ns - s.started_mono_ns - self.t0
        self.node_names = {v: k for k, v in nodes.items()}
        self.seen_nodes: set[int] = set()
        self.seen_threads: set[tuple[int, int]] = set()

    def emit(self, obj: dict[str, Any]) -> None:
        self.out.write("\n" if self.first else ",\n")
        self.first = False
        self.out.write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))

    def run(self) -> ExportStats:
        self.out.write('{"traceEvents":[')
        self.write_events()
        self.write_findings()
        self.write_counters()
        other = {
            "producer": "gpuscope export --format perfetto",
            "t0_wall_ns": self.t0,
            "events_written": self.stats.events_written,
            "events_cut": self.stats.events_cut,
        }
        if self.stats.events_cut:
            other["note"] = (
                f"--max-events {self.options.max_events}: the first {self.stats.events_written} events by time "
                f"are here, {self.stats.events_cut} later ones were cut (counters still count every event)"
            )
        self.out.write('\n],"displayTimeUnit":"ns","otherData":' + json.dumps(other) + "}\n")
        return self.stats

    def node(self, pid: int) -> None:
        if pid in self.seen_nodes:
            return
        self.seen_nodes.add(pid)
        self.stats.nodes += 1
        name = self.node_names.get(pid, f"node {pid}")
        self.emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"node {name}"}})
        self.emit({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})

    def thread(self, pid: int, tid: int, real_pid: int, comm: str | None) -> None:
        if (pid, tid) in self.seen_threads:
            return
        self.seen_threads.add((pid, tid))
        self.stats.threads += 1
        label = f"{comm or '?'} [{real_pid}/{tid}]"
        self.emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})

    def rows(self) -> Iterator[tuple[Any, ...]]:
        limit = self.options.max_events
        if limit is None:
            # Storage order, no sort: the viewer orders events itself.
            yield from export_rows(self.conn)
            return
        for n, row in enumerate(export_rows(self.conn, first_by_time=limit + 1)):
            if n == limit:
                self.stats.events_cut = count_events(self.conn) - limit
                return
            yield row

    def write_events(self) -> None:
        # The hot loop: one formatted line per row, no json.dumps per event
        # (names and categories are encoded once per op; args are integers).
        prefixes: dict[tuple[str, str, bool], str] = {}
        write = self.out.write
        for sid, ts, dur, real_pid, tid, comm, source, op, nbytes, ret, stream, handle, arg0, flags in self.rows():
            pid = self.session_pid.get(sid, 0)
            if pid not in self.seen_nodes:
                self.node(pid)
            if (pid, tid) not in self.seen_threads:
                self.thread(pid, tid, real_pid, comm)
            key = (str(op), str(source or "unknown"), arg0 == 1)
            prefix = prefixes.get(key)
            if prefix is None:
                name = key[0]
                if name == "sched_switch":
                    name = "off-CPU (preempted)" if key[2] else "off-CPU (blocked)"
                prefix = prefixes[key] = f'{{"name":{json.dumps(name)},"cat":{json.dumps(key[1])},'
            args = f'"pid":{real_pid}'
            if nbytes:
                args += f',"bytes":{nbytes}'
            if ret:
                args += f',"ret":{ret}'
            if stream and source != "host":
                args += f',"stream":{stream}'
            if handle:
                args += f',"handle":"{handle & 0xFFFF_FFFF_FFFF_FFFF:#x}"'
            rel = ts + self.session_offset.get(sid, -self.t0)
            if dur and not flags & _ENTRY_ONLY:
                body = f'"ph":"X","dur":{us(dur)}'
            else:
                body = '"ph":"i","s":"t"'
            write(
                ("\n" if self.first else ",\n")
                + f'{prefix}"pid":{pid},"tid":{tid},"ts":{us(rel)},{body},"args":{{{args}}}}}'
            )
            self.first = False
            self.stats.events_written += 1

    def write_findings(self) -> None:
        markers: Iterator[FindingMarker] | None
        if self.options.explain:
            markers = iter(explain_markers(database_path(self.conn)))
            self.stats.findings_source = "explain"
        else:
            markers = stored_markers(self.conn)
            if markers is None:
                return
            self.stats.findings_source = "findings table"
        for m in markers:
            self.emit(self.marker(m))
            self.stats.findings += 1
        # An imported reference file's own findings: marked as the reference's, in their own category.
        for rid, node, wall_ns, severity, summary, root_cause, op in imported_chain_rows(self.conn):
            ref = FindingMarker(rid, severity.upper() or "LOW", summary, wall_ns, {"root_cause": root_cause, "op": op})
            event = self.marker(ref)
            event["name"] = f"[reference {ref.severity}] {summary}"
            event["cat"] = "reference-finding"
            event["args"]["node"] = node
            self.emit(event)
            self.stats.findings += 1

    def marker(self, m: FindingMarker) -> dict[str, Any]:
        ts = us(max(0, m.wall_ns - self.t0)) if m.wall_ns is not None else "0.000"
        return {
            "name": f"[{m.severity}] {m.title}",
            "cat": "finding",
            "ph": "i",
            "s": "g",
            "pid": 0,
            "tid": 0,
            "ts": float(ts),
            "cname": SEVERITY_COLORS.get(m.severity, "grey"),
            "args": {"finding": m.key, "severity": m.severity, **m.args},
        }

    def write_counters(self) -> None:
        interval = max(1, int(self.options.counter_interval_ns))
        per_s = 1e9 / interval
        for sid, pid in self.session_pid.items():
            if pid not in self.seen_nodes:
                continue
            offset = self.session_offset[sid]
            bucket: int | None = None
            rates: dict[str, float] = {}
            previous: set[str] = set()
            for _, b, op, n in op_counts_by_interval(self.conn, sid, offset, interval):
                if bucket is not None and b != bucket:
                    previous = self.counter(pid, bucket, interval, rates, previous)
                    rates = {}
                bucket = int(b)
                rates[str(op)] = round(int(n) * per_s, 3)
            if bucket is not None:
                previous = self.counter(pid, bucket, interval, rates, previous)
                self.counter(pid, bucket + 1, interval, {}, previous)

    def counter(self, pid: int, bucket: int, interval: int, rates: dict[str, float], previous: set[str]) -> set[str]:
        # An op absent from this bucket is written as 0: a counter track holds
        # its last value until the next sample.
        args = {op: 0.0 for op in previous if op not in rates} | rates
        if args:
            self.emit(
                {"name": "calls/s", "ph": "C", "pid": pid, "tid": 0, "ts": float(us(bucket * interval)), "args": args}
            )
            self.stats.counters += 1
        return set(rates)
