"""The on-CPU profile as a flame graph's tree: the samples merged by frame, outermost first, small parts cut.

What the dashboard draws (``GET /api/v1/profile``'s ``flame``): a node per
frame on a path from the outermost, its samples those of every stack through
it. Nodes under ``MIN_SHARE`` of the samples, and frames past ``MAX_DEPTH``,
are left out; each node's ``samples`` still counts them, so a parent can be
wider than its children together, as in any flame graph of cut stacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.stacks.profile import CpuProfile, frame_name

MIN_SHARE = 0.002
MAX_DEPTH = 64
MAX_NODES = 4_000


@dataclass(slots=True)
class FlameNode:
    name: str
    samples: int = 0
    children: dict[str, FlameNode] = field(default_factory=dict)

    def as_dict(self, floor: int, budget: list[int]) -> dict[str, object]:
        """``{name, samples, children}``, children of at least ``floor`` samples, widest first, at most
        ``budget[0]`` nodes in all (counted down as they are written)."""
        budget[0] -= 1
        kids = []
        for child in sorted(self.children.values(), key=lambda c: (-c.samples, c.name)):
            if child.samples < floor or budget[0] <= 0:
                break
            kids.append(child.as_dict(floor, budget))
        return {"name": self.name, "samples": self.samples, "children": kids}


def flame_tree(profile: CpuProfile, comms: dict[int, str] | None = None) -> dict[str, object]:
    """The profile's samples as a tree from "all" through each process, outermost frame first."""
    root = FlameNode("all")
    for s in profile.stacks:
        root.samples += s.samples
        node = root
        path = [f"{(comms or {}).get(s.pid) or 'pid'} {s.pid}"]
        path += [frame_name(f) for f in reversed(s.frames)][:MAX_DEPTH]
        for name in path:
            node = node.children.setdefault(name, FlameNode(name))
            node.samples += s.samples
    return root.as_dict(max(1, int(root.samples * MIN_SHARE)), [MAX_NODES])
