"""``nodesync plan``: what the rollback hook would do with a webhook payload, against the live
cluster, without changing anything.

It reads an Alertmanager webhook payload (a file, or ``-`` for stdin), decoded and validated by the
webhook's own decoder (exporter.model.payload.decode_payload: what the webhook refuses with
400, ``plan`` refuses with the same one-line message and exit code 2), lists the Nodes, node Leases
and NodeRollbacks once (reads only), and decides each alert in the order of the payload exactly as
the controller would (exporter.model.decision), counting the NodeRollbacks in the cluster in the
budget (waves are judged from the nodes that exist now, so a wave that lost nodes counts fewer and
its cap is smaller). It prints per alert the NodeRollback it would create (or join, or escalate) or
the refusal, and the blast-radius budget those would use; ``--output json`` prints the same as one
JSON document, each NodeRollback as the object it would create. Under each drain it lists the node's
pods, as ``kubectl drain --dry-run`` does: those it would evict, and those it would leave on the
node with why (exporter.model.drain, by the same ``--drain.force`` and
``--drain.delete-emptydir-data`` as the controller's).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, TextIO

from exporter.controller.settings import PlanSettings
from exporter.kube.api import KubeAPI
from exporter.kube.config import ConfigError, load_configuration
from exporter.kube.convert import ConversionError, lease_info, node_info, pod_info
from exporter.kube.errors import KubeError, NotFound
from exporter.kube.noderollbacks import NODEROLLBACKS, node_rollback, object_json
from exporter.kube.resources import LEASES, NODES, PODS
from exporter.model.alerts import Alert, WebhookPayload
from exporter.model.clusterview import ClusterView, build_view
from exporter.model.decision import (
    ESCALATE,
    JOIN,
    PLAN,
    REFUSED,
    VERDICTS,
    WAITS,
    Decision,
    new_rollback,
)
from exporter.model.decision import decide as decide_alert
from exporter.model.drain import disposition
from exporter.model.guards import (
    Budget,
    CorrelatedFailure,
    GuardPolicy,
    GuardState,
    budget,
    correlated_failure,
)
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeInfo, PodInfo
from exporter.model.names import shown
from exporter.model.payload import PayloadError, decode_payload
from exporter.model.rollback import NodeRollback, Plan, StepKind

# API writes a step makes when it has something to do, besides its Event (a drain also evicts
# each pod on the node, which only the live list at execution time tells).
_STEP_WRITES = {
    StepKind.CORDON: 1,
    StepKind.TAINT: 1,
    StepKind.DRAIN: 0,
    StepKind.EVICT_POD: 1,
    StepKind.CLEANUP_RUNTIME: 1,
    StepKind.VERIFY: 0,
    StepKind.DELETE_NODE: 1,
}


@dataclass(frozen=True, slots=True)
class Report:
    decisions: tuple[Decision, ...]
    budget: Budget
    correlated: CorrelatedFailure
    policy: GuardPolicy
    created: Mapping[int, NodeRollback] = field(default_factory=dict)  # by decision index
    #: The pods bound to each node a plan drains, as listed now (see :func:`read_drains`).
    pods: Mapping[str, tuple[PodInfo, ...]] = field(default_factory=dict)

    @property
    def delete_nodes(self) -> bool:
        return self.policy.delete_nodes

    def drain(self, node: str) -> list[tuple[PodInfo, str | None]]:
        """The pods of ``node`` and what its drain would do with each: None evicts it, else
        why it is left on the node (exporter.model.drain, by the policy's flags)."""
        return [(p, disposition(p, self.policy.drain)) for p in self.pods.get(node, ())]

    @property
    def drained_nodes(self) -> list[str]:
        """The nodes the planned steps drain, in the order of the alerts."""
        found = [
            s.node
            for d in self.decisions
            if isinstance(d.outcome, Plan)
            for s in d.outcome.steps
            if s.kind == StepKind.DRAIN
        ]
        return list(dict.fromkeys(found))

    @property
    def evictions(self) -> int:
        return sum(1 for n in self.drained_nodes for _, why in self.drain(n) if why is None)

    @property
    def api_writes(self) -> int:
        """At most this many API writes for the planned steps and their Events, and one per pod
        the drains would evict as listed now (a step with nothing to do writes only its
        Event)."""
        return self.evictions + sum(
            _STEP_WRITES[s.kind] + 1
            for d in self.decisions
            if isinstance(d.outcome, Plan)
            for s in d.outcome.steps
        )


def decide(
    alerts: Iterable[Alert],
    view: ClusterView,
    policy: GuardPolicy,
    now: float,
    rollbacks: Iterable[NodeRollback] = (),
) -> Report:
    """Every alert decided in order, as the controller decides, counting ``rollbacks`` (those in
    the cluster) and the earlier alerts' plans (pure)."""
    state = GuardState.of(rollbacks)
    decisions = []
    created: dict[int, NodeRollback] = {}
    for i, alert in enumerate(alerts):
        decision = decide_alert(alert, view, state, policy, now)
        if decision.plan is not None and decision.verdict in (PLAN, ESCALATE):
            rollback = new_rollback(decision.plan, view, state, policy, now)
            name = rollback.name if decision.verdict == PLAN else decision.rollback
            state.accept(name, decision.plan, now)
            if decision.verdict == PLAN:
                created[i] = rollback
        decisions.append(decision)
    return Report(
        decisions=tuple(decisions),
        budget=budget(view, state, policy, now),
        correlated=correlated_failure(view, policy, now),
        policy=policy,
        created=created,
    )


# ---------------------------------------------------------------- output


def _drain_json(report: Report, node: str) -> list[dict[str, Any]]:
    return [
        {"namespace": p.namespace, "name": p.name, "evict": why is None, "reason": why}
        for p, why in report.drain(node)
    ]


def _step_json(report: Report, step: Any) -> dict[str, Any]:
    out = {"kind": step.kind.value, "node": step.node, "namespace": step.namespace, "pod": step.pod}
    if step.kind == StepKind.DRAIN:
        out["pods"] = _drain_json(report, step.node)
    return out


def _alert_json(report: Report, d: Decision, created: NodeRollback | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "fingerprint": d.alert.fingerprint,
        "alertname": d.alert.labels.get("alertname", ""),
        "status": d.alert.status,
        "node": d.alert.node,
        "action": d.alert.action,
        "decision": d.verdict,
    }
    if d.rollback:
        out["rollback"] = d.rollback
    if created is not None:
        out["rollback"] = created.name
        out["noderollback"] = object_json(created)
    if isinstance(d.outcome, Plan):
        out["wave"] = d.outcome.wave
        out["steps"] = [_step_json(report, s) for s in d.outcome.steps]
    else:
        out["reason"] = d.outcome.reason
        out["detail"] = d.outcome.detail
    return out


def report_json(report: Report) -> dict[str, Any]:
    b = report.budget
    return {
        "alerts": [
            _alert_json(report, d, report.created.get(i)) for i, d in enumerate(report.decisions)
        ],
        "budget": {
            "absolute": {
                "limit": b.absolute_limit,
                "used": b.absolute_used,
                "remaining": b.absolute_remaining,
                "window_seconds": report.policy.max_rollbacks_window,
            },
            "waves": [
                {
                    "wave": w.wave,
                    "size": w.size,
                    "limit": w.limit,
                    "used": w.used,
                    "remaining": w.remaining,
                }
                for w in b.waves
            ],
        },
        "correlated_failure": {
            "established_nodes": report.correlated.established,
            "failing": report.correlated.failing,
            "paused": report.correlated.paused,
        },
        "delete_nodes": report.delete_nodes,
        "api_writes": report.api_writes,
    }


def write_text(report: Report, out: TextIO) -> None:
    counts = {k: sum(1 for d in report.decisions if d.verdict == k) for k in VERDICTS}
    out.write(
        f"{len(report.decisions)} alerts: {counts[PLAN]} planned, {counts[JOIN]} would join a "
        f"rollback, {counts[ESCALATE]} would escalate one, {counts[REFUSED]} refused, "
        f"{counts[WAITS]} would wait. Nothing was changed.\n\n"
    )
    for i, d in enumerate(report.decisions):
        name = shown(d.alert.labels.get("alertname", "")) or "(no alertname)"
        where = shown(d.alert.node) or "(no node)"
        out.write(f"{name} {d.alert.fingerprint} on {where}: ")
        created = report.created.get(i)
        if d.verdict == JOIN:
            out.write(f"would join NodeRollback {d.rollback}\n")
        elif isinstance(d.outcome, Plan):
            what = f"NodeRollback {created.name}" if created is not None else ""
            if d.verdict == ESCALATE:
                what = f"escalates NodeRollback {d.rollback} to"
            out.write(f"{what} {d.outcome.action.value} (wave {d.outcome.wave})\n".lstrip())
            for n, step in enumerate(d.outcome.steps, 1):
                target = f" {step.namespace}/{step.pod}" if step.pod else ""
                out.write(f"  {n}. {step.kind.value} {step.node}{target}\n")
                if step.kind == StepKind.DRAIN:
                    _write_drain(report, step.node, out)
        else:
            verb = "would wait" if d.verdict == WAITS else "refused"
            out.write(f"{verb}: {d.outcome.reason}: {d.outcome.detail}\n")
    b = report.budget
    out.write(
        f"\nBudget: {b.absolute_used} of {b.absolute_limit} node rollbacks within "
        f"{report.policy.max_rollbacks_window:g} s ({b.absolute_remaining} left)\n"
    )
    for w in b.waves:
        out.write(
            f"  wave {w.wave}: {w.used} of {w.limit} ({report.policy.max_rollback_fraction:g} "
            f"of {w.size} nodes), {w.remaining} left\n"
        )
    out.write(
        f"API writes: up to {report.api_writes} for these steps and their Events, and "
        f"{report.evictions} evictions of the pods listed\n"
    )
    c = report.correlated
    state = "PAUSED" if c.paused else "not paused"
    out.write(
        f"Correlated failure: {c.failing} of {c.established} established nodes failing: {state}\n"
    )


def _write_drain(report: Report, node: str, out: TextIO) -> None:
    """The pods a drain of ``node`` would evict and those it would leave, with why, as
    ``kubectl drain --dry-run`` lists them."""
    pods = report.drain(node)
    if not pods:
        out.write("       no pods on the node\n")
    for pod, why in pods:
        where = f"{shown(pod.namespace)}/{shown(pod.name)}"
        out.write(f"       evict {where}\n" if why is None else f"       leave {where}: {why}\n")


# ---------------------------------------------------------------- run


def _read_stdin(stdin: IO[Any]) -> bytes:
    binary = getattr(stdin, "buffer", stdin)
    data = binary.read()
    # a text stream without a buffer (a test's StringIO): its text, as UTF-8 bytes again
    return data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")


def read_payload(path: str, stdin: IO[Any]) -> WebhookPayload:
    """The payload, decoded and validated exactly as the webhook does (decode_payload).
    Raises PayloadError (or OSError for an unreadable file)."""
    raw = _read_stdin(stdin) if path == "-" else Path(path).read_bytes()
    return decode_payload(raw)


async def read_rollbacks(api: KubeAPI) -> tuple[list[NodeRollback], bool]:
    """The NodeRollbacks in the cluster, and whether they could be listed (False where the
    NodeRollback resource is not installed: the budget then counts this payload only)."""
    try:
        page = await api.list(NODEROLLBACKS)
    except NotFound:
        return [], False
    found = []
    for raw in page.items:
        try:
            found.append(node_rollback(raw))
        except ConversionError:
            continue
    return found, True


async def read_drains(api: KubeAPI, report: Report) -> Report:
    """``report`` with the pods bound to each node its plans drain, listed now (one list per
    node; reads only). A pod that cannot be read is left out."""
    pods: dict[str, tuple[PodInfo, ...]] = {}
    for node in report.drained_nodes:
        found = []
        for raw in (await api.list(PODS, field_selector=f"spec.nodeName={node}")).items:
            try:
                found.append(pod_info(raw))
            except ConversionError:
                continue
        pods[node] = tuple(sorted(found, key=lambda p: (p.namespace, p.name)))
    return replace(report, pods=pods)


async def read_cluster(
    api: KubeAPI, *, wave_label: str | None, wave_gap: float, now: float
) -> ClusterView:
    nodes: list[NodeInfo] = []
    for raw in (await api.list(NODES)).items:
        try:
            nodes.append(node_info(raw))
        except ConversionError:
            continue
    leases: list[LeaseInfo] = []
    for raw in (await api.list(LEASES, namespace=LEASE_NAMESPACE)).items:
        try:
            leases.append(lease_info(raw))
        except ConversionError:
            continue
    return build_view(nodes, leases, wave_label=wave_label, gap_seconds=wave_gap, now=now)


async def run(settings: PlanSettings) -> int:
    """0 when every alert was judged; 2 for a bad payload or configuration; 1 when the API
    server could not be read."""
    try:
        payload = read_payload(settings.payload, sys.stdin)
    except PayloadError as exc:
        print(f"nodesync plan: cannot read the payload: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"nodesync plan: cannot read the payload: {exc.strerror or exc}: {settings.payload}",
            file=sys.stderr,
        )
        return 2
    try:
        configuration = await load_configuration(settings.kubeconfig, context=settings.context)
    except ConfigError as exc:
        print(f"nodesync plan: cannot configure the API client: {exc}", file=sys.stderr)
        return 2
    now = time.time()
    try:
        async with KubeAPI(configuration) as api:
            view = await read_cluster(
                api, wave_label=settings.wave_label or None, wave_gap=settings.wave_gap, now=now
            )
            rollbacks, listed = await read_rollbacks(api)
            report = await read_drains(
                api, decide(payload.alerts, view, settings.policy, now, rollbacks)
            )
    except KubeError as exc:
        print(f"nodesync plan: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    if not listed:
        print(
            "nodesync plan: the cluster has no NodeRollback resource (is nodesync installed?): "
            "the budget counts this payload only",
            file=sys.stderr,
        )
    if settings.output == "json":
        json.dump(report_json(report), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        write_text(report, sys.stdout)
    return 0
