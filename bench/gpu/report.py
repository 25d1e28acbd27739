"""Render bench/gpu/validate.py's results.json as the Markdown tables of docs/gpu-validation.md.

python bench/gpu/report.py bench/gpu/results/results.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

Json = dict[str, Any]


def overhead_table(step: Json, title: str) -> list[str]:
    """Median of each mode over the rounds, with every round's figure and the ratio to untraced."""
    figure = step.get("figure", "steps_per_s")
    runs: dict[str, list[Json]] = step.get("runs", {})
    medians = {m: statistics.median(r[figure] for r in rs if figure in r) for m, rs in runs.items() if rs}
    base = medians.get("untraced")
    higher_is_better = figure == "steps_per_s"
    unit = "steps/s" if higher_is_better else "µs per launch"
    out = [f"**{title}** ({unit}; median of {max(len(r) for r in runs.values())} interleaved rounds)", ""]
    out += ["| mode | median | rounds | vs untraced |", "|---|---:|---|---:|"]
    for mode, rs in runs.items():
        if mode not in medians:
            out.append(f"| {mode} | failed | | |")
            continue
        each = ", ".join(f"{r[figure]:.2f}" for r in rs if figure in r)
        if base is None:
            rel = ""
        elif higher_is_better:
            rel = f"{medians[mode] / base:.2f}×"
        else:
            rel = f"+{medians[mode] - base:.2f} µs" if mode != "untraced" else "—"
        out.append(f"| {mode} | {medians[mode]:.2f} | {each} | {rel} |")
    return [*out, ""]


def counts_table(step: Json) -> list[str]:
    out = ["| API | gpuscope | CUPTI | |", "|---|---:|---:|---|"]
    for row in step.get("api_rows", []):
        out.append(f"| `{row['api']}` | {row['gpuscope']:,} | {row['cupti']:,} | {'exact' if row['exact'] else '≠'} |")
    ln = step.get("launches_in_window", {})
    out += [
        "",
        f"Kernels CUPTI saw executed for the window's launches: {step.get('cupti_kernels', 0):,}; launches gpuscope "
        f"recorded at the driver layer: {ln.get('driver', 0):,} (runtime layer: {ln.get('runtime', 0):,}).",
        "",
        f"Memsets CUPTI saw executed: {step.get('cupti_memsets', 0):,}; recorded at the driver layer: "
        f"{step.get('memsets_in_window', {}).get('driver', 0):,} (runtime layer: "
        f"{step.get('memsets_in_window', {}).get('runtime', 0):,}).",
        "",
        "| what the script did | expected | recorded |",
        "|---|---:|---:|",
    ]
    for key, want in step.get("expected", {}).items():
        out.append(f"| {key} | {want:,} | {step.get('got', {}).get(key, 0):,} |")
    return [*out, ""]


def render(results: Json) -> str:
    steps: Json = results.get("steps", {})
    out: list[str] = []
    env = steps.get("environment", {})
    if env:
        t = env.get("torch") or {}
        out += [
            f"- GPU: {env.get('gpu')}; kernel {env.get('kernel')}; Python {env.get('python')}",
            f"- PyTorch {t.get('torch')} (CUDA {t.get('cuda')}, NCCL {t.get('nccl')}, cuDNN {t.get('cudnn')})",
            "",
        ]
    if "check" in steps:
        out += ["```", steps["check"].get("output", "").rstrip(), "```", ""]
    if "counts" in steps and steps["counts"].get("ok"):
        out += counts_table(steps["counts"])
    if "overhead_training" in steps:
        out += overhead_table(steps["overhead_training"], "Training loop")
    if "overhead_launches" in steps:
        out += overhead_table(steps["overhead_launches"], "Launch-bound loop")
    if "demo" in steps:
        rows = [ln for ln in steps["demo"].get("table", []) if "top finding:" not in ln]
        out += ["```", *rows, "```", ""]
    failed = [n for n, s in steps.items() if not s.get("ok")]
    if failed:
        out.append(f"Failed steps: {', '.join(failed)}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    a = ap.parse_args()
    try:
        results = json.loads(a.results.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {a.results}: {exc}", file=sys.stderr)
        return 2
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
