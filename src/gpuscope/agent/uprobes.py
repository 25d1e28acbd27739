"""Attach the CUDA object's entry and return uprobes to offsets in one library file.

With uprobe_multi (kernel 6.6 and later) each direction is one link over every
offset; with classic uprobes, one link per offset and direction. ``Tracer``
(``gpuscope.agent.tracer``) decides what to probe and keeps the links.
"""

from __future__ import annotations

import os

from gpuscope.bpf.loader import BpfObject, Link
from gpuscope.bpf.wire import COOKIE_CALIBRATE


def attach_uprobes(
    cuda: BpfObject,
    path: str,
    offsets: list[int],
    cookies: list[int],
    *,
    multi: bool,
    entry_only: bool,
    returns_first: bool = True,
) -> list[Link]:
    """Entry (and return) probes on these offsets.

    returns_first: the return probes first, so that a call the entry probe sees always has its return seen
    (a sampled op's return without its entry is ignored; an entry without its return would stay on the
    thread's call stack). The probes attached at start keep the order they always had: entry first.
    """
    links: list[Link] = []
    directions = [False] if entry_only else ([True, False] if returns_first else [False, True])
    for ret in directions:
        prog = "gs_cuda_return" if ret else "gs_cuda_entry"
        if multi:
            links.append(cuda.attach_uprobe_multi(prog, path, offsets, cookies, retprobe=ret))
        else:
            for off, ck in zip(offsets, cookies, strict=True):
                links.append(cuda.attach_uprobe(prog, path, off, ck, retprobe=ret))
    return links


def attach_calibration_uprobes(
    cuda: BpfObject, path: str, offsets: list[int], *, multi: bool, retprobe: bool
) -> list[Link]:
    """Probes on the calibration library for this process alone: a record's work per hit, discarded."""
    cookies = [COOKIE_CALIBRATE] * len(offsets)
    prog = "gs_cuda_return" if retprobe else "gs_cuda_entry"
    if multi:
        return [cuda.attach_uprobe_multi(prog, path, offsets, cookies, retprobe=retprobe, pid=os.getpid())]
    return [cuda.attach_uprobe(prog, path, o, c, retprobe=retprobe) for o, c in zip(offsets, cookies, strict=True)]
