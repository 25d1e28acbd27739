"""gpuscope diff: what changed between two recordings, significant regressions first."""

from __future__ import annotations

import argparse
import io
import json
import sys

from gpuscope.commands._options import add_filter_options, bounded_float, filter_from_args
from gpuscope.diff import Change, DiffOptions, DiffReport, OpDiff, diff_databases
from gpuscope.model.units import fmt_count, fmt_ns
from gpuscope.query import OutputFormat, add_output_options, chosen_format, write_rows
from gpuscope.query.output import write_table
from gpuscope.render.colour import write_styled

NAME = "diff"
HELP = "compare two recordings: per-op counts, rates, p50/p95/p99, significant regressions first"

_COLUMNS = [
    "op",
    "change",
    "calls_a",
    "calls_b",
    "rate_a",
    "rate_b",
    "p50_a",
    "p50_b",
    "p50_x",
    "p95_a",
    "p95_b",
    "p99_a",
    "p99_b",
    "p99_x",
    "p_value",
]
# On a terminal: what got worse in red, what got better in green.
_STYLES = (
    (r"\bregression\b", "red"),
    (r"\bimprovement\b", "green"),
    (r"^\d+ significant regression\(s\)", "bold red"),
    (r"^no significant regressions$", "green"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="the baseline recording (e.g. run41.db)")
    p.add_argument("b", help="the recording to compare with it (e.g. run42.db)")
    p.add_argument(
        "--alpha",
        type=bounded_float(0, 1, "a significance level", open_lo=True, open_hi=True),
        default=0.01,
        help="significance level over all ops (default 0.01)",
    )
    p.add_argument(
        "--min-ratio",
        type=bounded_float(1, 1e6, "a p50 ratio"),
        default=1.10,
        help="smallest p50 slowdown worth flagging (default 1.10 = 10%%)",
    )
    p.add_argument("--no-findings", action="store_true", help="skip running explain on both recordings")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any op regressed (for CI)")
    add_filter_options(p, node=True)  # applied to both recordings alike
    add_output_options(p, json_help="the whole report as one JSON object")


def run(args: argparse.Namespace) -> int:
    options = DiffOptions(alpha=args.alpha, min_p50_ratio=args.min_ratio)
    report = diff_databases(
        args.a, args.b, options, event_filter=filter_from_args(args), with_findings=not args.no_findings
    )
    fmt = chosen_format(args.output)
    if fmt is OutputFormat.JSON:
        print(json.dumps(report.as_dict(), indent=2))
    elif fmt is OutputFormat.TABLE:
        render(report)
    else:
        rows = ([o.as_dict()[k] for k in o.as_dict()] for o in report.ops)
        keys = list(report.ops[0].as_dict()) if report.ops else ["op"]
        write_rows(keys, rows, fmt, sys.stdout)
    return 1 if args.fail_on_regression and report.regressions else 0


def _x(r: float | None) -> str:
    return "" if r is None else f"{r:.2f}x"


def _table_row(o: OpDiff) -> list[str]:
    return [
        o.op,
        o.change.value,
        fmt_count(o.count_a),
        fmt_count(o.count_b),
        f"{o.rate_a:.1f}/s",
        f"{o.rate_b:.1f}/s",
        fmt_ns(o.p50_a),
        fmt_ns(o.p50_b),
        _x(o.p50_ratio),
        fmt_ns(o.p95_a),
        fmt_ns(o.p95_b),
        fmt_ns(o.p99_a),
        fmt_ns(o.p99_b),
        _x(o.p99_ratio),
        "" if o.p_value is None else f"{o.p_value:.1e}",
    ]


def render(report: DiffReport) -> None:
    """Print the report for people on stdout (coloured on a terminal), its notes on stderr."""
    write_styled(render_text(report), sys.stdout, _STYLES)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)


def render_text(report: DiffReport) -> str:
    """The report for people: the spans, the per-op table, the verdict, findings only in one side."""
    out = io.StringIO()
    out.write(f"A: {report.a} ({fmt_ns(report.span_a_ns)})\nB: {report.b} ({fmt_ns(report.span_b_ns)})\n\n")
    rows = [_table_row(o) for o in report.ops]
    write_table(_COLUMNS, rows, out)
    reg = report.regressions
    out.write("\n")
    if reg:
        worst = reg[0]
        out.write(
            f"{len(reg)} significant regression(s); worst: {worst.op} p50 {fmt_ns(worst.p50_a)} -> "
            f"{fmt_ns(worst.p50_b)} ({_x(worst.p50_ratio)})\n"
        )
    else:
        out.write("no significant regressions\n")
    out.write(f"(Mann-Whitney U on durations, alpha {report.alpha_per_op:.2g} per op after Bonferroni)\n")
    improved = [o.op for o in report.ops if o.change is Change.IMPROVEMENT]
    if improved:
        out.write(f"improved: {', '.join(improved)}\n")
    f = report.findings
    if f is not None:
        out.write("\nfindings only in A: " + (", ".join(f.only_a) or "none") + "\n")
        out.write("findings only in B: " + (", ".join(f.only_b) or "none") + "\n")
    return out.getvalue().removesuffix("\n")
