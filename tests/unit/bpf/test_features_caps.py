"""Whether this process may load tracing programs, read from its effective capabilities."""

from __future__ import annotations

from gpuscope.bpf.features import CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, effective_capabilities, may_load_bpf


def test_root_like_capabilities_or_bpf_with_perfmon_may_load_and_nothing_less_may() -> None:
    assert may_load_bpf(1 << CAP_SYS_ADMIN)
    assert may_load_bpf(1 << CAP_BPF | 1 << CAP_PERFMON)
    assert not may_load_bpf(1 << CAP_BPF)
    assert not may_load_bpf(1 << CAP_PERFMON)
    assert not may_load_bpf(0)


def test_the_effective_set_is_read_from_the_status_text() -> None:
    status = "Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t000000c000000000\nCapBnd:\t000001ffffffffff\n"
    assert effective_capabilities(status) == 1 << CAP_BPF | 1 << CAP_PERFMON
    assert effective_capabilities("Name:\tx\n") == 0
