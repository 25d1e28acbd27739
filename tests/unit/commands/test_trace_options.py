"""gpuscope trace: unreadable option values are usage errors that name the flag, before anything is recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_gpuscope


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["-d", "abc"], "--duration"),
        (["--duration", "inf"], "--duration"),
        (["--keep-first", "x"], "--keep-first"),
        (["--keep-first=-3s"], "--keep-first"),
        (["--ring-size", "abc"], "--ring-size"),
        (["--ring-size", "3000"], "--ring-size"),
        (["--max-db", "zz"], "--max-db"),
        (["--hang-threshold", "soon"], "--hang-threshold"),
        (["--budget", "lots"], "--budget"),
        (["--budget", "0.5"], "--budget"),
        (["--budget=-1%"], "--budget"),
    ],
)
def test_an_unreadable_value_is_a_usage_error_naming_its_flag(args: list[str], flag: str, tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    res = run_gpuscope("trace", "--db", str(db), *args, "--", "true")
    assert res.returncode == 2, res.stderr
    first = res.stderr.splitlines()[0]
    assert first.startswith("error: ") and flag in first, res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert not db.exists()


@pytest.mark.parametrize(("text", "share"), [("1%", 0.01), ("0.5%", 0.005), ("0.02", 0.02), ("2%", 0.02)])
def test_a_budget_is_a_share_of_cpu_time(text: str, share: float) -> None:
    from gpuscope.commands._trace_setup import budget_arg

    assert budget_arg(text) == pytest.approx(share)


def test_a_budget_of_off_probes_every_call() -> None:
    from gpuscope.commands._trace_setup import budget_arg

    assert budget_arg("off") is None and budget_arg("0") is None


@pytest.mark.parametrize(("text", "hz"), [("49", 49), ("99hz", 99), ("off", 0), ("1", 1), ("999", 999)])
def test_a_sampling_rate_is_samples_a_second_or_off(text: str, hz: int) -> None:
    from gpuscope.commands._trace_setup import cpu_samples_arg

    assert cpu_samples_arg(text) == hz


@pytest.mark.parametrize("text", ["0.5", "1000", "-3", "fast"])
def test_a_sampling_rate_out_of_range_is_refused(text: str) -> None:
    from gpuscope.commands._trace_setup import cpu_samples_arg
    from gpuscope.errors import UsageError

    with pytest.raises(UsageError, match="--cpu-samples"):
        cpu_samples_arg(text)


@pytest.mark.parametrize(("budget", "hz"), [(None, 49), (0.01, 49), (0.005, 49), (0.002, 20), (0.001, 10)])
def test_the_default_rate_fits_a_small_budget(budget: float | None, hz: int) -> None:
    from gpuscope.commands._trace_setup import default_cpu_sample_hz

    # a quarter of the budget at ~25 µs a sample: 49 a second down to a 0.5% budget
    assert default_cpu_sample_hz(budget) == hz
