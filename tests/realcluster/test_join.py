"""A real node joins and works: the chain sees it as healthy and does nothing.

The join runs on each containerd release a node of kubelet 1.20 can use (1.6 and 1.7): joining
is where kubelet meets the runtime (its version and status, the sandbox image, the first pods
over CRI v1alpha2, cadvisor's stats) and the agent reads that runtime beside it (CRI v1), so a
release that breaks a join breaks it here."""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest

from exporter.model.rfc3339 import parse_time
from nodesync_sim.real.cluster import condition
from nodesync_sim.real.containerd import release_of
from nodesync_sim.real.node import RealNode
from tests.realcluster.helpers import (
    audit_mark,
    create_pod,
    namespace,
    pod,
    product_events,
    refused,
    value,
    wait_phase,
    wait_value,
)
from tests.support.containerd import Release
from tests.support.realcluster import CONTROLLER_JOB, WAVE_LABEL, RealChain
from tests.support.wait import until

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.node_containerd_releases,
    pytest.mark.timeout(300),
]

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
JOINS_READY = f'nodesync_joins_total{{job="{CONTROLLER_JOB}",outcome="ready"}}'
#: The join SLO's shortest error ratio, as rules/joins.yml records it.
SLO_ERRORS = "cluster:nodesync_join_slo_errors:ratio_rate5m"


def _time(text: str) -> float:
    parsed = parse_time(text)
    assert parsed is not None, text
    return parsed


def test_a_join_that_works(realchain: RealChain, containerd_release: Release) -> None:
    api = realchain.api
    mark = audit_mark(api)
    # The join SLO's judgements so far (other tests' nodes were judged too), once Prometheus
    # has scraped the controller.
    judged_before = until(
        functools.partial(value, realchain, JOINS_READY),
        accept=lambda v: v is not None,
        timeout=30,
        what=JOINS_READY,
    )
    node = realchain.join(containerd_bin_dir=containerd_release.bin_dir)
    # Not kept for later tests, and gone even when this one fails (a node left behind would
    # take the next test's pods): kubelet 1.20 keeps the deleted pods' stopped sandboxes until
    # its garbage collection (every minute), which the agent, with this suite's 10 s drift
    # grace, reports as orphans; a kept node would draw a cleanup into the next test (the join
    # on the next release asserts that nodesync writes nothing at all).
    try:
        _joined(realchain, containerd_release, node, mark, judged_before)
    finally:
        realchain.leave(node)


def _joined(
    realchain: RealChain, release: Release, node: RealNode, mark: int, judged_before: float
) -> None:
    api = realchain.api
    name = node.name
    sel = f'node="{name}"'

    with namespace(api) as ns:
        for i in range(2):
            create_pod(api, ns, pod(f"app-{i}", node))
        running = [wait_phase(api, ns, f"app-{i}", "Running") for i in range(2)]

        # The node as the API server has it: Ready, no pressure, placed by the scheduler.
        found = api.ok("GET", f"/api/v1/nodes/{name}")
        assert condition(found, "Ready")["status"] == "True"
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure"):
            assert condition(found, kind)["status"] == "False", kind
        # ... on the containerd release asked for, as kubelet reports it (containerd://1.7.24).
        runtime = found["status"]["nodeInfo"]["containerRuntimeVersion"]
        scheme, _, version = runtime.partition("://")
        assert scheme == "containerd", runtime
        assert release_of(f"containerd - {version}") == release.name, runtime
        assert all(p["spec"]["nodeName"] == name for p in running)
        # kubelet wrote the pod directories the agent reads, in the node's own root.
        uids = {p["metadata"]["uid"] for p in running}
        assert uids <= {d.name for d in (node.kubelet_root / "pods").iterdir()}

        # Its Lease: held by the node, owned by its Node, renewed (every 10 s). kubelet 1.20
        # creates it only once it can read its Node: it may come after Ready.
        lease = until(
            lambda: (a := api.request("GET", f"{LEASES}/{name}")).status == 200 and a.body,
            timeout=30,
            what="the node's Lease",
        )
        assert lease["spec"]["holderIdentity"] == name
        assert lease["metadata"]["ownerReferences"][0]["uid"] == found["metadata"]["uid"]
        first = lease["spec"]["renewTime"]
        renewed = until(
            lambda: api.ok("GET", f"{LEASES}/{name}")["spec"]["renewTime"] != first,
            timeout=30,
            what="the Lease to be renewed",
        )
        assert renewed

        # The agent on the node: the runtime and the API server agree, nothing drifts.
        for source in ("runtime", "apiserver"):
            wait_value(realchain, f'nodesync_pods{{{sel},phase="Running",source="{source}"}}', 2)
        assert value(realchain, f"nodesync_cri_up{{{sel}}}") == 1
        assert value(realchain, f"nodesync_kubelet_healthy{{{sel}}}") == 1
        assert value(realchain, f"sum(nodesync_drift_pods{{{sel}}})") == 0

        # The join's stages as the controller's metrics show them: registered, then Ready and
        # a Lease renewed, then the first pod Running.
        wait_value(
            realchain,
            f'nodesync_node_condition{{{sel},condition="Ready",status="true"}}',
            1,
        )
        created = value(realchain, f"nodesync_node_created_timestamp_seconds{{{sel}}}")
        renew = value(realchain, f"nodesync_node_lease_renew_timestamp_seconds{{{sel}}}")
        ready_at = value(
            realchain,
            f'nodesync_node_condition_transition_timestamp_seconds{{{sel},condition="Ready"}}',
        )
        assert created is not None
        assert renew is not None
        assert ready_at is not None
        first_running = min(
            _time(p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
            for p in running
        )
        assert created == _time(found["metadata"]["creationTimestamp"])
        assert created <= renew
        assert created <= ready_at <= first_running + 1
        print(
            f"join of {name}: Ready {ready_at - created:.0f} s after registration, "
            f"first pod Running {first_running - created:.0f} s after"
        )
        starts = {
            _time(p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
            for p in running
        }
        _check_join_stages(realchain, name, lease, ready_at, starts)

        # The join SLO judged the node ready (Ready within the objective) once, and Prometheus
        # evaluates the shipped SLO rules on that judgement: an error ratio below 1.
        wait_value(realchain, JOINS_READY, judged_before + 1)
        errors = until(
            lambda: value(realchain, SLO_ERRORS),
            accept=lambda v: v is not None and math.isfinite(v),
            timeout=30,
            what=f"{SLO_ERRORS} evaluated on the judgement",
        )
        assert 0 <= errors < 1, errors
        budget = value(realchain, "cluster:nodesync_join_slo_error_budget:ratio")
        assert budget is not None
        assert math.isclose(budget, 1 - 0.99), budget  # the shipped target: 99%

        # No alert about the node, nothing delivered, no rollback, no write by nodesync.
        assert realchain.prom.query(f"count_over_time(ALERTS{{{sel}}}[10m])") == []
        assert [a for a in realchain.am.alerts() if a["labels"].get("node") == name] == []
        rollbacks = api.ok("GET", "/apis/nodesync.io/v1alpha1/noderollbacks")["items"]
        assert [r for r in rollbacks if r["spec"].get("nodeName") == name] == []
        events = product_events(api, mark)
        writes = [e for e in events if e["verb"] in ("create", "update", "patch", "delete")]
        assert writes == [], [(w["verb"], w["requestURI"]) for w in writes]
        assert refused(events) == []


def _check_join_stages(
    realchain: RealChain, name: str, lease: dict[str, Any], ready_at: float, starts: set[float]
) -> None:
    """Each join stage of the real node as the controller exports it: the times the API
    objects hold, and each observed once in its wave's histogram, as seconds from creation."""
    sel = f'node="{name}"'
    created = value(realchain, f"nodesync_node_created_timestamp_seconds{{{sel}}}")
    assert created is not None
    wave = realchain.api.ok("GET", f"/api/v1/nodes/{name}")["metadata"]["labels"][WAVE_LABEL]
    expected = {
        "lease": {_time(lease["metadata"]["creationTimestamp"])},
        "ready": {ready_at},
        # Nothing in this cluster sets NetworkUnavailable: kubelet's Ready says the network is.
        "network_ready": {ready_at},
        # No readiness taint ever held the node: its gates were clear at creation.
        "gates_cleared": {created},
        # The start of whichever of the two pods the controller saw Running first.
        "pod_running": starts,
    }
    for stage, times in expected.items():
        reached = f'nodesync_node_join_stage_timestamp_seconds{{{sel},stage="{stage}"}}'
        at = until(
            functools.partial(value, realchain, reached),
            timeout=60,
            what=f"the join stage {stage}",
        )
        assert at in times, (stage, at, times)
        observed = f'{{stage="{stage}",wave="{wave}"}}'
        wait_value(realchain, f"nodesync_wave_join_stage_duration_seconds_count{observed}", 1)
        took = value(realchain, f"nodesync_wave_join_stage_duration_seconds_sum{observed}")
        assert took is not None
        assert math.isclose(took, at - created, abs_tol=1e-6), (stage, took, at - created)
