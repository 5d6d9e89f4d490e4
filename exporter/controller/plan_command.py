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
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from exporter.controller.plan_report import Report, report_json, write_text
from exporter.controller.settings import PlanSettings
from exporter.kube.api import KubeAPI
from exporter.kube.config import ConfigError, load_configuration
from exporter.kube.convert import ConversionError, lease_info, node_info, pod_info
from exporter.kube.errors import KubeError, NotFound
from exporter.kube.noderollbacks import NODEROLLBACKS, node_rollback
from exporter.kube.resources import LEASES, NODES, PODS
from exporter.model.alerts import Alert, WebhookPayload
from exporter.model.clusterview import ClusterView, build_view
from exporter.model.decision import ESCALATE, PLAN, REFUSED, WAITS, new_rollback
from exporter.model.decision import decide as decide_alert
from exporter.model.guards import (
    GuardPolicy,
    GuardState,
    budget,
    cohort_table,
    correlated_failure,
)
from exporter.model.holds import holds
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeInfo, PodInfo
from exporter.model.payload import PayloadError, decode_payload
from exporter.model.rollback import NodeRollback


def decide(
    alerts: Iterable[Alert],
    view: ClusterView,
    policy: GuardPolicy,
    now: float,
    rollbacks: Iterable[NodeRollback] = (),
) -> Report:
    """Every alert decided in order, as the controller decides, counting ``rollbacks`` (those in
    the cluster) and the earlier alerts' plans (pure)."""
    rollbacks = list(rollbacks)
    state = GuardState.of(rollbacks)
    decisions = []
    created: dict[int, NodeRollback] = {}
    cohorts = cohort_table(view, policy, now)  # walked once for every alert
    for i, alert in enumerate(alerts):
        decision = decide_alert(alert, view, state, policy, now, cohorts)
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
        held=holds(
            [
                (d.alert, refusal.reason)
                for d in decisions
                if (refusal := d.refusal) is not None and d.verdict in (REFUSED, WAITS)
            ],
            view,
            state,
            policy,
            now,
            running=GuardState.of(rollbacks).active_nodes(),
            cohorts=cohorts,
        ),
    )


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


async def read_cluster(api: KubeAPI, settings: PlanSettings, now: float) -> ClusterView:
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
    keys = settings.policy.cohorts.cohort_keys
    wave_label = settings.wave_label or None
    gap = settings.wave_gap
    return build_view(
        nodes, leases, wave_label=wave_label, gap_seconds=gap, now=now, cohort_keys=keys
    )


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
            view = await read_cluster(api, settings, now)
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
