"""Scenario files: which nodes exist, which join in which wave, what goes wrong, and how fast.

A scenario is a JSON object (see docs/simulator.md for every key). Times are seconds from the
scenario's start, when the simulator begins its waves. The sections below are msgspec structs
that a scenario file decodes into (nodesync_sim.fake.scaleout.scenario_file): an unknown key, a
value of the wrong type or out of range, is refused with the JSON path of the key
(``$.waves[0].faults[1].share: expected `float` <= 1.0``), so a typo never silently changes a
rehearsal.

Rule, Prometheus, Alertmanager and controller settings in a scenario are applied by the local
chain (nodesync_sim.demo.chain) to copies of the shipped files; the simulator itself only uses the
nodes, waves, faults and timing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal, get_args

import msgspec

from exporter.model.rollback import StepKind

NEVER_READY: Final = "never_ready"
LEASE_STOPS: Final = "lease_stops"
PODS_PENDING: Final = "pods_pending"
CRASH_LOOP: Final = "crash_loop"
OOM_LOOP: Final = "oom_loop"
CRI_TIMEOUTS: Final = "cri_timeouts"
AGENT_DOWN: Final = "agent_down"
MEMORY_PRESSURE: Final = "memory_pressure"
READINESS_TAINT: Final = "readiness_taint"
#: The taint a ``readiness_taint`` fault puts on its node unless it names another: Cilium's
#: startup taint, which its agent removes once the node's network is ready.
CNI_STARTUP_TAINT: Final = "node.cilium.io/agent-not-ready"

FaultKind = Literal[
    "never_ready",
    "lease_stops",
    "pods_pending",
    "crash_loop",
    "oom_loop",
    "cri_timeouts",
    "agent_down",
    "memory_pressure",
    "readiness_taint",
]
FAULT_KINDS: Final[tuple[str, ...]] = get_args(FaultKind)
#: Faults that touch pods or the simulated agent: meaningless on the real node, whose
#: containers and agent are real.
POD_FAULTS: Final = frozenset({PODS_PENDING, CRASH_LOOP, OOM_LOOP, AGENT_DOWN, MEMORY_PRESSURE})
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
Decision = Literal["none", "rollback", "delete", "cleanup", "evict"]
#: How an alert episode ended: exporter.model.outcomes.OUTCOMES, in its order.
EpisodeOutcome = Literal[
    "remediated", "failed", "cleared", "refused", "held", "dry_run_cleared", "dry_run_outlasted"
]

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
_LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"

DNSLabel = Annotated[str, msgspec.Meta(pattern=_DNS_LABEL, max_length=63)]
NodeName = Annotated[str, msgspec.Meta(pattern=_SUBDOMAIN, max_length=63)]
LabelKey = Annotated[str, msgspec.Meta(pattern=_LABEL_KEY, max_length=253)]
LabelValue = Annotated[str, msgspec.Meta(pattern=_LABEL_VALUE, max_length=63)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
Count = Annotated[int, msgspec.Meta(ge=0)]
#: A share of a group's simulated nodes, or of scrapes: above 0, at most 1.
Share = Annotated[float, msgspec.Meta(gt=0, le=1)]
#: A PodDisruptionBudget's number of pods, or a percentage ("50%").
Budget = Count | Annotated[str, msgspec.Meta(pattern=r"^(100|[1-9]?[0-9])%$")]


class Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A part of a scenario file: a key it does not know is an error, not a default."""


# ---------------------------------------------------------------- the model


class FaultSpec(Section, frozen=True):
    """One fault as written: on ``nodes`` by name, or on a ``share`` of its group's simulated
    nodes (none of the two: the real node's own faults). Active from ``at_seconds`` for
    ``for_seconds`` (None: until the end)."""

    kind: FaultKind
    at_seconds: Seconds = 0.0
    for_seconds: PositiveSeconds | None = None
    share: Share | None = None
    nodes: tuple[str, ...] = ()
    pods: Annotated[int, msgspec.Meta(ge=1)] = 1  # crash_loop, oom_loop: how many app pods loop
    taint: LabelKey | None = None  # readiness_taint: its key (None: CNI_STARTUP_TAINT)


class Taint(Section, frozen=True):
    key: LabelKey
    effect: TaintEffect
    value: LabelValue = ""


class NodeInfoSpec(Section, frozen=True):
    """What a node reports it was built from (its Node's ``status.nodeInfo``); None: the
    simulator's own."""

    kubelet_version: str | None = None
    container_runtime_version: str | None = None
    os_image: str | None = None
    kernel_version: str | None = None


class MarkSpec(Section, frozen=True):
    """What some nodes of a group have from the moment they register: extra labels, taints,
    what they were built from (``node_info``), and orphan sandboxes (sandboxes of pods the API
    server does not know, left in the node's simulated runtime). On ``nodes`` by name or a
    ``share`` of the group's simulated nodes."""

    labels: dict[LabelKey, LabelValue] = msgspec.field(default_factory=dict)
    node_info: NodeInfoSpec | None = None
    taints: tuple[Taint, ...] = ()
    orphan_sandboxes: Count = 0
    share: Share | None = None
    nodes: tuple[str, ...] = ()


class PDBSpec(Section, frozen=True):
    """A PodDisruptionBudget over the app pods of ``app`` (their ``app`` label; each node's
    app pods are ``app-<node>``), created before the waves. ``relax_at_seconds``: from then on
    (scenario time) it allows ``relax_to`` (its ``max_unavailable``)."""

    name: DNSLabel
    app: str
    min_available: Budget | None = None
    max_unavailable: Budget | None = None
    relax_at_seconds: Seconds | None = None
    relax_to: Budget = "100%"

    def __post_init__(self) -> None:
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError("give exactly one of 'min_available' or 'max_unavailable'")


class Expectation(Section, frozen=True):
    """The decision a scenario expects, per node: ``rollback`` (its NodeRollback cordons it),
    ``delete`` (rolled back to the delete), ``evict`` (a pod on it evicted alone), ``none``.
    Nodes not named expect ``none``. ``within_seconds``: each expected rollback's first step
    must come this long after its fault at most (None: not checked), and
    ``not_before_seconds`` at least this long (a hold the rollback must wait out; None: not
    checked). ``pause``: whether rollbacks must be paused at some time (None: not checked).
    ``episodes``: alert name -> outcome -> how many of its episodes the controller must have
    counted so (``nodesync_alert_episodes_total``); an outcome not named must count none."""

    decisions: dict[str, Decision] = msgspec.field(default_factory=dict)
    within_seconds: PositiveSeconds | None = None
    not_before_seconds: PositiveSeconds | None = None
    run_seconds: PositiveSeconds = 60.0
    pause: bool | None = None
    alerts: tuple[str, ...] = ()  # alerts that must fire at some point of the run
    episodes: dict[str, dict[EpisodeOutcome, Count]] = msgspec.field(default_factory=dict)


class ScrapeFailures(Section, frozen=True):
    """The simulated agents' endpoint fails ``share`` of the scrapes (answers 503, evenly
    spread: 0.5 is every other one) from ``at_seconds`` for ``for_seconds`` (None: to the
    end): an overloaded Prometheus timing out half its scrapes, as the rules see it."""

    share: Share
    at_seconds: Seconds = 0.0
    for_seconds: PositiveSeconds | None = None


class ControllerRestart(Section, frozen=True):
    """The chain stops the controller right after a rollback's ``after_step`` is done (the first
    time any rollback gets there), keeps it down for ``down_seconds``, and starts a new one on
    the same port, journal and API server, as a restarted pod would be."""

    after_step: StepKind
    down_seconds: Seconds = 2.0


class Timing(Section, frozen=True):
    """How fast the simulated kubelets and control plane act. Defaults are Kubernetes' own
    (kubelet: Lease every 10 s, 40 s Lease duration; kube-controller-manager: 50 s grace)."""

    lease_renew_seconds: PositiveSeconds = 10.0
    lease_duration_seconds: Annotated[int, msgspec.Meta(ge=1)] = 40
    status_update_seconds: PositiveSeconds = 10.0
    ready_after_seconds: Seconds = 5.0
    node_monitor_grace_seconds: PositiveSeconds | None = 50.0  # None: no lifecycle controller
    pod_sync_seconds: PositiveSeconds = 1.0
    pod_start_seconds: Seconds = 1.0
    pod_stop_seconds: Seconds = 2.0
    pod_grace_seconds: Count = 30
    crash_backoff_seconds: PositiveSeconds = 10.0
    crash_backoff_max_seconds: PositiveSeconds = 300.0
    agent_sync_seconds: PositiveSeconds = 10.0
    drift_grace_seconds: Seconds = 60.0

    def __post_init__(self) -> None:
        grace = self.node_monitor_grace_seconds
        if grace is not None and grace <= self.lease_renew_seconds:
            raise ValueError(
                f"node_monitor_grace_seconds ({grace:g}) must exceed lease_renew_seconds "
                f"({self.lease_renew_seconds:g}), or every healthy node would flap"
            )
        if self.crash_backoff_max_seconds < self.crash_backoff_seconds:
            raise ValueError("crash_backoff_max_seconds must be at least crash_backoff_seconds")


class OldNodes(Section, frozen=True):
    count: Count = 0
    age_seconds: Seconds = 7200.0
    prefix: DNSLabel = "old"
    pods_per_node: Count = 0
    daemonset_pods_per_node: Count = 0
    faults: tuple[FaultSpec, ...] = ()
    marks: tuple[MarkSpec, ...] = ()

    def node_names(self) -> list[str]:
        return [f"{self.prefix}-{i:03d}" for i in range(self.count)]


class WaveSpec(Section, frozen=True):
    name: DNSLabel
    count: Count
    start_seconds: Seconds = 0.0
    join_spread_seconds: Seconds = 0.0
    pods_per_node: Count = 0
    daemonset_pods_per_node: Count = 0
    faults: tuple[FaultSpec, ...] = ()
    marks: tuple[MarkSpec, ...] = ()

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i:03d}" for i in range(self.count)]


class RealNodeSpec(Section, frozen=True):
    """The node whose runtime is real (a private containerd and a real agent); the simulator
    plays only its kubelet's API side. It joins ``wave`` right after the wave's last node."""

    name: NodeName
    wave: str
    orphan_sandboxes: Count = 0
    faults: tuple[FaultSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class PrometheusSpec:
    scrape_interval: float = 1.0
    evaluation_interval: float = 1.0


@dataclass(frozen=True, slots=True)
class RuleOverrides:
    """``thresholds``: constant name (without ``nodesync:``) -> value. ``for_all`` /
    ``keep_firing_for_all``: one duration for every alert; ``for_alert`` /
    ``keep_firing_for_alert``: per alert name (wins over the one for all). None: as shipped."""

    thresholds: Mapping[str, float] = field(default_factory=dict)
    for_all: float | None = None
    for_alert: Mapping[str, float] = field(default_factory=dict)
    keep_firing_for_all: float | None = None
    keep_firing_for_alert: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AlertmanagerSpec:
    """Timers of the route to nodesync's hook (None: as shipped), and how many Alertmanagers
    the chain runs: 2 is an HA pair, clustered with each other, both sent every alert."""

    group_wait: float | None = None
    group_interval: float | None = None
    repeat_interval: float | None = None
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str = ""
    seed: int = 0
    namespace: str = "default"
    wave_label: str | None = None
    timing: Timing = field(default_factory=Timing)
    old_nodes: OldNodes = field(default_factory=OldNodes)
    waves: tuple[WaveSpec, ...] = ()
    real_node: RealNodeSpec | None = None
    prometheus: PrometheusSpec = field(default_factory=PrometheusSpec)
    rules: RuleOverrides = field(default_factory=RuleOverrides)
    alertmanager: AlertmanagerSpec = field(default_factory=AlertmanagerSpec)
    #: Setting (destination name) -> value, already typed (see CONTROLLER_KEYS).
    controller: Mapping[str, Any] = field(default_factory=dict)
    pdbs: tuple[PDBSpec, ...] = ()
    expect: Expectation | None = None
    scrape_failures: ScrapeFailures | None = None
    controller_restart: ControllerRestart | None = None

    def wave(self, name: str) -> WaveSpec:
        return next(w for w in self.waves if w.name == name)


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the key's path."""
