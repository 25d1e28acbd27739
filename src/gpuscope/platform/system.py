"""Host CPU, memory, load and swap, read from /proc: the live view's system bar and the recording's samples."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SystemStats:
    """One reading. ``cpu_pct`` is None on the first reading (a rate needs two)."""

    cpu_pct: float | None = None
    mem_pct: float = 0.0
    mem_available_bytes: int = 0
    load1: float = 0.0
    swap_used_bytes: int = 0
    cpus: int = 0


def parse_cpu_times(stat_text: str) -> tuple[int, int]:
    """(busy, total) jiffies from the aggregate ``cpu`` line of /proc/stat."""
    for line in stat_text.splitlines():
        if line.startswith("cpu "):
            vals = [int(v) for v in line.split()[1:]]
            # user nice system idle iowait irq softirq steal guest guest_nice;
            # guest times are already counted in user/nice.
            total = sum(vals[:8])
            idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
            return total - idle, total
    return 0, 0


def parse_meminfo(text: str) -> dict[str, int]:
    """Fields of /proc/meminfo in bytes."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


class SystemSampler:
    """Read the system bar's numbers; CPU % is over the time since the previous call.

    proc: the proc filesystem root (tests point it at a directory of fixtures).
    """

    def __init__(self, proc: str | Path = "/proc") -> None:
        self.proc = Path(proc)
        self._last_cpu: tuple[int, int] | None = None

    def _read(self, name: str) -> str:
        try:
            return (self.proc / name).read_text()
        except OSError:
            return ""

    def sample(self) -> SystemStats:
        stat = self._read("stat")
        busy, total = parse_cpu_times(stat)
        cpu_pct = None
        if self._last_cpu is not None and total > self._last_cpu[1]:
            cpu_pct = 100.0 * (busy - self._last_cpu[0]) / (total - self._last_cpu[1])
        self._last_cpu = (busy, total)
        mem = parse_meminfo(self._read("meminfo"))
        mem_total = mem.get("MemTotal", 0)
        available = mem.get("MemAvailable", mem.get("MemFree", 0))
        load = self._read("loadavg").split()
        return SystemStats(
            cpu_pct=cpu_pct,
            mem_pct=100.0 * (mem_total - available) / mem_total if mem_total else 0.0,
            mem_available_bytes=available,
            load1=float(load[0]) if load else 0.0,
            swap_used_bytes=max(mem.get("SwapTotal", 0) - mem.get("SwapFree", 0), 0),
            cpus=sum(1 for line in stat.splitlines() if line.startswith("cpu") and line[3:4].isdigit()),
        )


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_process_cpu_ns(stat_text: str) -> int:
    """A process's CPU time (user + system, all its threads) in ns from the text of /proc/PID/stat.

    The fields after the command name, which may hold spaces and parentheses, start after its last ')'.
    """
    fields = stat_text[stat_text.rindex(")") + 2 :].split()
    # fields[0] is the state (field 3 of proc(5)): utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // _CLK_TCK


def process_cpu_ns(pid: int, proc: str = "/proc") -> int | None:
    """The CPU time a process has used so far, in ns; None when it is gone or unreadable."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            return parse_process_cpu_ns(f.read())
    except (OSError, ValueError, IndexError):
        return None
