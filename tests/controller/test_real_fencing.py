"""Fencing first, on a real kube-apiserver: one delivery brings 100 alerts the guards refuse
(protected nodes: each refusal is a journal commit, a read of the Node and an Event) and, last,
one alert they accept. The accepted node's cordon must not wait for the refusals' bookkeeping:
it is in the API server before most of the refusals' Events (with the refusals first, all 100
came before it), and every refusal is still recorded in the journal and the metrics, with its
Event written after. How soon the cordon comes (the target: within 1 s) is measured by
bench.controller_fencing on an idle machine, not asserted here: on a machine with both cores
busy this test saw 1.23 s.

What is measured: from just before the test sends the delivery (the test's clock) to the end
of the cordon's PATCH as the API server's audit log records it (``stageTimestamp`` of its
``ResponseComplete`` event): the server's clock, on the same machine. The writes share one
budget of 10 a second (``--apiserver.qps``/``--apiserver.burst``): 100 Events alone take 9 s
and more of it, which is how long the cordon waited before it went first.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from exporter.controller.app import make_app
from exporter.controller.journal import Journal
from exporter.controller.keys import CLUSTER, EXECUTOR, JOURNAL
from exporter.controller.settings import ControllerSettings, ExecutorSettings, WebhookSettings
from exporter.controller.wiring import rollback_extensions
from exporter.model.rfc3339 import parse_time
from exporter.settings.declare import changed
from nodesync_sim.real.kube_apiserver import ADMIN, LocalKubeAPIServer
from tests.controller.executor_harness import node_object
from tests.support.acceptance import NODEROLLBACKS
from tests.support.kubeapi import KubeCleanup
from tests.support.realkube import is_product
from tests.support.rollback_requests import alert, payload
from tests.support.wait import until_async

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(180)]

REFUSED = 100
#: With the refusals recorded first, every one of their Events came before the cordon; fenced
#: first, at most this many of them may (they go whenever the rollback's next write is not
#: queued yet, within the budget's burst and rate while the cordon's writes take their turns).
EVENTS_BEFORE_CORDON = REFUSED // 2
TOKEN = "fencing-" + secrets.token_hex(8)
WAVE_LABEL = "nodesync.test/wave"
PROTECTED_LABEL = "nodesync.io/protected"
EVENTS = "/api/v1/namespaces/default/events"


def _completed(event: dict[str, Any]) -> float:
    """When the server finished the request an audit event records (Unix time)."""
    done = parse_time(str(event["stageTimestamp"]))
    assert done is not None, event["stageTimestamp"]
    return done


def _is_cordon_of(node: str) -> Any:
    def match(event: dict[str, Any]) -> bool:
        ref = event.get("objectRef") or {}
        spec = (event.get("requestObject") or {}).get("spec") or {}
        return (
            event.get("stage") == "ResponseComplete"
            and event["verb"] == "patch"
            and ref.get("resource") == "nodes"
            and ref.get("name") == node
            and not ref.get("subresource")
            and spec.get("unschedulable") is True
            and is_product(event)
        )

    return match


def _is_refusal_event(event: dict[str, Any]) -> bool:
    ref = event.get("objectRef") or {}
    return (
        event.get("stage") == "ResponseComplete"
        and event["verb"] == "create"
        and ref.get("resource") == "events"
        and (event.get("requestObject") or {}).get("reason") == "NodesyncRefused"
        and is_product(event)
    )


def _refused_events(server: LocalKubeAPIServer, nodes: set[str]) -> list[dict[str, Any]]:
    items = server.ok("GET", f"{EVENTS}?fieldSelector=reason%3DNodesyncRefused")["items"]
    return [e for e in items if e["involvedObject"]["name"] in nodes]


@pytest.fixture
def cleanup(noderollback_crd: LocalKubeAPIServer) -> Iterator[KubeCleanup]:
    """The test's Nodes, and the NodeRollbacks and Events made about them, deleted after it."""
    server = noderollback_crd
    done = KubeCleanup(server)
    try:
        yield done
    finally:
        nodes = {path.rsplit("/", 1)[1] for path in done.paths}
        for rollback in server.ok("GET", NODEROLLBACKS)["items"]:
            if rollback.get("spec", {}).get("nodeName") in nodes:
                done.delete_later(f"{NODEROLLBACKS}/{rollback['metadata']['name']}")
        for event in server.ok("GET", EVENTS)["items"]:
            if event["involvedObject"].get("name") in nodes:
                done.delete_later(f"{EVENTS}/{event['metadata']['name']}")
        done.run()


async def test_the_accepted_node_is_cordoned_before_the_refusals_of_its_delivery_are_written(
    noderollback_crd: LocalKubeAPIServer, cleanup: KubeCleanup, tmp_path: Path
) -> None:
    server = noderollback_crd
    case = secrets.token_hex(3)
    wave = f"fencing-{case}"
    failing = f"fencing-{case}-failing"
    protected = [f"fencing-{case}-protected-{i:03d}" for i in range(REFUSED)]
    for name in protected:
        labels = {WAVE_LABEL: wave, PROTECTED_LABEL: "true"}
        cleanup.create("/api/v1/nodes", node_object(name, since=time.time() - 5, labels=labels))
    cleanup.create(
        "/api/v1/nodes", node_object(failing, since=time.time() - 5, labels={WAVE_LABEL: wave})
    )
    ours = {failing, *protected}

    settings = ControllerSettings(
        listen=("127.0.0.1", 0),
        kubeconfig=str(server.kubeconfig(ADMIN)),
        wave_label=WAVE_LABEL,
    )
    executor = changed(
        ExecutorSettings(),
        max_rollback_fraction=1.0,
        max_rollbacks=1000,
        api_qps=10,
        api_burst=10,
    )
    webhook = WebhookSettings(journal_path=str(tmp_path / "journal" / "journal.db"), token=TOKEN)
    app = make_app(
        settings,
        registry=CollectorRegistry(),
        extensions=rollback_extensions(webhook, executor),
    )
    async with TestClient(TestServer(app)) as client:

        def in_view() -> bool:
            cluster = app[CLUSTER]
            if not cluster.synced:
                return False
            view = cluster.view()
            return all(view.node(name) is not None for name in ours)

        await until_async(in_view, timeout=30, what="the controller to see every node of the test")
        # The accepted alert comes last: before, it waited for every refusal ahead of it.
        body = payload(*(alert(name) for name in protected), alert(failing))
        sent = time.time()
        answer = await client.post(
            "/alerts", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        acknowledged = time.time()
        assert answer.status == 200, await answer.text()

        cordons: list[dict[str, Any]] = []

        def cordoned() -> bool:
            cordons[:] = [e for e in server.audit_events() if _is_cordon_of(failing)(e)]
            return bool(cordons)

        await until_async(cordoned, timeout=60, what=f"the cordon of {failing}", interval=0.1)
        fenced = _completed(cordons[0]) - sent
        print(
            f"[fencing] acknowledged after {acknowledged - sent:.3f} s, "
            f"cordon completed after {fenced:.3f} s"
        )
        assert len(cordons) == 1

        # Every refusal is recorded, in the metrics and the journal...
        metrics = app[EXECUTOR].metrics
        await until_async(
            lambda: metrics.refusals("protected") >= REFUSED,
            timeout=30,
            what="every refusal counted",
        )
        assert metrics.refusals("protected") == REFUSED
        journal: Journal = app[JOURNAL]
        refused = [d for d in await journal.decisions("refused") if d.node in ours]
        assert sorted(d.node for d in refused) == sorted(protected)
        assert {d.reason for d in refused} == {"protected"}

        # ... and each gets its Event, after the fencing, at the budget's pace.
        await until_async(
            lambda: len(_refused_events(server, ours)) == REFUSED,
            timeout=90,
            what="an Event for every refused alert",
            interval=0.5,
        )
        on = sorted(e["involvedObject"]["name"] for e in _refused_events(server, ours))
        assert on == sorted(protected)
        # The cordon did not wait for them: most were written after it.
        # The first write of each of this test's refusal Events (a retried create writes again;
        # the server's audit log also holds earlier tests' Events).
        first: dict[str, float] = {}
        for event in server.audit_events():
            if _is_refusal_event(event):
                about = (event["requestObject"].get("involvedObject") or {}).get("name", "")
                if about in ours:
                    first[about] = min(first.get(about, math.inf), _completed(event))
        assert sorted(first) == sorted(protected)
        before = sum(1 for at in first.values() if at < _completed(cordons[0]))
        print(f"[fencing] refusal Events written before the cordon: {before} of {REFUSED}")
        assert before <= EVENTS_BEFORE_CORDON
