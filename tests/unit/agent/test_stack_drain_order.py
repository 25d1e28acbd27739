"""The session names a batch of stacks only after reading the exec records committed before it."""

from __future__ import annotations

from typing import Any

from gpuscope.agent.session import TraceSession
from gpuscope.bpf.ringbuf import AuxRecord
from gpuscope.bpf.wire import AuxKind

EXE = b"/opt/job/train\0--steps\0100\0"


class _Rings:
    """A tracer whose program execs, and makes its first stack, between whatever two reads come first."""

    def __init__(self) -> None:
        self.attached: dict[int, Any] = {}
        self.aux: list[AuxRecord] = []
        self.stacks: list[bytes] = []
        self.reads = 0

    def _tick(self) -> None:
        self.reads += 1
        if self.reads == 1:  # the exec happens, and the program runs, right after the first read
            self.aux.append(AuxRecord(1, 4242, 4242, AuxKind.EXEC_ARGV, EXE))
            self.stacks.append(b"first stack of pid 4242")

    def read_aux(self) -> list[AuxRecord]:
        out, self.aux = self.aux, []
        self._tick()
        return out

    def read_stacks(self) -> list[bytes]:
        out, self.stacks = self.stacks, []
        self._tick()
        return out


class _Stacks:
    def __init__(self) -> None:
        self.known: set[int] = set()
        self.named: list[tuple[bytes, bool]] = []  # (stack, its program was known when it was named)

    def note_exec(self, pid: int, argv0: str) -> None:
        assert argv0 == "/opt/job/train"
        self.known.add(pid)

    def note_library(self, path: str) -> None:
        pass

    def drain(self, bodies: list[bytes], writer: object) -> int:
        self.named += [(b, 4242 in self.known) for b in bodies]
        return len(bodies)


class _Writer:
    def write(self, *args: object, **kwargs: object) -> None:
        pass


def test_a_stack_made_by_a_program_execd_during_a_drain_is_named_after_its_exec_record_is_read() -> None:
    # given a session whose traced program execs and makes its first stack while the session drains
    session = TraceSession.__new__(TraceSession)
    session.tracer = _Rings()  # type: ignore[assignment]
    stacks = _Stacks()
    session.stacks = stacks  # type: ignore[assignment]
    session.writer = _Writer()  # type: ignore[assignment]
    session.session_id = 1
    # when it drains twice (the stack may land in either batch, depending on when the exec happened)
    session._drain_stacks()
    session._drain_stacks()
    # then the stack was named, and by then the program's exec record had been read
    assert stacks.named == [(b"first stack of pid 4242", True)]
