"""A synthetic cluster with something in every controller series, for rendering all controller
families at once (docs check, promtool)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from exporter.controller.executor import REFUSAL_REASONS
from exporter.controller.exposition import SOURCE_APISERVER, controller_families, node_exposition
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.http import CLIENT_ERROR_REASONS, ClientErrorMetrics
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.metrics.nodes import NodeCollectors, join_families
from exporter.metrics.rollback import ExecutorStatus, RollbackMetrics
from exporter.metrics.selfmetrics import SourceStatus, build_info_family, register_process_metrics
from exporter.model.clusterview import ClusterView, build_view
from exporter.model.cohorts import Cohort
from exporter.model.joins import JoinPolicy, JoinTracker
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeCondition, Taint
from exporter.model.outcomes import OUTCOMES
from exporter.model.waves import WaveTracker
from tests.controller.builders import T0, lease, node
from tests.controller.webhook_every_series import rich_webhook
from tests.metrics.exposition import render

WAVE_LABEL = "example.com/scale-out"


def rich_view() -> ClusterView:
    return _rich()[0]


def rich_join_families(switches: NodeCollectors) -> list[Metric]:
    """The join histograms and judgements of the nodes of :func:`rich_view`."""
    tracker = _rich()[1]
    return join_families(tracker.histograms(), tracker.outcomes, switches)


def _rich() -> tuple[ClusterView, JoinTracker]:
    conditions = (
        NodeCondition("Ready", "False", "KubeletNotReady", last_transition=T0 + 40),
        NodeCondition("MemoryPressure", "False", last_transition=T0 + 10),
        NodeCondition("DiskPressure", "True", last_transition=T0 + 20),
        NodeCondition("PIDPressure", "Unknown", last_transition=T0 + 30),
        NodeCondition("NetworkUnavailable", "False", last_transition=T0 + 5),
    )
    nodes = [
        node(
            "cp-1",
            T0 - 86_400,
            labels={"node-role.kubernetes.io/control-plane": "", "nodesync.io/protected": "true"},
            conditions=(NodeCondition("Ready", "True", last_transition=T0 - 86_000),),
            # Ready for a day with a CNI's startup taint nobody removed: left
            taints=(Taint("node.cilium.io/agent-not-ready", "NoSchedule"),),
        ),
        node(
            "worker-1",
            T0,
            unschedulable=True,
            conditions=conditions,
            taints=(
                Taint("node.kubernetes.io/not-ready", "NoExecute"),
                Taint("node.kubernetes.io/unschedulable", "NoSchedule"),
                Taint("nodesync.io/rollback", "NoSchedule"),
                Taint("readiness.k8s.io/network-ready", "NoSchedule"),
            ),
        ),
        node(
            "worker-2",
            T0 + 30,
            taints=(Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule", "1796000600"),),
        ),
        node(
            "batch-1",
            T0 + 50,
            labels={WAVE_LABEL: "batch-7"},
            conditions=(NodeCondition("Ready", "True", last_transition=T0 + 54),),
        ),
    ]
    leases = [
        lease("cp-1", T0 + 55),
        LeaseInfo("worker-1", LEASE_NAMESPACE, T0 + 20, "worker-1", created_at=T0 + 3),
        lease("worker-2", T0 + 58),
    ]
    # The joining nodes' stages, as the controller's tracker follows them: worker-1 is held by
    # a readiness taint (within the hold limit), worker-2 runs its first pod, batch-1 is judged.
    joins = JoinTracker(JoinPolicy(), since=T0 - 1)
    waves = WaveTracker().snapshot(nodes, now=T0 + 60, wave_label=WAVE_LABEL)
    by_name = {lease.name: lease for lease in leases}
    for n in nodes:
        joins.update(n, by_name.get(n.name), waves.node_wave[n.name], T0 + 60)
    joins.pod_running("worker-2", T0 + 45)
    stages = {n.name: s for n in nodes if (s := joins.stages(n.name)) is not None}
    view = build_view(
        nodes,
        leases,
        wave_label=WAVE_LABEL,
        gap_seconds=120,
        now=T0 + 60,
        joins=stages,
        join_policy=JoinPolicy(),
    )
    return view, joins


def rich_kube_requests(registry: CollectorRegistry) -> None:
    """What the controller's two watches report, with one of everything."""
    metrics = KubeRequestMetrics(registry)
    for resource in ("nodes", "leases"):
        metrics.observe_request(resource, "list", 0.012, "200")
        metrics.observe_request(resource, "watch", 0.003, "200")
        metrics.observe_watch_event(resource, "ADDED")
        metrics.observe_watch_event(resource, "BOOKMARK")
    metrics.observe_request("nodes", "watch", 0.002, "500")
    metrics.observe_request("leases", "list", 10.0, "unreachable")
    metrics.observe_relist("nodes")
    metrics.observe_skipped_object("leases")
    metrics.observe_leader_election_error("403")


def rich_listener(registry: CollectorRegistry) -> None:
    """What the listener counts (exporter.serve), with one of everything."""
    metrics = ClientErrorMetrics(registry)
    for reason in CLIENT_ERROR_REASONS:
        metrics.observe(reason)
    metrics.in_flight.set(1)
    register_process_metrics(registry)


def rich_rollback(registry: CollectorRegistry) -> None:
    """What the rollback executor adds to /metrics, with something in every series."""
    metrics = RollbackMetrics(REFUSAL_REASONS, OUTCOMES)
    metrics.action("cordon", "done")
    metrics.action("drain", "failed")
    metrics.refusal("blast_radius_fraction")
    metrics.episode("NodesyncNewNodeNotReady", "remediated")
    status = ExecutorStatus(
        phases={"Pending": 1, "Running": 1, "Waiting": 1, "Succeeded": 4, "Failed": 1},
        reasons={("Waiting", "waiting_for_agent"): 1, ("Failed", "pdb_blocked"): 1},
        leader=True,
        paused=True,
        budget_absolute=7,
        budget_wave_fraction=1,
        api_write_tokens=4.5,
        step_deadlines={"drain": 1_700_001_800.0, "cleanup_runtime": 1_700_000_300.0},
        held=(
            ("NodesyncNewNodeNotReady", "new-7", "budget"),
            ("NodesyncNewNodePodPending", "new-8", "exemption"),
        ),
        cohorts=[
            Cohort("w1", "os_image", "bad image", 20, {"not_ready": 18}),
            Cohort("w1", "topology.kubernetes.io/zone", "eu-1a", 80, {"lease_lost": 2}),
        ],
    )
    registry.register(SnapshotCollector(lambda: metrics.families(status)))


def rich_controller_exposition(
    *,
    with_kube_requests: bool = True,
    with_hook: bool = True,
    collectors: NodeCollectors | None = None,
) -> str:
    """Everything the controller's /metrics serves, as it serves it: the node series (the line
    store's text, every collector switch on unless told otherwise), then the families built at
    scrape time and, unless told otherwise, the API client's and the listener's instruments and
    the rollback hook's (webhook, journal, executor)."""
    switches = collectors if collectors is not None else NodeCollectors.everything()
    registry = CollectorRegistry()
    if with_kube_requests:
        rich_kube_requests(registry)
        rich_listener(registry)
    if with_hook:
        rich_webhook(registry)
        rich_rollback(registry)
    view = rich_view()
    return node_exposition(view, switches).decode() + render(
        controller_families(
            view,
            {SOURCE_APISERVER: SourceStatus(up=True, last_success_timestamp=T0 + 59)},
            build_info_family("0.0.0-test"),
            switches,
            rich_join_families(switches),
        ),
        registry,
    )
