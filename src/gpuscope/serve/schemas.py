"""The JSON schemas of /api/v1's answers, as its OpenAPI document publishes them.

Each answer's top-level properties are typed and required (the keys every
answer carries); the rows of the main lists are typed too. Rows read with
``SELECT *`` (containers, CUDA Graph events, imported snapshots) follow the
recording's schema (``gpuscope docs schema``) and are only said to be
objects. ``tests/serve/test_schemas.py`` validates real answers against these.
A column SQLite may leave NULL is typed nullable.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
STR: Schema = {"type": "string"}
BOOL: Schema = {"type": "boolean"}
OBJECT: Schema = {"type": "object"}


def nullable(schema: Schema) -> Schema:
    return {**schema, "type": [schema["type"], "null"]}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def obj(properties: dict[str, Schema], *, optional: tuple[str, ...] = ()) -> Schema:
    """An object with these typed properties, all required but the ``optional`` ones; others may be added."""
    return {"type": "object", "properties": properties, "required": [k for k in properties if k not in optional]}


N_INT, N_NUM, N_STR = nullable(INT), nullable(NUM), nullable(STR)
NOTES = array(STR)

WINDOW = obj(
    {
        "start_ns": INT,
        "end_ns": INT,
        "start_wall_ns": INT,
        "end_wall_ns": INT,
        "length_ns": INT,
        "recording_start_ns": INT,
        "recording_end_ns": INT,
        "session_ids": array(INT),
        "events": INT,
    }
)
SAMPLING = nullable(OBJECT)  # the overhead budget's summary; null for a recording traced without one
FINDING = obj(
    {
        "id": STR,
        "severity": {"type": "string", "enum": ["LOW", "MEDIUM", "HIGH", "CRITICAL"]},
        "kind": STR,
        "rule": STR,
        "symptom": obj(
            {"summary": STR, "op": N_STR, "pid": N_INT, "comm": N_STR, "count": INT, "p50_ns": INT, "p99_ns": INT}
        ),
        "causes": array(
            obj(
                {
                    "kind": STR,
                    "evidence": array(STR),
                    "effect": OBJECT,
                    "culprits": array(OBJECT),
                    # Only on a cause measured call by call: its op's calls by duration (docs/explain.md).
                    "histogram": obj({"edges_ns": array(INT), "affected": array(INT), "unaffected": array(INT)}),
                    # Only on a cause measured over time instead: a rate that fell, the GPU's idle share.
                    "series": obj({"label": STR, "unit": STR, "start_ns": INT, "bin_ns": INT, "values": array(NUM)}),
                },
                optional=("histogram", "series"),
            )
        ),
        "fix": STR,
        "impact": obj({"lost_ns": INT, "wall_ns": INT, "lost_share": NUM}),
        "caveats": array(OBJECT),
        # The time it covers, in the window's clock (start_ns/end_ns); absent where its rule knows none.
        "span": obj({"start_ns": INT, "end_ns": INT}),
    },
    optional=("span",),
)
OP_STATS = obj(
    {
        "op": STR,
        "pid": N_INT,
        "count": INT,
        "total_ns": INT,
        "p50_ns": INT,
        "p95_ns": INT,
        "p99_ns": INT,
        "max_ns": INT,
        "time_share": NUM,
        "rate_per_s": NUM,
        "estimated": BOOL,
        "coverage": NUM,
        "seen": N_INT,
    },
    optional=("estimated", "coverage", "seen"),  # only on ops probed in windows under the overhead budget
)

TIME = obj({"timestamp_ns": INT})
OVERVIEW = obj(
    {
        "version": STR,
        "recording": STR,
        "baseline": N_STR,  # the recording the page compares with (--baseline), else null
        "sessions": array(obj({"id": INT, "node": N_STR, "started_wall_ns": N_INT, "stopped_wall_ns": N_INT})),
        "nodes": array(STR),
        "window": WINDOW,
        "events": INT,
        "recording_state": nullable(OBJECT),
        "finding_counts": {"type": "object", "additionalProperties": INT},
        "top_finding": {"anyOf": [FINDING, {"type": "null"}]},
        "notes": NOTES,
        "sampling": SAMPLING,
    }
)
OPS = obj({"window": WINDOW, "ops": array(OP_STATS), "notes": NOTES, "sampling": SAMPLING})
FINDINGS = obj(
    {
        "window": WINDOW,
        "findings": array(FINDING),
        "reference_findings": array(OBJECT),
        "notes": NOTES,
        "caveats": array(OBJECT),
    }
)
PROCESSES = obj(
    {
        "processes": array(
            obj(
                {
                    "pid": INT,
                    "comm": N_STR,
                    "cmdline": N_STR,
                    "node": N_STR,
                    "events": INT,
                    "first_wall_ns": N_INT,
                    "last_wall_ns": N_INT,
                    "cgroup_id": N_INT,
                }
            )
        )
    }
)
CONTAINERS = obj({"containers": array(OBJECT)})
STACKS = obj(
    {
        "stacks": array(
            obj(
                {
                    "op": STR,
                    "calls": INT,
                    "share": NUM,
                    "total_duration_ns": INT,
                    "call_site": N_STR,
                    "frames": array(STR),
                    "marker": N_STR,
                }
            )
        )
    }
)
PROFILE = obj(
    {
        "hz": N_INT,
        "samples": INT,
        "estimated_cpu_s": N_NUM,
        "estimate": {"const": True},
        "top_functions": array(obj({"function": STR, "file": N_STR, "line": N_INT, "samples": INT, "share": NUM})),
        "stacks": array(obj({"pid": INT, "tid": INT, "samples": INT, "share": NUM, "frames": array(STR)})),
        # A flame graph's tree: each node's children are the same shape (gpuscope.stacks.flame).
        "flame": obj({"name": STR, "samples": INT, "children": array(OBJECT)}),
        "notes": NOTES,
    }
)
SPEEDSCOPE = obj(
    {
        "$schema": STR,
        "name": STR,
        "exporter": STR,
        "activeProfileIndex": INT,
        "shared": obj({"frames": array(OBJECT)}),
        "profiles": array(
            obj({"type": STR, "name": STR, "unit": STR, "samples": array(array(INT)), "weights": array(INT)})
        ),
    }
)
EVENTS = obj(
    {
        "events": array(
            obj(
                {
                    "id": INT,
                    "event_id": N_STR,
                    "node": N_STR,
                    "wall_ns": INT,
                    "pid": INT,
                    "tid": N_INT,
                    "comm": N_STR,
                    "source": STR,
                    "op": STR,
                    "duration_ns": N_INT,
                    "ret": N_INT,
                    "bytes": N_INT,
                }
            )
        ),
        "next_after": N_INT,
    }
)
TIMELINE = obj(
    {
        "start_wall_ns": N_INT,
        "end_wall_ns": N_INT,
        "bucket_ns": N_INT,
        "series": array(
            obj(
                {
                    "op": STR,
                    "source": STR,
                    # [bucket, calls, mean_ns, max_ns]
                    "points": array(
                        {"type": "array", "prefixItems": [INT, INT, INT, N_INT], "minItems": 4, "maxItems": 4}
                    ),
                }
            )
        ),
    }
)
DIFF = obj(
    {
        "baseline": N_STR,  # null: served without --baseline (the answer is empty, its note says so)
        "recording": STR,
        "a": STR,
        "b": STR,
        "span_a_ns": INT,
        "span_b_ns": INT,
        "alpha_per_op": NUM,
        "ops": array(
            obj(
                {
                    "op": STR,
                    "change": STR,
                    "count_a": INT,
                    "count_b": INT,
                    "p50_a_ns": INT,
                    "p50_b_ns": INT,
                    "p99_a_ns": INT,
                    "p99_b_ns": INT,
                    "p50_ratio": N_NUM,
                    "p99_ratio": N_NUM,
                }
            )
        ),
        "notes": NOTES,
        "findings": obj({"only_a": array(STR), "only_b": array(STR), "both": array(STR)}),
    },
    optional=("a", "b", "span_a_ns", "span_b_ns", "alpha_per_op", "findings"),
)
CALLS = obj(
    {
        "start_wall_ns": N_INT,
        "end_wall_ns": N_INT,
        "calls": array(
            obj(
                {
                    "id": INT,
                    "session_id": INT,
                    "ts_ns": INT,
                    "wall_ns": INT,
                    "duration_ns": INT,
                    "pid": INT,
                    "tid": INT,
                    "comm": N_STR,
                    "op": N_STR,
                    "source": N_STR,
                    "ret": INT,
                    "bytes": INT,
                    "stream": INT,
                    "frames": nullable(array(STR)),
                }
            )
        ),
    }
)
LANES = obj(
    {
        "start_wall_ns": N_INT,
        "end_wall_ns": N_INT,
        "width": INT,
        "lanes": array(
            obj(
                {
                    "pid": INT,
                    "tid": INT,
                    "comm": N_STR,
                    "gpu_ns": INT,
                    # each: one share in [0, 1] per pixel interval
                    "gpu": array(NUM),
                    "preempted": array(NUM),
                    "blocked": array(NUM),
                    # who held its CPU while it was preempted, most time first
                    "preemptors": array(obj({"pid": INT, "comm": N_STR, "ns": INT})),
                    # its shares in NCCL calls (null: it made none), and its process's rank where known
                    "nccl": nullable(array(NUM)),
                    "rank": N_INT,
                    "reclaim": nullable(array(NUM)),  # its shares in direct memory reclaim (null: none)
                    # per pixel, the index into ops of the op with the most call time there (-1: none)
                    "ops": array(STR),
                    "top_op": nullable(array(INT)),
                    # per pixel, the index into held_by of who held its CPU most while it was preempted there
                    "held_by": array(obj({"pid": INT, "comm": N_STR})),
                    "top_preemptor": nullable(array(INT)),
                }
            )
        ),
    }
)
GRAPH_EVENTS = obj({"graph_events": array(OBJECT)})
GRAPH_METRICS = obj(
    {
        "ops": array(
            obj(
                {
                    "op": STR,
                    "count": INT,
                    "first_wall_ns": N_INT,
                    "last_wall_ns": N_INT,
                    "total_ns": N_INT,
                    "rate_per_s": N_NUM,
                }
            )
        )
    }
)
SNAPSHOTS = obj(
    {"snapshots": array(OBJECT), "source": {"enum": ["recorded", "imported"]}, "note": STR},
    optional=("source", "note"),  # a source when there are samples, a note saying why when there are none
)
COLLECTIVES = obj(
    {
        "nodes": array(STR),
        "window": WINDOW,
        "columns": array(STR),
        "communicators": array(obj({"comm_hash": N_STR, "members": array(OBJECT)})),
        "processes": {"type": "object", "additionalProperties": N_STR},
    }
)
CAPABILITIES = obj(
    {
        "capabilities": array(
            obj(
                {"id": STR, "label": STR, "available": BOOL, "events": INT, "planned": BOOL},
                optional=("events", "planned"),
            )
        )
    }
)
QUERY = obj({"columns": array(STR), "rows": array(array({})), "truncated": BOOL})
