"""Detaching the probes: links close together, return probes before entry probes while a traced process runs."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from gpuscope.agent.tracer import Tracer
from gpuscope.bpf.loader import Link


class FakeLink(Link):
    """A link whose destroy waits for every other link of its step to be destroying too."""

    barrier: threading.Barrier | None = None
    log: list[str] | None = None

    def destroy(self, lib: object) -> None:
        if self.barrier is not None:
            self.barrier.wait(timeout=10)  # a BrokenBarrierError if the links go one by one
        assert self.log is not None
        self.log.append(self.description)


@dataclass
class FakeObject:
    links: list[Link] = field(default_factory=list)
    lib: object = None

    def detach_all(self) -> None:
        self.links.clear()


def _link(name: str, log: list[str], barrier: threading.Barrier | None = None) -> FakeLink:
    link = FakeLink(name)
    link.log, link.barrier = log, barrier
    return link


def _tracer(cuda: FakeObject, host: FakeObject, *, alive: bool = True) -> Tracer:
    tracer = Tracer.__new__(Tracer)  # no BPF: only what detach() touches
    tracer.targets_alive = lambda: alive  # type: ignore[method-assign]
    tracer._loads = None
    tracer._domains = {}
    tracer._cuda = cuda  # type: ignore[assignment]
    tracer._host = host  # type: ignore[assignment]
    tracer.attached = {}
    return tracer


def test_uprobe_links_are_destroyed_at_the_same_time_returns_first() -> None:
    # given two libraries' entry and return links, and a host tracepoint, while a traced process runs
    log: list[str] = []
    returns, entries = threading.Barrier(2), threading.Barrier(2)
    cuda = FakeObject(
        [
            _link("gs_cuda_entry@a", log, entries),
            _link("gs_cuda_return@a", log, returns),
            _link("gs_cuda_entry@b", log, entries),
            _link("gs_cuda_return@b", log, returns),
        ]
    )
    host = FakeObject([_link("gs_sched_switch", log)])
    # when detached (each barrier is passed only if its two links close together)
    _tracer(cuda, host).detach()
    # then every link is gone, both returns before any entry
    assert sorted(log) == sorted(
        ["gs_cuda_entry@a", "gs_cuda_return@a", "gs_cuda_entry@b", "gs_cuda_return@b", "gs_sched_switch"]
    )
    assert {log[0], log[1]} == {"gs_cuda_return@a", "gs_cuda_return@b"}
    assert cuda.links == [] and host.links == []


def test_once_no_traced_process_runs_every_link_is_destroyed_in_one_step() -> None:
    # given the same links, after every traced process has exited
    log: list[str] = []
    together = threading.Barrier(5)
    names = ["gs_cuda_entry@a", "gs_cuda_return@a", "gs_cuda_entry@b", "gs_cuda_return@b"]
    cuda = FakeObject([_link(n, log, together) for n in names])
    host = FakeObject([_link("gs_sched_switch", log, together)])
    # when detached (the barrier is passed only if all five links close at once)
    _tracer(cuda, host, alive=False).detach()
    # then every link is gone
    assert sorted(log) == sorted([*names, "gs_sched_switch"])
    assert cuda.links == [] and host.links == []
