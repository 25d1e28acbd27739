"""The profile's shapes: the flame graph's tree (samples merged by frame from the outermost, small parts cut but
still counted) and the hot functions (unnamed code is never credited to its caller)."""

from __future__ import annotations

from typing import Any

from gpuscope.stacks.flame import MIN_SHARE, flame_tree
from gpuscope.stacks.frames import Frame
from gpuscope.stacks.profile import UNNAMED_PYTHON, CpuProfile, ProfileStack, top_functions


def _py(*names: str) -> tuple[Frame, ...]:
    """Python frames, innermost first (as stacks are stored), from names given outermost first."""
    return tuple(Frame("python", function=n, file="train.py", line=i) for i, n in reversed(list(enumerate(names))))


def _child(node: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in node["children"] if c["name"] == name)
    return found


def test_stacks_through_the_same_frames_merge_and_each_node_counts_every_sample_under_it() -> None:
    # given 30 samples in main > step > collate, 10 in main > step > forward, 5 in another process's loop
    profile = CpuProfile(
        (
            ProfileStack(100, 100, 30, _py("main", "step", "collate")),
            ProfileStack(100, 101, 10, _py("main", "step", "forward")),
            ProfileStack(200, 200, 5, _py("loop")),
        ),
        99,
    )
    # when made a tree, processes named
    tree = flame_tree(profile, {100: "train", 200: "infer"})
    # then the root holds every sample, each process its own, and shared frames merge
    assert tree["name"] == "all" and tree["samples"] == 45
    train = _child(tree, "train 100")
    assert train["samples"] == 40 and _child(tree, "infer 200")["samples"] == 5
    step = _child(_child(train, "main"), "step")
    assert step["samples"] == 40
    # and children come widest first
    assert [(c["name"], c["samples"]) for c in step["children"]] == [("collate", 30), ("forward", 10)]


def test_parts_under_the_minimum_share_are_cut_but_still_counted_in_their_parent() -> None:
    # given one stack of 10,000 samples and one of a single sample under the same frame
    big, small = int(1 / MIN_SHARE) * 20, 1
    profile = CpuProfile(
        (ProfileStack(1, 1, big, _py("main", "hot")), ProfileStack(1, 1, small, _py("main", "rare"))), 99
    )
    tree = flame_tree(profile)
    main = _child(_child(tree, "pid 1"), "main")
    # then the rare frame is left out, and main still counts its sample
    assert [c["name"] for c in main["children"]] == ["hot"]
    assert main["samples"] == big + small


def test_time_in_unnamed_python_code_is_its_own_not_its_callers() -> None:
    # given samples whose innermost Python frame's code was never described (its record lost), under main
    lost = Frame("python", marker="code object unreadable (process exited?)")
    stack = (lost, Frame("python", function="main", file="/home/user/train.py", line=71))
    profile = CpuProfile((ProfileStack(1, 1, 10, stack),), 99)
    # then the samples are not credited to main, the caller
    (hot,) = top_functions(profile)
    assert hot.function == UNNAMED_PYTHON and hot.samples == 10
