"""noisy-neighbour names the other container, from the containers (cgroups) table."""

from __future__ import annotations

from gpuscope.analysis.attribution import Attribution, Container
from gpuscope.analysis.context import Context
from gpuscope.analysis.rules.containers import ContainerNoisyNeighbourRule, NoisyNeighbourRule

from .builder import MS, Events, slow_syncs, steady_training

CID_B = "b" * 64


def _preempted_by_other_cgroup(ev: Events) -> None:
    slow_syncs(ev, steady_training(ev, 400), 4, 5 * MS, preempted=True, by_pid=999, by_cgroup=88)


def test_the_neighbour_is_named_by_its_container() -> None:
    # given a process in cgroup 7 (container A) preempted by pid 999 of cgroup 88 (container B)
    ev = Events(comms={100: "train", 999: "stress"})
    _preempted_by_other_cgroup(ev)
    frame, window = ev.frame()
    frame.cgroups[100] = 7
    att = Attribution(
        containers={
            7: Container(7, "/system.slice/docker-aaaa.scope", "a" * 64, "docker"),
            88: Container(88, f"/system.slice/docker-{CID_B}.scope", CID_B, "docker"),
        }
    )
    # when
    found = ContainerNoisyNeighbourRule().evaluate(Context(frame, window, attribution=att))
    # then
    assert len(found) == 1
    f = found[0]
    assert f.kind == "noisy-neighbour"
    assert f.symptom.extra["neighbour"] == f"docker container {CID_B[:12]}"
    assert f.symptom.extra["neighbour_container_id"] == CID_B
    assert f.symptom.extra["container"] == "docker container aaaaaaaaaaaa"
    assert CID_B[:12] in f.symptom.summary and CID_B[:12] in f.causes[0].evidence[0]
    assert f.severity == NoisyNeighbourRule().evaluate(Context(frame, window))[0].severity


def test_without_a_container_the_neighbour_is_named_by_cgroup() -> None:
    ev = Events(comms={100: "train", 999: "stress"})
    _preempted_by_other_cgroup(ev)
    found = ContainerNoisyNeighbourRule().evaluate(ev.context())
    assert [f.symptom.extra["neighbour"] for f in found] == ["cgroup 88"]
