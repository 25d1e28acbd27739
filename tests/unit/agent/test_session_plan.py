"""A session's plan is settled and checked before a probe is loaded or a file opened."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.agent.options import TraceOptions
from gpuscope.agent.session_plan import SessionPlan


def test_named_libraries_are_traced_alone_so_no_library_loaded_later_is_attached(tmp_path: Path) -> None:
    plan = SessionPlan.build(TraceOptions(late_loads=True), tmp_path / "t.db", libraries=["/lib/libcudart.so.12"])
    assert plan.opts.late_loads is False
    assert plan.libraries == ("/lib/libcudart.so.12",)


def test_without_named_libraries_the_options_are_kept_as_given(tmp_path: Path) -> None:
    opts = TraceOptions(late_loads=True, hold=False)
    assert SessionPlan.build(opts, tmp_path / "t.db").opts is opts


def test_the_node_is_the_hosts_name_unless_named_and_the_home_in_the_path_is_expanded() -> None:
    assert SessionPlan.build(TraceOptions(), "~/t.db").node == socket.gethostname()
    plan = SessionPlan.build(TraceOptions(), "~/t.db", node="rack1-gpu3")
    assert plan.node == "rack1-gpu3"
    assert plan.db_path == Path.home() / "t.db"


def test_an_empty_command_is_no_command(tmp_path: Path) -> None:
    assert SessionPlan.build(TraceOptions(), tmp_path / "t.db", command=[]).command is None
    assert SessionPlan.build(TraceOptions(), tmp_path / "t.db", command=["python", "x.py"]).command == (
        "python",
        "x.py",
    )


def test_only_a_command_without_named_libraries_defers_attaching_to_its_first_load(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert SessionPlan.build(TraceOptions(), db, command=["train"]).defers_attach
    assert not SessionPlan.build(TraceOptions(), db, command=["train"], libraries=["/l.so"]).defers_attach
    assert not SessionPlan.build(TraceOptions(), db).defers_attach


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_db_bytes", -1), ("keep_first_s", -0.5), ("budget", 0.0), ("budget", 1.5)],
)
def test_a_value_no_session_can_record_with_is_refused_when_the_plan_is_made(
    tmp_path: Path, field: str, value: float
) -> None:
    with pytest.raises(ValueError, match=field):
        SessionPlan.build(TraceOptions(), tmp_path / "t.db", **{field: value})  # type: ignore[arg-type]


def test_a_plan_over_named_libraries_that_would_follow_late_loads_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="named libraries"):
        SessionPlan(TraceOptions(late_loads=True), tmp_path / "t.db", "n1", libraries=("/l.so",))


def test_the_plan_is_light_enough_to_build_before_the_probes_start_loading() -> None:
    # numpy and the store would delay the verifier's start in `gpuscope trace`
    probe = (
        "import json, sys\n"
        "import gpuscope.agent.session_plan, gpuscope.commands._trace_setup, gpuscope.agent.traced_command\n"
        "print(json.dumps(sorted(m for m in ('numpy', 'sqlite3', 'gpuscope.agent.session') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
