"""What ``nodesync plan`` decided, and its two renderings: the text a person reads and one
JSON document (exporter.controller.plan_command builds the :class:`Report`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from exporter.kube.noderollbacks import object_json
from exporter.model.decision import ESCALATE, JOIN, PLAN, REFUSED, VERDICTS, WAITS, Decision
from exporter.model.drain import disposition
from exporter.model.guards import Budget, CorrelatedFailure, GuardPolicy
from exporter.model.holds import Hold
from exporter.model.kube import PodInfo
from exporter.model.names import shown
from exporter.model.rollback import NodeRollback, Plan, StepKind

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
    #: The firing action alerts a guard holds back, as the controller reports them.
    held: tuple[Hold, ...] = ()

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
        "held": [
            {
                "alertname": h.alertname,
                "node": h.node,
                "reason": h.reason,
                "guard": h.guard,
                "figure": h.figure,
                "release": h.release,
                "line": h.line(),
            }
            for h in report.held
        ],
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
    if report.held:
        out.write("\nHeld (no rollback running):\n")
        for hold in report.held:
            out.write(f"  {hold.line()}\n")
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
