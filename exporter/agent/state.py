"""What the agent knows after its latest sync: the input of every scrape."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.model.drift import Drift
from exporter.model.host import HostSnapshot, KubeletSnapshot
from exporter.model.phase import PodPhase
from exporter.model.pod_problems import PodProblem
from exporter.model.runtime import RuntimeSnapshot, RuntimeStats
from exporter.model.terminations import LoopState


@dataclass(frozen=True, slots=True)
class SourceState:
    up: bool
    last_success: float | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class AgentState:
    """An immutable view published at the end of each sync (and with each stats refresh);
    scrapes read the latest one."""

    runtime: RuntimeSnapshot | None = None
    # The runtime's own listing, before what task events told of exits not shown yet
    # (exporter.model.told_exits); None when the last read failed.
    listing: RuntimeSnapshot | None = None
    # The containers' resource usage, read on its own period; None when stats are off, not
    # read yet, or the last read failed.
    stats: RuntimeStats | None = None
    phases: dict[PodPhase, int] = field(default_factory=dict)
    terminations: dict[str, int] = field(default_factory=dict)
    loops: tuple[LoopState, ...] = ()
    host: HostSnapshot | None = None
    pressure: dict[str, bool] = field(default_factory=dict)
    kubelet: KubeletSnapshot | None = None
    sources: dict[str, SourceState] = field(default_factory=dict)
    # The API server's view of this node's pods; None while that view is unavailable.
    api_phases: dict[str, int] | None = None
    problems: tuple[PodProblem, ...] | None = None
    # Desired (API) vs runtime vs kubelet; None unless both the API view and the runtime are up.
    drift: Drift | None = None
    synced: bool = False
