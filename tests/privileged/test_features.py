"""Kernel feature probes: the quick probe the tracer uses agrees with attaching a real link."""

from __future__ import annotations

from gpuscope.bpf import features


def test_the_quick_uprobe_multi_probe_agrees_with_attaching_a_real_link() -> None:
    # given this kernel, probed the quick way (a stub program and a link refused at its path)
    features.probe_uprobe_multi.cache_clear()
    quick = features.probe_uprobe_multi()
    # and the sure way (a real link on a libc function, then detached)
    real = features.attach_uprobe_multi_link()
    # then both say the same
    assert quick.available == real.available, (quick, real)
    assert quick.available, "this project's test machines run Linux 6.6+"
