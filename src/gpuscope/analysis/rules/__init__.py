"""The registry of explain rules: one class per rule, a stable id that is also the finding kind."""

from __future__ import annotations

from gpuscope.analysis.rules.base import Rule
from gpuscope.analysis.rules.containers import ContainerNoisyNeighbourRule
from gpuscope.analysis.rules.flow import DataStarvationRule, SyncStallRule, ThroughputDropRule
from gpuscope.analysis.rules.gpu import (
    AllocatorChurnRule,
    ColdStartRule,
    GpuContentionRule,
    MemcpyBoundRule,
    MemoryLeakRule,
)
from gpuscope.analysis.rules.graph import GraphRecaptureRule
from gpuscope.analysis.rules.host import (
    BlockIoRule,
    CpuPreemptionRule,
    MemoryPressureRule,
    OomRule,
    TcpRetransmitRule,
)
from gpuscope.analysis.rules.host_bound import GilBoundRule, LaunchBoundRule, SyncInLoopRule
from gpuscope.analysis.rules.io_wait import BlockingIoRule
from gpuscope.analysis.rules.nccl import NcclStragglerRule
from gpuscope.analysis.rules.nccl_hang import NcclHangRule

# In evaluation order (the order of equally ranked findings in a report).
RULES: tuple[Rule, ...] = (
    CpuPreemptionRule(),
    ContainerNoisyNeighbourRule(),
    BlockIoRule(),
    BlockingIoRule(),
    MemoryPressureRule(),
    TcpRetransmitRule(),
    GpuContentionRule(),
    ColdStartRule(),
    MemcpyBoundRule(),
    AllocatorChurnRule(),
    MemoryLeakRule(),
    DataStarvationRule(),
    LaunchBoundRule(),
    GilBoundRule(),
    SyncInLoopRule(),
    SyncStallRule(),
    ThroughputDropRule(),
    OomRule(),
    NcclStragglerRule(),
    NcclHangRule(),
    GraphRecaptureRule(),
)

RULE_IDS = tuple(r.id for r in RULES)

__all__ = ["RULES", "RULE_IDS", "Rule"]
