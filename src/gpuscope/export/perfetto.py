"""Chrome Trace Event JSON for ui.perfetto.dev and chrome://tracing, written as a stream.

Layout: one process track per node (``pid`` = node number, named after the
node), one thread track per traced thread (``tid`` = the real thread id,
named ``comm [pid/tid]``). Calls with a duration are complete events
(``"ph": "X"``); entry-only records are thread-scoped instants. Findings are
global instant markers whose colour (``cname``) follows severity; where a
finding's cause is itself a slice (a preemption, a block I/O, a direct
reclaim), flow arrows (``"ph": "s"`` / ``"f"``) link cause slices to the
symptom calls they slowed. Per-op call rates and aggregated rows (page
allocations, whose "duration" is a counting interval, not a time spent) are
counter events (``"ph": "C"``) on each node's track, never slices.

Times are microseconds since the earliest session start, written with three
decimals so nanoseconds survive (a JSON double of absolute Unix µs would not).
Rows are read from the cursor and written one by one: memory stays constant
whatever the size of the recording (the set of seen threads aside).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from gpuscope.errors import UsageError
from gpuscope.export.base import ExportOptions, ExportStats
from gpuscope.export.flows import CAUSE_LINKS, MAX_LINKS_PER_FINDING, Span, flow_points, link_causes, symptom_pid
from gpuscope.model.ops import Op
from gpuscope.model.session_choice import LAST_RUN
from gpuscope.model.units import fmt_ns
from gpuscope.query.finding_sources import FindingMarker, explain_markers, stored_markers
from gpuscope.query.guarded import GuardedReader
from gpuscope.store.connect import database_path
from gpuscope.store.events_read import count_events, events_statement, export_rows, op_counts_by_interval
from gpuscope.store.imported_read import imported_chain_rows
from gpuscope.store.sessions_read import session_clocks, traced_roots

SEVERITY_COLORS = {"CRITICAL": "terrible", "HIGH": "bad", "MEDIUM": "yellow", "LOW": "good"}
_ENTRY_ONLY = 1


@dataclass(frozen=True, slots=True)
class AggregateCounter:
    """A counter track drawn from an aggregated op: its ``column`` per bucket, as a rate per second."""

    name: str
    column: str


# Ops whose rows are counts over an interval, not calls: one counter track per
# (name, process), never a slice (a 1 s slice on a thread track overlaps the
# thread's calls partially, and Perfetto drops improperly nested slices).
AGGREGATE_COUNTERS: dict[str, tuple[AggregateCounter, ...]] = {
    Op.mm_page_alloc.name: (
        AggregateCounter("page allocations/s", "arg0"),
        AggregateCounter("page-allocation bytes/s", "bytes"),
    ),
}


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


class _CounterTrack:
    """One counter name on one node, sampled per bucket.

    A counter holds its last value until the next sample, so a series gets a
    0 where it stops: in the first bucket it is absent from, and after the
    last one (``close``).
    """

    def __init__(self, writer: _Writer, name: str, pid: int, interval_ns: int) -> None:
        self.writer, self.name, self.pid, self.interval_ns = writer, name, pid, interval_ns
        self.last: int | None = None
        self.live: set[str] = set()

    def sample(self, bucket: int, values: dict[str, float]) -> None:
        if self.last is not None and bucket > self.last + 1:
            self.close()
        self.emit(bucket, {k: 0.0 for k in self.live if k not in values} | values)
        self.last, self.live = bucket, set(values)

    def close(self) -> None:
        if self.last is not None:
            self.emit(self.last + 1, dict.fromkeys(self.live, 0.0))
        self.live = set()

    def emit(self, bucket: int, args: dict[str, float]) -> None:
        if args:
            ts = float(us(bucket * self.interval_ns))
            self.writer.emit({"name": self.name, "ph": "C", "pid": self.pid, "tid": 0, "ts": ts, "args": args})
            self.writer.stats.counters += 1


class _Writer:
    def __init__(self, reader: GuardedReader, out: TextIO, options: ExportOptions) -> None:
        self.conn = reader.conn
        # explain --explain's markers are for the sessions the rows are (the last run unless --session).
        self.sessions = reader.sessions.choice if reader.sessions is not None else LAST_RUN
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
        # Per session, the traced processes as they become known (a fork comes before the child's events);
        # None: the session traced every process.
        self.traced: dict[int, set[int] | None] = {
            sid: None if roots is None else set(roots) for sid, roots in traced_roots(self.conn).items()
        }
        self.interval_ns = max(1, int(options.counter_interval_ns))
        self.cut_ts_ns: int | None = None  # with --max-events: every row before this ts_ns was written
        self.next_flow_id = 1

    def emit(self, obj: dict[str, Any]) -> None:
        self.out.write("\n" if self.first else ",\n")
        self.first = False
        self.out.write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))

    def run(self) -> ExportStats:
        self.out.write('{"traceEvents":[')
        self.write_events()
        self.write_findings()
        self.write_counters()
        self.write_aggregates()
        other = {
            "producer": "gpuscope export --format perfetto",
            "t0_wall_ns": self.t0,
            "events_written": self.stats.events_written,
            "events_cut": self.stats.events_cut,
            "flows": self.stats.flows,
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

    def thread(self, pid: int, tid: int, real_pid: int, comm: str | None, sid: int) -> None:
        if (pid, tid) in self.seen_threads:
            return
        self.seen_threads.add((pid, tid))
        traced = self.traced.get(sid)
        label = f"{comm or '?'} [{real_pid}/{tid}]"
        if traced is None or real_pid in traced:
            self.stats.threads += 1
        else:
            # Its block I/O or retransmits are here as possible causes of the job's waits, not as the job's.
            self.stats.other_threads += 1
            label = f"(not traced) {label}"
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
                self.cut_ts_ns = int(row[1])
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
            if op in AGGREGATE_COUNTERS:
                continue  # a counter track (write_aggregates), not a slice
            if op == "process_fork" and (traced := self.traced.get(sid)) is not None:
                traced.add(int(handle))
            if (pid, tid) not in self.seen_threads:
                self.thread(pid, tid, real_pid, comm, sid)
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
            markers = iter(explain_markers(database_path(self.conn), sessions=self.sessions))
            self.stats.findings_source = "explain"
        else:
            markers = stored_markers(self.conn)
            if markers is None:
                return
            self.stats.findings_source = "findings table"
        # Held (a run's few findings) so the flow queries do not interleave with the findings cursor.
        for m in list(markers):
            self.emit(self.marker(m))
            self.stats.findings += 1
            self.write_flows(m)
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

    def spans(self, ops: list[str]) -> Iterator[Span]:
        """The exported slices of ``ops``, in time order (rows cut by --max-events left out)."""
        st = events_statement(ops=ops)
        cur = self.conn.execute(st.sql, st.params)
        col = {d[0]: i for i, d in enumerate(cur.description)}
        i_sid, i_ts, i_dur, i_pid, i_tid = (col[c] for c in ("session_id", "ts_ns", "duration_ns", "pid", "tid"))
        i_op, i_arg0, i_stream, i_cg, i_flags = (col[c] for c in ("op", "arg0", "stream", "cgroup_id", "flags"))
        for r in cur:
            ts = int(r[i_ts])
            if self.cut_ts_ns is not None and ts >= self.cut_ts_ns:
                return
            dur = 0 if int(r[i_flags] or 0) & _ENTRY_ONLY else int(r[i_dur] or 0)
            yield Span(
                int(r[i_sid]), ts, ts + dur, int(r[i_pid]), int(r[i_tid]), str(r[i_op]),
                int(r[i_arg0] or 0), int(r[i_stream] or 0), int(r[i_cg] or 0),
            )  # fmt: skip

    def write_flows(self, m: FindingMarker) -> None:
        """Arrows from cause slices to the symptom calls they slowed most: a v1 flow, ``s`` then ``f``.

        v1 rather than ``bind_id`` on the slices: a slice holds one ``bind_id``
        (a cause may slow several calls), and the ends are written after the
        slices, once the pairs are known.
        """
        link, pid = CAUSE_LINKS.get(m.kind), symptom_pid(m)
        if link is None or pid is None or m.op is None:
            return
        pairs = link_causes(self.spans([m.op, *link.ops]), pid, m.op, link, MAX_LINKS_PER_FINDING)
        for call, cause in pairs:
            points = flow_points(call, cause)
            if points is None:
                continue
            node, offset = self.session_pid.get(call.sid, 0), self.session_offset.get(call.sid, -self.t0)
            common = {"name": m.key, "cat": "finding", "id": self.next_flow_id, "pid": node}
            self.emit({**common, "ph": "s", "tid": cause.tid, "ts": float(us(points[0] + offset))})
            self.emit({**common, "ph": "f", "bp": "e", "tid": call.tid, "ts": float(us(points[1] + offset))})
            self.next_flow_id += 1
            self.stats.flows += 1

    def write_counters(self) -> None:
        interval = self.interval_ns
        per_s = 1e9 / interval
        for sid, pid in self.session_pid.items():
            if pid not in self.seen_nodes:
                continue
            track = _CounterTrack(self, "calls/s", pid, interval)
            bucket: int | None = None
            rates: dict[str, float] = {}
            for _, b, op, n in op_counts_by_interval(self.conn, sid, self.session_offset[sid], interval):
                if op in AGGREGATE_COUNTERS:
                    continue  # a row per process and interval, not a call: write_aggregates counts what it holds
                if bucket is not None and b != bucket:
                    track.sample(bucket, rates)
                    rates = {}
                bucket = int(b)
                rates[str(op)] = round(int(n) * per_s, 3)
            if bucket is not None:
                track.sample(bucket, rates)
            track.close()

    def write_aggregates(self) -> None:
        """Aggregated rows as counters: each row's value spread evenly over its interval, summed per bucket.

        Rows come in time order, so a bucket before the current row's first
        one is complete: it is written and forgotten (memory stays flat).
        """
        interval = self.interval_ns
        per_s = 1e9 / interval
        st = events_statement(ops=sorted(AGGREGATE_COUNTERS))
        cur = self.conn.execute(st.sql, st.params)
        col = {d[0]: i for i, d in enumerate(cur.description)}
        tracks: dict[tuple[int, str], _CounterTrack] = {}
        pending: dict[int, dict[int, dict[tuple[str, str], float]]] = {}  # sid -> bucket -> (name, process) -> sum

        def flush(sid: int, before: int | None) -> None:
            buckets = pending.get(sid, {})
            node = self.session_pid.get(sid, 0)
            for b in sorted(x for x in buckets if before is None or x < before):
                by_name: dict[str, dict[str, float]] = {}
                for (name, who), v in buckets.pop(b).items():
                    by_name.setdefault(name, {})[who] = round(v * per_s, 3)
                for name, values in by_name.items():
                    track = tracks.get((sid, name))
                    if track is None:
                        self.node(node)
                        track = tracks[sid, name] = _CounterTrack(self, name, node, interval)
                    track.sample(b, values)

        for r in cur:
            sid = int(r[col["session_id"]])
            start = int(r[col["ts_ns"]]) + self.session_offset.get(sid, -self.t0)
            dur = max(0, int(r[col["duration_ns"]] or 0))
            who = f"{r[col['comm']] or '?'} [{r[col['pid']]}]"
            flush(sid, start // interval)
            buckets = pending.setdefault(sid, {})
            for counter in AGGREGATE_COUNTERS[str(r[col["op"]])]:
                value = float(r[col[counter.column]] or 0)
                for b, share in _spread(start, dur, interval):
                    slot = buckets.setdefault(b, {})
                    slot[counter.name, who] = slot.get((counter.name, who), 0.0) + value * share
        for sid in list(pending):
            flush(sid, None)
        for track in tracks.values():
            track.close()


MAX_SPREAD = 100_000  # buckets one aggregated row may cover: beyond, the interval is far too fine for a viewer


def _spread(start: int, dur: int, interval: int) -> Iterator[tuple[int, float]]:
    """(bucket, share of the row) for each bucket [start, start + dur) covers; all in one bucket when dur is 0.

    Raises UsageError when the row would cover more than MAX_SPREAD buckets.
    """
    if dur <= 0:
        yield start // interval, 1.0
        return
    end = start + dur
    if (end - 1) // interval - start // interval >= MAX_SPREAD:
        least = fmt_ns(-(-dur // MAX_SPREAD))
        raise UsageError(
            f"--counter-interval {fmt_ns(interval)}: a {fmt_ns(dur)} aggregated row would be cut into more than "
            f"{MAX_SPREAD:,} counter samples",
            remedy=f"use a --counter-interval of {least} or more (e.g. 1s, 100ms)",
        )
    for b in range(start // interval, (end - 1) // interval + 1):
        yield b, (min(end, (b + 1) * interval) - max(start, b * interval)) / dur
