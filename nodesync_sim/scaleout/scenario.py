"""Scenario files: which nodes exist, which join in which wave, what goes wrong, and how fast.

A scenario is a JSON object (see docs/simulator.md for every key). Times are seconds from the
scenario's start, when the simulator begins its waves. Parsing is strict: an unknown key, a value
of the wrong type or out of range, a fault naming a node that does not exist, raises
:class:`ScenarioError` naming the file and the key path (``waves[0].faults[1].share: ...``), so
a typo never silently changes a rehearsal.

Rule, Prometheus, Alertmanager and controller settings in a scenario are applied by the local
chain (nodesync_sim.chain) to copies of the shipped files; the simulator itself only uses the
nodes, waves, faults and timing.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, TypeVar

from exporter.controller.settings import WAVE_GAP, ExecutorSettings
from exporter.model.rollback import StepKind
from exporter.settings.declare import settings_by_field
from exporter.settings.joins import JoinSettings
from exporter.settings.values import parse_duration

NEVER_READY: Final = "never_ready"
LEASE_STOPS: Final = "lease_stops"
PODS_PENDING: Final = "pods_pending"
CRASH_LOOP: Final = "crash_loop"
OOM_LOOP: Final = "oom_loop"
CRI_TIMEOUTS: Final = "cri_timeouts"
AGENT_DOWN: Final = "agent_down"
MEMORY_PRESSURE: Final = "memory_pressure"

FAULT_KINDS: Final = (
    NEVER_READY,
    LEASE_STOPS,
    PODS_PENDING,
    CRASH_LOOP,
    OOM_LOOP,
    CRI_TIMEOUTS,
    AGENT_DOWN,
    MEMORY_PRESSURE,
)
#: Faults that touch pods or the simulated agent: meaningless on the real node, whose
#: containers and agent are real.
POD_FAULTS: Final = frozenset({PODS_PENDING, CRASH_LOOP, OOM_LOOP, AGENT_DOWN, MEMORY_PRESSURE})
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

T = TypeVar("T")


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the key."""


# ---------------------------------------------------------------- the model


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One fault as written: on ``nodes`` by name, or on a ``share`` of its group's simulated
    nodes (none of the two: the real node's own faults). Active from ``at_seconds`` for
    ``for_seconds`` (None: until the end)."""

    kind: str
    at_seconds: float = 0.0
    for_seconds: float | None = None
    share: float | None = None
    nodes: tuple[str, ...] = ()
    pods: int = 1  # crash_loop, oom_loop: how many of the node's app pods loop


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True, slots=True)
class MarkSpec:
    """What some nodes of a group have from the moment they register: extra labels, taints, and
    orphan sandboxes (sandboxes of pods the API server does not know, left in the node's
    simulated runtime). On ``nodes`` by name or a ``share`` of the group's simulated nodes."""

    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    orphan_sandboxes: int = 0
    share: float | None = None
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PDBSpec:
    """A PodDisruptionBudget over the app pods of ``app`` (their ``app`` label; each node's
    app pods are ``app-<node>``), created before the waves. ``relax_at_seconds``: from then on
    (scenario time) it allows ``relax_to`` (its ``max_unavailable``)."""

    name: str
    app: str
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    relax_at_seconds: float | None = None
    relax_to: int | str = "100%"


@dataclass(frozen=True, slots=True)
class Expectation:
    """The decision a scenario expects, per node: ``rollback`` (its NodeRollback cordons it),
    ``delete`` (rolled back to the delete), ``evict`` (a pod on it evicted alone), ``none``.
    Nodes not named expect ``none``. ``within_seconds``: each expected rollback's first step
    must come this long after its fault at most (None: not checked). ``pause``: whether
    rollbacks must be paused at some time (None: not checked)."""

    decisions: Mapping[str, str] = field(default_factory=dict)
    within_seconds: float | None = None
    run_seconds: float = 60.0
    pause: bool | None = None
    alerts: tuple[str, ...] = ()  # alerts that must fire at some point of the run


@dataclass(frozen=True, slots=True)
class ScrapeFailures:
    """The simulated agents' endpoint fails ``share`` of the scrapes (answers 503, evenly
    spread: 0.5 is every other one) from ``at_seconds`` for ``for_seconds`` (None: to the
    end): an overloaded Prometheus timing out half its scrapes, as the rules see it."""

    share: float = 0.0
    at_seconds: float = 0.0
    for_seconds: float | None = None


#: The steps of a rollback a controller restart can follow.
ROLLBACK_STEPS: Final = tuple(kind.value for kind in StepKind)


@dataclass(frozen=True, slots=True)
class ControllerRestart:
    """The chain stops the controller right after a rollback's ``after_step`` is done (the first
    time any rollback gets there), keeps it down for ``down_seconds``, and starts a new one on
    the same port, journal and API server, as a restarted pod would be."""

    after_step: str
    down_seconds: float = 2.0


@dataclass(frozen=True, slots=True)
class Timing:
    """How fast the simulated kubelets and control plane act. Defaults are Kubernetes' own
    (kubelet: Lease every 10 s, 40 s Lease duration; kube-controller-manager: 50 s grace)."""

    lease_renew_seconds: float = 10.0
    lease_duration_seconds: int = 40
    status_update_seconds: float = 10.0
    ready_after_seconds: float = 5.0
    node_monitor_grace_seconds: float | None = 50.0  # None: no node lifecycle controller
    pod_sync_seconds: float = 1.0
    pod_start_seconds: float = 1.0
    pod_stop_seconds: float = 2.0
    pod_grace_seconds: int = 30
    crash_backoff_seconds: float = 10.0
    crash_backoff_max_seconds: float = 300.0
    agent_sync_seconds: float = 10.0
    drift_grace_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class OldNodes:
    count: int = 0
    age_seconds: float = 7200.0
    prefix: str = "old"
    pods_per_node: int = 0
    daemonset_pods_per_node: int = 0
    faults: tuple[FaultSpec, ...] = ()
    marks: tuple[MarkSpec, ...] = ()

    def node_names(self) -> list[str]:
        return [f"{self.prefix}-{i:03d}" for i in range(self.count)]


@dataclass(frozen=True, slots=True)
class WaveSpec:
    name: str
    count: int
    start_seconds: float = 0.0
    join_spread_seconds: float = 0.0
    pods_per_node: int = 0
    daemonset_pods_per_node: int = 0
    faults: tuple[FaultSpec, ...] = ()
    marks: tuple[MarkSpec, ...] = ()

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i:03d}" for i in range(self.count)]


@dataclass(frozen=True, slots=True)
class RealNodeSpec:
    """The node whose runtime is real (a private containerd and a real agent); the simulator
    plays only its kubelet's API side. It joins ``wave`` right after the wave's last node."""

    name: str
    wave: str
    orphan_sandboxes: int = 0
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


# ---------------------------------------------------------------- reading


class _At:
    """A JSON value and where it is (for messages)."""

    def __init__(self, value: Any, path: str, source: str) -> None:
        self.value = value
        self.path = path
        self.source = source

    def error(self, message: str) -> ScenarioError:
        where = f"{self.path}: " if self.path else ""
        return ScenarioError(f"{self.source}: {where}{message}")

    def child(self, key: str | int) -> _At:
        value = self.value[key]
        if isinstance(key, int):
            return _At(value, f"{self.path}[{key}]", self.source)
        return _At(value, f"{self.path}.{key}" if self.path else key, self.source)

    def obj(self, known: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, _At]:
        if not isinstance(self.value, dict):
            raise self.error(f"must be an object, not {_kind(self.value)}")
        unknown = sorted(set(self.value) - set(known))
        if unknown:
            raise self.error(f"unknown key {unknown[0]!r} (known: {', '.join(known)})")
        missing = [k for k in required if k not in self.value]
        if missing:
            raise self.error(f"missing key {missing[0]!r}")
        return {key: self.child(key) for key in self.value}

    def items(self) -> list[_At]:
        if not isinstance(self.value, list):
            raise self.error(f"must be a list, not {_kind(self.value)}")
        return [self.child(i) for i in range(len(self.value))]

    def string(self, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        if not isinstance(self.value, str):
            raise self.error(f"must be a string, not {_kind(self.value)}")
        if pattern is not None and (not pattern.match(self.value) or len(self.value) > 63):
            raise self.error(f"{self.value!r} is not {what}")
        return self.value

    def number(self, *, minimum: float = 0.0, positive: bool = False) -> float:
        value = self.value
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            raise self.error(f"must be a number, not {_kind(value)}")
        if positive and value <= 0:
            raise self.error(f"must be positive, not {value!r}")
        if value < minimum:
            raise self.error(f"must be at least {minimum:g}, not {value!r}")
        return float(value)

    def integer(self, *, minimum: int = 0) -> int:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"must be a whole number, not {_kind(value)}")
        if value < minimum:
            raise self.error(f"must be at least {minimum}, not {value}")
        return value

    def duration(self, *, positive: bool = False) -> float:
        """A Prometheus-style duration string (``3s``, ``500ms``, ``1m``) or seconds."""
        if isinstance(self.value, str):
            try:
                seconds = parse_duration(self.value)
            except argparse.ArgumentTypeError as exc:
                raise self.error(str(exc)) from None
        else:
            seconds = self.number()
        if positive and seconds <= 0:
            raise self.error(f"must be a positive duration, not {self.value!r}")
        return seconds

    def parsed(self, convert: Callable[[str], T]) -> T:
        text = self.value if isinstance(self.value, str) else json.dumps(self.value)
        try:
            return convert(text)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise self.error(str(exc)) from None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    return "a list" if isinstance(value, list) else "an object"


def _optional(at: _At | None, read: Callable[[_At], T], default: T) -> T:
    if at is None or at.value is None:
        return default
    return read(at)


_FAULT_KEYS = ("kind", "at_seconds", "for_seconds", "share", "nodes", "pods")


def _fault(at: _At, *, group_nodes: list[str] | None, pods_per_node: int) -> FaultSpec:
    """``group_nodes`` None: a fault of the real node (no target keys allowed)."""
    keys = at.obj(_FAULT_KEYS, required=("kind",))
    kind = keys["kind"].string()
    if kind not in FAULT_KINDS:
        raise keys["kind"].error(f"unknown fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
    share, nodes = _targets(keys)
    if group_nodes is None:
        if share is not None or nodes:
            raise at.error("the real node's faults apply to it: no 'share' or 'nodes'")
        if kind in POD_FAULTS:
            raise keys["kind"].error(
                f"{kind} is for simulated nodes only: the real node's containers and agent are real"
            )
    else:
        _check_targets(at, keys, share, nodes, group_nodes)
    pods = _optional(keys.get("pods"), lambda a: a.integer(minimum=1), 1)
    if kind in (CRASH_LOOP, OOM_LOOP, PODS_PENDING) and pods_per_node < 1:
        raise at.error(f"{kind} needs pods: set pods_per_node of this group")
    if kind in (CRASH_LOOP, OOM_LOOP) and pods > pods_per_node:
        raise keys["pods"].error(f"only {pods_per_node} app pods per node in this group")
    return FaultSpec(
        kind=kind,
        at_seconds=_optional(keys.get("at_seconds"), lambda a: a.number(), 0.0),
        for_seconds=_optional(keys.get("for_seconds"), lambda a: a.number(positive=True), None),
        share=share,
        nodes=nodes,
        pods=pods,
    )


def _targets(keys: dict[str, _At]) -> tuple[float | None, tuple[str, ...]]:
    """The ``share`` (from 0 to 1) and the ``nodes`` a fault or a mark names, as written."""
    share = _optional(keys.get("share"), lambda a: a.number(positive=True), None)
    if share is not None and share > 1:
        raise keys["share"].error(f"must be a share from 0 to 1, not {share!r}")
    nodes: tuple[str, ...] = ()
    if "nodes" in keys:
        nodes = tuple(item.string() for item in keys["nodes"].items())
    return share, nodes


def _check_targets(
    at: _At,
    keys: dict[str, _At],
    share: float | None,
    nodes: tuple[str, ...],
    group_nodes: list[str],
) -> None:
    """A fault or mark of a group names its nodes, or a share of them: exactly one."""
    if (share is None) == (not nodes):
        raise at.error("give exactly one of 'share' (of the group's nodes) or 'nodes'")
    for index, name in enumerate(nodes):
        if name not in group_nodes:
            raise (
                keys["nodes"]
                .child(index)
                .error(f"no node {name!r} in this group (its nodes: {_names(group_nodes)})")
            )


def _names(names: list[str]) -> str:
    if len(names) <= 4:
        return ", ".join(names) or "none"
    return f"{names[0]} ... {names[-1]}"


def _faults(at: _At | None, group_nodes: list[str] | None, pods: int) -> tuple[FaultSpec, ...]:
    if at is None:
        return ()
    return tuple(_fault(item, group_nodes=group_nodes, pods_per_node=pods) for item in at.items())


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _string_map(at: _At) -> dict[str, str]:
    """Labels: qualified names to label values."""
    out: dict[str, str] = {}
    for key, value in at.obj(tuple(at.value) if isinstance(at.value, dict) else ()).items():
        if not _LABEL_KEY.match(key) or len(key) > 253:
            raise value.error("is not a label key (a qualified name such as example.com/name)")
        text = value.string()
        if not _LABEL_VALUE.match(text) or len(text) > 63:
            raise value.error(f"{text!r} is not a label value")
        out[key] = text
    return out


def _taint(at: _At) -> Taint:
    keys = at.obj(("key", "value", "effect"), required=("key", "effect"))
    key = keys["key"].string()
    if not _LABEL_KEY.match(key):
        raise keys["key"].error(f"{key!r} is not a taint key (a qualified name)")
    effect = keys["effect"].string()
    if effect not in TAINT_EFFECTS:
        raise keys["effect"].error(f"unknown effect {effect!r} (known: {', '.join(TAINT_EFFECTS)})")
    value = _optional(keys.get("value"), lambda a: a.string(_LABEL_VALUE, "a taint value"), "")
    return Taint(key=key, effect=effect, value=value)


_MARK_KEYS = ("labels", "taints", "orphan_sandboxes", "share", "nodes")


def _mark(at: _At, group_nodes: list[str]) -> MarkSpec:
    keys = at.obj(_MARK_KEYS)
    share, nodes = _targets(keys)
    _check_targets(at, keys, share, nodes, group_nodes)
    return MarkSpec(
        labels=_string_map(keys["labels"]) if "labels" in keys else {},
        taints=tuple(_taint(t) for t in keys["taints"].items()) if "taints" in keys else (),
        orphan_sandboxes=_optional(keys.get("orphan_sandboxes"), lambda a: a.integer(), 0),
        share=share,
        nodes=nodes,
    )


def _marks(at: _At | None, group_nodes: list[str]) -> tuple[MarkSpec, ...]:
    if at is None:
        return ()
    return tuple(_mark(item, group_nodes) for item in at.items())


_TIMING_FIELDS: dict[str, Callable[[_At], Any]] = {
    "lease_renew_seconds": lambda a: a.number(positive=True),
    "lease_duration_seconds": lambda a: a.integer(minimum=1),
    "status_update_seconds": lambda a: a.number(positive=True),
    "ready_after_seconds": lambda a: a.number(),
    "node_monitor_grace_seconds": lambda a: _optional(a, lambda b: b.number(positive=True), None),
    "pod_sync_seconds": lambda a: a.number(positive=True),
    "pod_start_seconds": lambda a: a.number(),
    "pod_stop_seconds": lambda a: a.number(),
    "pod_grace_seconds": lambda a: a.integer(minimum=0),
    "crash_backoff_seconds": lambda a: a.number(positive=True),
    "crash_backoff_max_seconds": lambda a: a.number(positive=True),
    "agent_sync_seconds": lambda a: a.number(positive=True),
    "drift_grace_seconds": lambda a: a.number(),
}


def _timing(at: _At | None) -> Timing:
    if at is None:
        return Timing()
    keys = at.obj(tuple(_TIMING_FIELDS))
    timing = Timing(**{name: _TIMING_FIELDS[name](value) for name, value in keys.items()})
    grace = timing.node_monitor_grace_seconds
    if grace is not None and grace <= timing.lease_renew_seconds:
        raise at.error(
            f"node_monitor_grace_seconds ({grace:g}) must exceed lease_renew_seconds "
            f"({timing.lease_renew_seconds:g}), or every healthy node would flap"
        )
    if timing.crash_backoff_max_seconds < timing.crash_backoff_seconds:
        raise at.error("crash_backoff_max_seconds must be at least crash_backoff_seconds")
    return timing


def _old_nodes(at: _At | None) -> OldNodes:
    if at is None:
        return OldNodes()
    known = ("count", "age_seconds", "prefix", "pods_per_node", "daemonset_pods_per_node")
    keys = at.obj((*known, "faults", "marks"))
    prefix = _optional(keys.get("prefix"), lambda a: a.string(_DNS_LABEL, "a DNS label"), "old")
    how_many = _optional(keys.get("count"), lambda a: a.integer(), 0)
    pods = _optional(keys.get("pods_per_node"), lambda a: a.integer(), 0)
    names = [f"{prefix}-{i:03d}" for i in range(how_many)]
    return OldNodes(
        count=how_many,
        age_seconds=_optional(keys.get("age_seconds"), lambda a: a.number(), 7200.0),
        prefix=prefix,
        pods_per_node=pods,
        daemonset_pods_per_node=_optional(
            keys.get("daemonset_pods_per_node"), lambda a: a.integer(), 0
        ),
        faults=_faults(keys.get("faults"), names, pods),
        marks=_marks(keys.get("marks"), names),
    )


_WAVE_KEYS = (
    "name",
    "count",
    "start_seconds",
    "join_spread_seconds",
    "pods_per_node",
    "daemonset_pods_per_node",
    "faults",
    "marks",
)


def _wave(at: _At) -> WaveSpec:
    keys = at.obj(_WAVE_KEYS, required=("name", "count"))
    name = keys["name"].string(_DNS_LABEL, "a DNS label (lower case, digits, '-')")
    how_many = keys["count"].integer()
    pods = _optional(keys.get("pods_per_node"), lambda a: a.integer(), 0)
    names = [f"{name}-{i:03d}" for i in range(how_many)]
    return WaveSpec(
        name=name,
        count=how_many,
        start_seconds=_optional(keys.get("start_seconds"), lambda a: a.number(), 0.0),
        join_spread_seconds=_optional(keys.get("join_spread_seconds"), lambda a: a.number(), 0.0),
        pods_per_node=pods,
        daemonset_pods_per_node=_optional(
            keys.get("daemonset_pods_per_node"), lambda a: a.integer(), 0
        ),
        faults=_faults(keys.get("faults"), names, pods),
        marks=_marks(keys.get("marks"), names),
    )


def _real_node(at: _At | None, waves: tuple[WaveSpec, ...]) -> RealNodeSpec | None:
    if at is None or at.value is None:
        return None
    keys = at.obj(("name", "wave", "orphan_sandboxes", "faults"), required=("name", "wave"))
    wave = keys["wave"].string()
    if wave not in {w.name for w in waves}:
        raise keys["wave"].error(f"no wave named {wave!r}")
    return RealNodeSpec(
        name=keys["name"].string(_SUBDOMAIN, "a node name (lower case DNS name)"),
        wave=wave,
        orphan_sandboxes=_optional(keys.get("orphan_sandboxes"), lambda a: a.integer(), 0),
        faults=_faults(keys.get("faults"), None, 0),
    )


def _prometheus(at: _At | None) -> PrometheusSpec:
    if at is None:
        return PrometheusSpec()
    keys = at.obj(("scrape_interval", "evaluation_interval"))
    return PrometheusSpec(
        scrape_interval=_optional(
            keys.get("scrape_interval"), lambda a: a.duration(positive=True), 1.0
        ),
        evaluation_interval=_optional(
            keys.get("evaluation_interval"), lambda a: a.duration(positive=True), 1.0
        ),
    )


def _per_alert(at: _At | None) -> tuple[float | None, dict[str, float]]:
    """A duration for every alert, or an object alert name -> duration."""
    if at is None or at.value is None:
        return None, {}
    if isinstance(at.value, dict):
        keys = at.obj(tuple(at.value))
        return None, {name: value.duration() for name, value in keys.items()}
    return at.duration(), {}


def _rules(at: _At | None) -> RuleOverrides:
    if at is None:
        return RuleOverrides()
    keys = at.obj(("thresholds", "for", "keep_firing_for"))
    thresholds: dict[str, float] = {}
    if "thresholds" in keys:
        listed = keys["thresholds"]
        for name, value in listed.obj(tuple(listed.value or {})).items():
            if name.startswith("nodesync:"):
                raise value.error("name the constant without the 'nodesync:' prefix")
            thresholds[name] = value.number()
    for_all, for_alert = _per_alert(keys.get("for"))
    keep_all, keep_alert = _per_alert(keys.get("keep_firing_for"))
    return RuleOverrides(thresholds, for_all, for_alert, keep_all, keep_alert)


def _alertmanager(at: _At | None) -> AlertmanagerSpec:
    if at is None:
        return AlertmanagerSpec()
    keys = at.obj(("group_wait", "group_interval", "repeat_interval", "replicas"))

    def read(name: str, positive: bool) -> float | None:
        return _optional(keys.get(name), lambda a: a.duration(positive=positive), None)

    return AlertmanagerSpec(
        group_wait=read("group_wait", False),
        group_interval=read("group_interval", True),
        repeat_interval=read("repeat_interval", True),
        replicas=_optional(keys.get("replicas"), _replicas, 1),
    )


ALERTMANAGER_REPLICAS: Final = (1, 2)


def _replicas(at: _At) -> int:
    """1 Alertmanager, or 2 (an HA pair)."""
    count = at.integer(minimum=1)
    if count not in ALERTMANAGER_REPLICAS:
        raise at.error(f"must be 1 or 2 (an HA pair), not {count}")
    return count


#: Controller settings a scenario may set, by their field's name (``dry_run``,
#: ``max_rollbacks`` ...), parsed as their flags are: the executor's and its policy's, the
#: wave gap, and how joins are followed. Leader election is the chain's own business.
CONTROLLER_KEYS: Final[dict[str, Callable[[str], Any]]] = {
    **{
        name: s.kind
        for name, s in settings_by_field(ExecutorSettings).items()
        if not name.startswith("leader_elect")
    },
    "wave_gap": WAVE_GAP.kind,
    **{name: s.kind for name, s in settings_by_field(JoinSettings).items()},
}


def _controller(at: _At | None) -> dict[str, Any]:
    if at is None:
        return {}
    keys = at.obj(tuple(CONTROLLER_KEYS))
    return {name: value.parsed(CONTROLLER_KEYS[name]) for name, value in keys.items()}


def _budget_value(at: _At) -> int | str:
    """A number of pods, or a percentage ("50%")."""
    if isinstance(at.value, str):
        if not re.fullmatch(r"(100|[1-9]?[0-9])%", at.value):
            raise at.error(f"{at.value!r} is not a percentage from 0% to 100%")
        return at.value
    return at.integer()


_ALL: int | str = "100%"

_PDB_KEYS = (
    "name",
    "app",
    "min_available",
    "max_unavailable",
    "relax_at_seconds",
    "relax_to",
)


def _pdb(at: _At, app_owners: set[str]) -> PDBSpec:
    keys = at.obj(_PDB_KEYS, required=("name", "app"))
    app = keys["app"].string()
    if app not in app_owners:
        raise keys["app"].error(
            f"no app pods labelled app={app!r} (each node's app pods are app-<node>; "
            "give the node pods_per_node)"
        )
    low = _optional(keys.get("min_available"), _budget_value, None)
    high = _optional(keys.get("max_unavailable"), _budget_value, None)
    if (low is None) == (high is None):
        raise at.error("give exactly one of 'min_available' or 'max_unavailable'")
    return PDBSpec(
        name=keys["name"].string(_DNS_LABEL, "a DNS label"),
        app=app,
        min_available=low,
        max_unavailable=high,
        relax_at_seconds=_optional(keys.get("relax_at_seconds"), lambda a: a.number(), None),
        relax_to=_optional(keys.get("relax_to"), _budget_value, _ALL),
    )


DECISIONS: Final = ("none", "rollback", "delete", "cleanup", "evict")


def _controller_restart(at: _At | None) -> ControllerRestart | None:
    if at is None or at.value is None:
        return None
    keys = at.obj(("after_step", "down_seconds"), required=("after_step",))
    step = keys["after_step"].string()
    if step not in ROLLBACK_STEPS:
        raise keys["after_step"].error(
            f"unknown step {step!r} (known: {', '.join(ROLLBACK_STEPS)})"
        )
    return ControllerRestart(
        after_step=step,
        down_seconds=_optional(keys.get("down_seconds"), lambda a: a.number(), 2.0),
    )


def _scrape_failures(at: _At | None) -> ScrapeFailures | None:
    if at is None or at.value is None:
        return None
    keys = at.obj(("share", "at_seconds", "for_seconds"), required=("share",))
    share = keys["share"].number(positive=True)
    if share > 1:
        raise keys["share"].error(f"must be a share from 0 to 1, not {share!r}")
    return ScrapeFailures(
        share=share,
        at_seconds=_optional(keys.get("at_seconds"), lambda a: a.number(), 0.0),
        for_seconds=_optional(keys.get("for_seconds"), lambda a: a.number(positive=True), None),
    )


def _expect(at: _At | None, names: list[str]) -> Expectation | None:
    if at is None or at.value is None:
        return None
    keys = at.obj(("decisions", "within_seconds", "run_seconds", "pause", "alerts"))
    decisions: dict[str, str] = {}
    if "decisions" in keys:
        listed = keys["decisions"]
        for node, value in listed.obj(tuple(listed.value or {})).items():
            if node not in names:
                raise value.error(f"no node {node!r} in this scenario")
            decision = value.string()
            if decision not in DECISIONS:
                raise value.error(f"unknown decision {decision!r} (known: {', '.join(DECISIONS)})")
            decisions[node] = decision
    pause = None
    if "pause" in keys and keys["pause"].value is not None:
        if not isinstance(keys["pause"].value, bool):
            raise keys["pause"].error(f"must be a boolean, not {_kind(keys['pause'].value)}")
        pause = keys["pause"].value
    return Expectation(
        decisions=decisions,
        within_seconds=_optional(
            keys.get("within_seconds"), lambda a: a.number(positive=True), None
        ),
        run_seconds=_optional(keys.get("run_seconds"), lambda a: a.number(positive=True), 60.0),
        pause=pause,
        alerts=tuple(a.string() for a in keys["alerts"].items()) if "alerts" in keys else (),
    )


TOP_KEYS = (
    "name",
    "description",
    "seed",
    "namespace",
    "wave_label",
    "timing",
    "old_nodes",
    "waves",
    "real_node",
    "prometheus",
    "rules",
    "alertmanager",
    "controller",
    "pdbs",
    "scrape_failures",
    "controller_restart",
    "expect",
)


def parse(document: Any, source: str = "scenario") -> Scenario:
    """A scenario from its JSON document; ScenarioError names ``source`` and the key."""
    top = _At(document, "", source)
    keys = top.obj(TOP_KEYS, required=("name",))
    waves = tuple(_wave(item) for item in keys["waves"].items()) if "waves" in keys else ()
    seen_waves: set[str] = set()
    for index, wave in enumerate(waves):
        if wave.name in seen_waves:
            raise keys["waves"].child(index).error(f"a second wave named {wave.name!r}")
        seen_waves.add(wave.name)
    scenario = Scenario(
        name=keys["name"].string(),
        description=_optional(keys.get("description"), lambda a: a.string(), ""),
        seed=_optional(keys.get("seed"), lambda a: a.integer(), 0),
        namespace=_optional(
            keys.get("namespace"), lambda a: a.string(_DNS_LABEL, "a namespace name"), "default"
        ),
        wave_label=_optional(keys.get("wave_label"), lambda a: a.string(), None),
        timing=_timing(keys.get("timing")),
        old_nodes=_old_nodes(keys.get("old_nodes")),
        waves=waves,
        real_node=_real_node(keys.get("real_node"), waves),
        prometheus=_prometheus(keys.get("prometheus")),
        rules=_rules(keys.get("rules")),
        alertmanager=_alertmanager(keys.get("alertmanager")),
        controller=_controller(keys.get("controller")),
    )
    names = [*scenario.old_nodes.node_names(), *(n for w in waves for n in w.node_names())]
    if scenario.real_node is not None:
        names.append(scenario.real_node.name)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise top.error(f"node name {duplicates[0]!r} is used twice (prefixes and wave names)")
    if not names:
        raise top.error("no nodes: give old_nodes, waves or a real_node")
    owners = {
        f"app-{n}" for n in scenario.old_nodes.node_names() if scenario.old_nodes.pods_per_node
    }
    for wave in waves:
        if wave.pods_per_node:
            owners.update(f"app-{n}" for n in wave.node_names())
            if scenario.real_node is not None and scenario.real_node.wave == wave.name:
                owners.add(f"app-{scenario.real_node.name}")
    pdbs = tuple(_pdb(item, owners) for item in keys["pdbs"].items()) if "pdbs" in keys else ()
    seen = [p.name for p in pdbs]
    if len(set(seen)) != len(seen):
        raise keys["pdbs"].error("two PodDisruptionBudgets with one name")
    return replace(
        scenario,
        pdbs=pdbs,
        expect=_expect(keys.get("expect"), names),
        scrape_failures=_scrape_failures(keys.get("scrape_failures")),
        controller_restart=_controller_restart(keys.get("controller_restart")),
    )


def loads(text: str, source: str = "scenario") -> Scenario:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ScenarioError(f"{source}: not JSON: {exc}") from None
    return parse(document, source)


def load(path: str | Path) -> Scenario:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{file}: cannot read: {exc.strerror or exc}") from None
    return loads(text, str(file))
