"""Prove gpuscope on a real GPU: readiness, overhead against untraced and torch.profiler, counts against CUPTI,
CUDA Graphs, NCCL, Python stacks, and the demo scenarios on the GPU.

    sudo make gpu-validate                                   # writes bench/gpu/results/
    sudo PYTHONPATH=src python3 bench/gpu/validate.py --out DIR [--rounds 3] [--quick] [--only counts,features] [--demo NAME]

Needs root, an NVIDIA GPU and PyTorch with CUDA in the Python that runs it; no compiler (the BPF objects come
prebuilt in src/gpuscope/_bpf). Every step runs on its own and is recorded even when another fails: the results
(`results.json`, the log, two recordings) are what docs/gpu-validation.md is written from (bench/gpu/report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from counts import compare, cupti_counts, launches, memsets, recorded_counts, traced_pids  # noqa: E402

import gpuscope  # noqa: E402

WORKLOADS = HERE / "workloads"
Json = dict[str, Any]


class Harness:
    def __init__(self, out: Path, rounds: int, quick: bool, budget_s: float, demo_name: str | None = None) -> None:
        self.demo_name = demo_name
        self.deadline = time.monotonic() + budget_s
        self.out = out
        self.rounds = rounds
        self.quick = quick
        self.work = Path(tempfile.mkdtemp(prefix="gpuscope-gpu-"))
        self.results: Json = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "steps": {}}
        self.log = (out / "log.txt").open("w")
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), self.env.get("PYTHONPATH")]))
        self.env["PYTHONUNBUFFERED"] = "1"

    def say(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def run(self, argv: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str, str, float]:
        """Run one command in its own process group; a timeout kills the group. (rc, stdout, stderr, seconds)."""
        self.log.write("$ " + " ".join(argv) + "\n")
        t0 = time.monotonic()
        # The whole harness has a budget (a lent GPU host has a time limit): no run outlives it.
        timeout = min(timeout, max(self.deadline - t0, 1.0))
        try:
            p = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env or self.env,
                cwd=self.work,
                start_new_session=True,
            )
        except OSError as exc:
            self.log.write(f"cannot run: {exc}\n")
            return 127, "", str(exc), 0.0
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            err += f"\n(killed after {timeout:.0f} s)"
            p.returncode = 124
        secs = time.monotonic() - t0
        self.log.write(
            f"rc={p.returncode} in {secs:.1f} s\n--- stdout (tail)\n{out[-3000:]}\n--- stderr (tail)\n{err[-3000:]}\n"
        )
        self.log.flush()
        return p.returncode, out, err, secs

    def gpuscope(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "gpuscope", *args]

    def traced(self, db: Path, flags: list[str], command: list[str]) -> list[str]:
        return self.gpuscope("trace", "--no-tui", "--db", str(db), *flags, "--", *command)

    def step(self, name: str, fn: Callable[[], Json]) -> None:
        self.say(f"== {name}")
        t0 = time.monotonic()
        try:
            res = fn()
            res["ok"] = res.get("ok", True)
        except Exception as exc:  # a failed step is a result too; the others still run
            res = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        res["seconds"] = round(time.monotonic() - t0, 1)
        self.results["steps"][name] = res
        self.say(f"   {name}: {'ok' if res['ok'] else 'FAILED ' + str(res.get('error', ''))} ({res['seconds']} s)")
        self.save()

    def save(self) -> None:
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    # -- steps -------------------------------------------------------------

    def environment(self) -> Json:
        info: Json = {"python": sys.version.split()[0], "kernel": platform.release(), "machine": platform.machine()}
        rc, out, _, _ = self.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], 30
        )
        info["gpu"] = out.strip() if rc == 0 else None
        code = (
            "import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
            "'nccl': '.'.join(map(str, torch.cuda.nccl.version())), 'device': torch.cuda.get_device_name(0), "
            "'cudnn': torch.backends.cudnn.version()}))"
        )
        rc, out, err, _ = self.run([sys.executable, "-c", code], 120)
        info["torch"] = _json_line(out) if rc == 0 else {"error": err.strip()[-500:]}
        return info

    def check(self) -> Json:
        rc, out, err, _ = self.run(self.gpuscope("check"), 120)
        (self.out / "check.txt").write_text(out + err)
        return {"rc": rc, "ok": rc == 0, "output": out + err}

    def _modes(self, workload: list[str], extra_modes: dict[str, list[str]]) -> Json:
        """Each mode once per round, rotated, so drift hits them alike; the workload's own timer is the figure."""
        modes: dict[str, Callable[[Path], list[str]]] = {"untraced": lambda db: workload}
        for name, flags in extra_modes.items():
            if name == "torch.profiler":
                modes[name] = lambda db, f=flags: [*workload, *f]
            else:
                modes[name] = lambda db, f=flags: self.traced(db, f, workload)
        runs: dict[str, list[Json]] = {m: [] for m in modes}
        names = list(modes)
        for r in range(self.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for m in order:
                db = self.work / f"mode-{len(runs[m])}-{m.replace('.', '_')}.db"
                rc, out, err, secs = self.run(modes[m](db), 180)
                j = _json_line(out)
                runs[m].append({"rc": rc, "wall_s": round(secs, 2), **(j or {"error": err.strip()[-800:]})})
                self.say(f"   round {r + 1} {m:16s} rc={rc} {_figure(j)}  ({secs:.1f} s wall)")
                db.unlink(missing_ok=True)
        failed = sum(1 for rs in runs.values() for r in rs if r["rc"] != 0)
        return {"runs": runs, "ok": failed == 0, **({"error": f"{failed} run(s) failed"} if failed else {})}

    def overhead_training(self) -> Json:
        steps = "60" if self.quick else "400"
        # Warm-up steps (untimed) longer than the budget mode's first seconds, probed whole: the timed steps
        # are the steady state a job spends its hours in.
        warmup = "60" if self.quick else "300"
        res = self._modes(
            [sys.executable, str(WORKLOADS / "train.py"), "--steps", steps, "--warmup", warmup],
            {
                "gpuscope": ["--keep-first", "2s"],
                "gpuscope --record-all": ["--record-all"],
                "torch.profiler": ["--profile", "on"],
            },
        )
        res["figure"] = "steps_per_s"
        return res

    def overhead_launches(self) -> Json:
        n = "20000" if self.quick else "100000"
        res = self._modes(
            [sys.executable, str(WORKLOADS / "launches.py"), "--n", n, "--warmup-s", "4"],
            {
                "gpuscope": ["--keep-first", "2s"],
                "gpuscope --no-stack": ["--no-stack"],
                "gpuscope --record-all": ["--record-all"],
                "torch.profiler": ["--profile", "on"],
            },
        )
        res["figure"] = "us_per_launch"
        return res

    def counts(self) -> Json:
        """The same steps seen by gpuscope (every row) and by CUPTI (torch.profiler) at once."""
        db = self.work / "train.db"
        trace = self.work / "cupti.json"
        cmd = [
            sys.executable,
            str(WORKLOADS / "train.py"),
            "--steps",
            "30",
            "--profile",
            "on",
            "--trace-out",
            str(trace),
        ]
        rc, out, err, _ = self.run(self.traced(db, ["--record-all"], cmd), 240)
        j = _json_line(out)
        if rc != 0 or j is None:
            return {"ok": False, "rc": rc, "error": err.strip()[-1500:]}
        pids = traced_pids(db)
        pid = pids[0] if pids else None
        window = (int(j["window_ns"][0]), int(j["window_ns"][1]))
        rec = recorded_counts(db, pid, window)
        whole = recorded_counts(db, pid)
        cupti = cupti_counts(trace)
        rows = [asdict(c) | {"exact": c.exact} for c in compare(rec, cupti)]
        _copy_db(db, self.out / "train.db")
        made = j["made"]
        return {
            "workload": j,
            "pid": pid,
            "recorded_in_window": dict(rec),
            "recorded_whole_run": dict(whole),
            "cupti_runtime": dict(cupti.runtime),
            "cupti_driver": dict(cupti.driver),
            "cupti_kernels": cupti.kernels,
            "cupti_memcpys": cupti.memcpys,
            "cupti_memsets": cupti.memsets,
            "launches_in_window": launches(rec),
            "memsets_in_window": memsets(rec),
            "api_rows": rows,
            # What the script itself did: every .item() and the GradScaler's found_inf read wait on a stream;
            # torch.cuda.synchronize() is a device-wide wait.
            "expected": {
                "cudaDeviceSynchronize": made["synchronize"],
                "cudaStreamSynchronize": made["item"] + j["scaler_steps"],
                "cudaMalloc (whole run) = segment.all.allocated": j["segments_total"],
            },
            "got": {
                "cudaDeviceSynchronize": rec["cudaDeviceSynchronize"],
                "cudaStreamSynchronize": rec["cudaStreamSynchronize"],
                "cudaMalloc (whole run) = segment.all.allocated": whole["cudaMalloc"],
            },
        }

    def features(self) -> Json:
        db = self.work / "features.db"
        rc, out, err, _ = self.run(
            self.traced(db, ["--record-all"], [sys.executable, str(WORKLOADS / "features.py")]), 240
        )
        j = _json_line(out)
        if rc != 0 or j is None:
            return {"ok": False, "rc": rc, "error": err.strip()[-1500:]}
        _copy_db(db, self.out / "features.db")
        t = gpuscope.open(db, frame="rows")
        pids = traced_pids(db)
        pid = pids[0] if pids else None
        comms = t.query(
            "SELECT op, handle, arg0 AS rank, arg1 AS nranks FROM events WHERE pid = ? AND op LIKE 'ncclCommInit%'",
            [pid],
        )
        rec = recorded_counts(db, pid)
        replays = recorded_counts(db, pid, (int(j["replay_window_ns"][0]), int(j["replay_window_ns"][1])))
        frames = t.query(
            "SELECT e.op AS op, f.line AS line, count(*) AS n FROM event_call_stacks e "
            "JOIN stack_frames f ON f.stack_hash = e.stack_hash "
            "WHERE e.pid = ? AND f.kind = 'python' AND f.file = ? GROUP BY 1, 2 ORDER BY 3 DESC",
            [pid, j["file"]],
        )
        # Collectives carry the rank and size of their communicator (nccl_calls joins them to its init).
        ranks = t.query(
            "SELECT op, comm_rank, nranks, count(*) AS n FROM nccl_calls WHERE pid = ? GROUP BY 1, 2, 3", [pid]
        )
        return {
            "workload": j,
            "pid": pid,
            "comm_init": comms,
            "ranks": ranks,
            "recorded": dict(rec),
            "launches_in_replay_window": launches(replays),
            "python_frames_in_script": frames,
            "sites": j["sites"],
        }

    def explain(self) -> Json:
        db = self.out / "train.db"
        if not db.exists():
            return {"ok": False, "error": "no training recording (the counts step failed)"}
        rc, out, err, _ = self.run(self.gpuscope("explain", "--db", str(db)), 120)
        rc2, out2, err2, _ = self.run(
            self.gpuscope("stacks", "--db", str(db), "--op", "cudaMalloc", "--limit", "3"), 120
        )
        return {"rc": rc, "ok": rc == 0 and rc2 == 0, "explain": (out + err)[-6000:], "stacks": (out2 + err2)[-4000:]}

    def demo(self) -> Json:
        db = self.work / "demo.db"
        scale = "0.4" if self.quick else "0.6"
        names = [self.demo_name] if self.demo_name else []
        rc, out, err, _ = self.run(self.gpuscope("demo", "--gpu", "--scale", scale, "--db", str(db), *names), 600)
        (self.out / "demo.txt").write_text(out + err)
        table = [ln for ln in out.splitlines() if ln[:1] in ("✓", "✗") and "top finding:" not in ln]
        return {"rc": rc, "ok": rc == 0 and bool(table) and all(ln.startswith("✓") for ln in table), "table": table}


def _copy_db(src: Path, dst: Path) -> None:
    """One self-contained file (the write-ahead log folded in), read through a read-only connection."""
    dst.unlink(missing_ok=True)
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as a, sqlite3.connect(dst) as b:
        a.backup(b)


def _json_line(out: str) -> Json | None:
    """The workload's one JSON object: the last stdout line that parses as one (gpuscope prints beside it)."""
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def _figure(j: Json | None) -> str:
    if not j:
        return "no result"
    if "steps_per_s" in j:
        return f"{j['steps_per_s']:.2f} steps/s"
    return f"{j.get('us_per_launch', float('nan')):.3f} us/launch"


STEPS = ("environment", "check", "counts", "features", "explain", "overhead_training", "demo", "overhead_launches")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "gpu" / "results")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="shorter runs (a smoke test of the harness)")
    ap.add_argument("--only", help=f"comma-separated steps of: {', '.join(STEPS)}")
    ap.add_argument("--budget", type=float, default=1800, help="seconds for everything (default 1800)")
    ap.add_argument("--demo", metavar="NAME", help="run this demo scenario only (default: all)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("error: gpu validation traces with eBPF: run it as root (sudo)", file=sys.stderr)
        return 2
    chosen = a.only.split(",") if a.only else list(STEPS)
    unknown = sorted(set(chosen) - set(STEPS))
    if unknown:
        print(f"error: unknown step(s) {', '.join(unknown)}; steps: {', '.join(STEPS)}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    h = Harness(a.out, a.rounds, a.quick, a.budget, a.demo)
    for name in STEPS:
        if name in chosen:
            h.step(name, getattr(h, name))
    h.results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    h.save()
    failed = [n for n, r in h.results["steps"].items() if not r.get("ok")]
    h.say(f"results in {a.out}; " + (f"failed: {', '.join(failed)}" if failed else "every step ok"))
    shutil.rmtree(h.work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
