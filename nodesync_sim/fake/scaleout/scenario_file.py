"""Reading a scenario file: JSON decoded by msgspec into the structs of
nodesync_sim.fake.scaleout.scenario, then the checks that span sections (a fault naming a node of
its group, a PodDisruptionBudget over pods that exist, a node name used once). Every refusal is
a ScenarioError naming the file and the key's JSON path
(``scenarios/x.json: $.waves[0].count: expected `int` >= 0``)."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import msgspec

from exporter.controller.settings import WAVE_GAP, ExecutorSettings
from exporter.model.codec import error_message
from exporter.settings.declare import settings_by_field
from exporter.settings.joins import JoinSettings
from exporter.settings.values import parse_duration
from nodesync_sim.fake.scaleout.scenario import (
    CRASH_LOOP,
    OOM_LOOP,
    POD_FAULTS,
    PODS_PENDING,
    READINESS_TAINT,
    AlertmanagerSpec,
    ControllerRestart,
    DNSLabel,
    Expectation,
    FaultSpec,
    MarkSpec,
    OldNodes,
    PDBSpec,
    PrometheusSpec,
    RealNodeSpec,
    RuleOverrides,
    Scenario,
    ScenarioError,
    ScrapeFailures,
    Section,
    Timing,
    WaveSpec,
)

# ---------------------------------------------------------------- durations


class Duration(float):
    """A duration as written: Prometheus' notation (``3s``, ``500ms``, ``1m``) or seconds."""


class PositiveDuration(Duration):
    """A duration above zero."""


class PerAlert:
    """A duration for every alert, or an object alert name -> duration."""

    def __init__(self, every: float | None, by_alert: dict[str, float]) -> None:
        self.every = every
        self.by_alert = by_alert


def _seconds(value: object) -> float:
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a duration ('3s', '500ms') or seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a finite duration from 0, not {value!r}")
    return float(value)


def _decode_hook(kind: type, value: object) -> object:
    """msgspec's hook for the types above; a ValueError is reported at the key's path."""
    if kind is PerAlert:
        if not isinstance(value, dict):
            return PerAlert(_seconds(value), {})
        by_alert: dict[str, float] = {}
        for name, text in value.items():
            try:
                by_alert[str(name)] = _seconds(text)
            except ValueError as exc:
                raise ValueError(f"alert {name!r}: {exc}") from None
        return PerAlert(None, by_alert)
    if issubclass(kind, Duration):
        seconds = _seconds(value)
        if kind is PositiveDuration and seconds <= 0:
            raise ValueError(f"must be a positive duration, not {value!r}")
        return kind(seconds)
    raise NotImplementedError(kind)


# ---------------------------------------------------------------- the file's own sections


class _Prometheus(Section, frozen=True):
    scrape_interval: PositiveDuration | None = None
    evaluation_interval: PositiveDuration | None = None


class _Alertmanager(Section, frozen=True):
    group_wait: Duration | None = None
    group_interval: PositiveDuration | None = None
    repeat_interval: PositiveDuration | None = None
    replicas: Literal[1, 2] = 1  # 2: an HA pair


_Threshold = Annotated[float, msgspec.Meta(ge=0)]


class _Rules(Section, frozen=True):
    thresholds: dict[str, _Threshold] = msgspec.field(default_factory=dict)
    for_: PerAlert | None = msgspec.field(default=None, name="for")
    keep_firing_for: PerAlert | None = None

    def __post_init__(self) -> None:
        for name in self.thresholds:
            if name.startswith("nodesync:"):
                raise ValueError(f"{name!r}: name the constant without the 'nodesync:' prefix")


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

_Flag = str | int | float | bool
_Controller = msgspec.defstruct(
    "Controller",
    [(name, _Flag, msgspec.UNSET) for name in CONTROLLER_KEYS],
    kw_only=True,
    forbid_unknown_fields=True,
)


class _ScenarioFile(Section, frozen=True):
    name: str
    description: str = ""
    seed: Annotated[int, msgspec.Meta(ge=0)] = 0
    namespace: DNSLabel = "default"
    wave_label: str | None = None
    timing: Timing = Timing()
    old_nodes: OldNodes = OldNodes()
    waves: tuple[WaveSpec, ...] = ()
    real_node: RealNodeSpec | None = None
    prometheus: _Prometheus = _Prometheus()
    rules: _Rules = _Rules()
    alertmanager: _Alertmanager = _Alertmanager()
    controller: dict[str, _Flag] = msgspec.field(default_factory=dict)
    pdbs: tuple[PDBSpec, ...] = ()
    scrape_failures: ScrapeFailures | None = None
    controller_restart: ControllerRestart | None = None
    expect: Expectation | None = None


#: The top-level keys, in the order docs/simulator.md lists them.
TOP_KEYS: Final = _ScenarioFile.__struct_encode_fields__


# ---------------------------------------------------------------- checks across sections


class _Invalid(Exception):
    """``<path>: <what is wrong>`` of a decoded scenario."""


def _names(names: list[str]) -> str:
    if len(names) <= 4:
        return ", ".join(names) or "none"
    return f"{names[0]} ... {names[-1]}"


def _check_targets(at: str, share: float | None, nodes: tuple[str, ...], group: list[str]) -> None:
    """A fault or mark of a group names its nodes, or a share of them: exactly one."""
    if (share is None) == (not nodes):
        raise _Invalid(f"{at}: give exactly one of 'share' (of the group's nodes) or 'nodes'")
    for index, name in enumerate(nodes):
        if name not in group:
            raise _Invalid(
                f"{at}.nodes[{index}]: no node {name!r} in this group (its nodes: {_names(group)})"
            )


def _check_group(
    at: str,
    group: list[str],
    pods_per_node: int,
    faults: Iterable[FaultSpec],
    marks: Iterable[MarkSpec],
) -> None:
    for index, fault in enumerate(faults):
        where = f"{at}.faults[{index}]"
        _check_targets(where, fault.share, fault.nodes, group)
        if fault.kind in (CRASH_LOOP, OOM_LOOP, PODS_PENDING) and pods_per_node < 1:
            raise _Invalid(f"{where}: {fault.kind} needs pods: set pods_per_node of this group")
        if fault.kind in (CRASH_LOOP, OOM_LOOP) and fault.pods > pods_per_node:
            raise _Invalid(f"{where}.pods: only {pods_per_node} app pods per node in this group")
        _check_fault_taint(where, fault)
    for index, mark in enumerate(marks):
        _check_targets(f"{at}.marks[{index}]", mark.share, mark.nodes, group)


def _check_fault_taint(where: str, fault: FaultSpec) -> None:
    if fault.taint is not None and fault.kind != READINESS_TAINT:
        raise _Invalid(f"{where}.taint: only a {READINESS_TAINT} fault puts a taint on its node")


def _check_real_node(real: RealNodeSpec, waves: tuple[WaveSpec, ...]) -> None:
    if real.wave not in {w.name for w in waves}:
        raise _Invalid(f"$.real_node.wave: no wave named {real.wave!r}")
    for index, fault in enumerate(real.faults):
        where = f"$.real_node.faults[{index}]"
        _check_fault_taint(where, fault)
        if fault.share is not None or fault.nodes:
            raise _Invalid(f"{where}: the real node's faults apply to it: no 'share' or 'nodes'")
        if fault.kind in POD_FAULTS:
            raise _Invalid(
                f"{where}.kind: {fault.kind} is for simulated nodes only: the real node's "
                "containers and agent are real"
            )


def _check_nodes(file: _ScenarioFile) -> list[str]:
    """Every node's name, each used once; at least one node."""
    seen_waves: set[str] = set()
    for index, wave in enumerate(file.waves):
        if wave.name in seen_waves:
            raise _Invalid(f"$.waves[{index}]: a second wave named {wave.name!r}")
        seen_waves.add(wave.name)
    old = file.old_nodes
    _check_group("$.old_nodes", old.node_names(), old.pods_per_node, old.faults, old.marks)
    for index, wave in enumerate(file.waves):
        group = wave.node_names()
        _check_group(f"$.waves[{index}]", group, wave.pods_per_node, wave.faults, wave.marks)
    names = [*old.node_names(), *(n for w in file.waves for n in w.node_names())]
    if file.real_node is not None:
        _check_real_node(file.real_node, file.waves)
        names.append(file.real_node.name)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise _Invalid(f"$: node name {duplicates[0]!r} is used twice (prefixes and wave names)")
    if not names:
        raise _Invalid("$: no nodes: give old_nodes, waves or a real_node")
    return names


def _check_pdbs(file: _ScenarioFile) -> None:
    owners = {f"app-{n}" for n in file.old_nodes.node_names() if file.old_nodes.pods_per_node}
    for wave in file.waves:
        if wave.pods_per_node:
            owners.update(f"app-{n}" for n in wave.node_names())
            if file.real_node is not None and file.real_node.wave == wave.name:
                owners.add(f"app-{file.real_node.name}")
    for index, pdb in enumerate(file.pdbs):
        if pdb.app not in owners:
            raise _Invalid(
                f"$.pdbs[{index}].app: no app pods labelled app={pdb.app!r} (each node's app "
                "pods are app-<node>; give the node pods_per_node)"
            )
    named = [p.name for p in file.pdbs]
    if len(set(named)) != len(named):
        raise _Invalid("$.pdbs: two PodDisruptionBudgets with one name")


def _check_expect(expect: Expectation | None, names: list[str]) -> None:
    for node in expect.decisions if expect is not None else ():
        if node not in names:
            raise _Invalid(f"$.expect.decisions.{node}: no node {node!r} in this scenario")
    if expect is None or expect.within_seconds is None or expect.not_before_seconds is None:
        return
    if expect.not_before_seconds > expect.within_seconds:
        raise _Invalid(
            f"$.expect.not_before_seconds: {expect.not_before_seconds:g} is after "
            f"within_seconds ({expect.within_seconds:g}): no first step could be on time"
        )


# ---------------------------------------------------------------- the model's values


def _controller(values: dict[str, _Flag]) -> dict[str, Any]:
    """The controller settings, each parsed as its flag is (``"10m"``, ``3``, ``true``)."""
    try:
        msgspec.convert(values, _Controller)
    except msgspec.ValidationError as exc:
        raise _Invalid(error_message(exc, "$.controller")) from None
    typed: dict[str, Any] = {}
    for name, value in values.items():
        text = value if isinstance(value, str) else json.dumps(value)
        try:
            typed[name] = CONTROLLER_KEYS[name](text)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise _Invalid(f"$.controller.{name}: {exc}") from None
    return typed


def _per_alert(durations: PerAlert | None) -> tuple[float | None, dict[str, float]]:
    return (None, {}) if durations is None else (durations.every, durations.by_alert)


def _seconds_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def _scenario(file: _ScenarioFile) -> Scenario:
    names = _check_nodes(file)
    _check_pdbs(file)
    _check_expect(file.expect, names)
    prometheus = {
        key: float(value)
        for key, value in msgspec.structs.asdict(file.prometheus).items()
        if value is not None
    }
    alertmanager = file.alertmanager
    for_all, for_alert = _per_alert(file.rules.for_)
    keep_all, keep_alert = _per_alert(file.rules.keep_firing_for)
    return Scenario(
        name=file.name,
        description=file.description,
        seed=file.seed,
        namespace=file.namespace,
        wave_label=file.wave_label,
        timing=file.timing,
        old_nodes=file.old_nodes,
        waves=file.waves,
        real_node=file.real_node,
        prometheus=PrometheusSpec(**prometheus),
        rules=RuleOverrides(dict(file.rules.thresholds), for_all, for_alert, keep_all, keep_alert),
        alertmanager=AlertmanagerSpec(
            group_wait=_seconds_or_none(alertmanager.group_wait),
            group_interval=_seconds_or_none(alertmanager.group_interval),
            repeat_interval=_seconds_or_none(alertmanager.repeat_interval),
            replicas=alertmanager.replicas,
        ),
        controller=_controller(file.controller),
        pdbs=file.pdbs,
        expect=file.expect,
        scrape_failures=file.scrape_failures,
        controller_restart=file.controller_restart,
    )


# ---------------------------------------------------------------- reading


def _built(decode: Callable[[], _ScenarioFile], source: str) -> Scenario:
    try:
        return _scenario(decode())
    except msgspec.ValidationError as exc:
        raise ScenarioError(f"{source}: {error_message(exc)}") from None
    except _Invalid as exc:
        raise ScenarioError(f"{source}: {exc}") from None


def parse(document: Any, source: str = "scenario") -> Scenario:
    """A scenario from its document as JSON or YAML loads it (dicts, lists, scalars);
    ScenarioError names ``source`` and the key's path."""
    return _built(lambda: msgspec.convert(document, _ScenarioFile, dec_hook=_decode_hook), source)


def loads(text: str | bytes, source: str = "scenario") -> Scenario:
    """A scenario from its JSON text."""
    try:
        return _built(
            lambda: msgspec.json.decode(text, type=_ScenarioFile, dec_hook=_decode_hook), source
        )
    except msgspec.DecodeError as exc:
        raise ScenarioError(f"{source}: not JSON: {exc}") from None


def load(path: str | Path) -> Scenario:
    file = Path(path)
    try:
        text = file.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{file}: cannot read: {exc.strerror or exc}") from None
    return loads(text, str(file))
