"""Least privilege, enforced: nodesync runs under exactly the RBAC it ships.

1. A whole rollback (the real agent on a real containerd with its cleanup, the controller with
   its webhook, executor, leader election and node deletion) succeeds with the shipped roles,
   no request is refused, and every granted permission was used.
2. Each permission is needed: with any one of them taken away, the run fails (and a request
   that permission governs was refused). The agent's permissions are checked on the agent
   alone (the test plays the controller's part of the cleanup handshake), the controller's on
   the controller alone (the node agents' answers are played through the store); each
   baseline must succeed first.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from exporter.cri.client import CRIClient
from nodesync_sim.fake.apiserver.rbac import Permission, RBACAuthorizer
from nodesync_sim.real.containerd import LocalContainerd
from tests.controller.executor_harness import Agent as StandInAgent
from tests.deploy.manifests import NAMESPACE, one
from tests.metrics.exposition import labels, series
from tests.rbac.harness import (
    AGENT,
    CONTROLLER,
    PROMETHEUS,
    SOURCE_API,
    Outcome,
    agent,
    cluster,
    controller,
    shipped_objects,
    shipped_rbac,
    watch,
)

pytestmark = pytest.mark.containerd

#: How long a run may still succeed after a request was refused: the agent retries every sync
#: period (0.2 s here), the controller's executor retries a failed step after 1 s, then 2 s.
AGENT_GRACE = 1.2
CONTROLLER_GRACE = 3.0


@pytest.mark.timeout(120)
async def test_a_rollback_under_the_shipped_rbac_uses_every_permission_and_nothing_else(
    containerd: LocalContainerd, tmp_path: Path
) -> None:
    authz = shipped_rbac()
    async with (
        cluster(authz, tmp_path) as env,
        agent(env, containerd, tmp_path / "agent") as node_agent,
        controller(env, tmp_path / "controller") as ctl,
    ):
        outcome = await watch(ctl.missing, env, within=60.0)
        assert outcome.succeeded, outcome.missing
        text = await node_agent.scrape()
        web = env.server.store.try_get("pods", "web", namespace="default")
        assert web is None or web["metadata"].get("deletionTimestamp"), "the pod was not evicted"
    assert series(text, "nodesync_source_up")[SOURCE_API] == 1
    # One cleanup: the escalation came in the same delivery, so it changed the rollback before
    # the rollback was driven, and the agent was asked once, by the node rollback.
    assert series(text, "nodesync_cleanup_requests_total")[labels(result="done")] == 1
    assert series(text, "nodesync_cleanup_removed_total")[labels(kind="sandbox")] >= 1
    async with CRIClient(containerd.endpoint) as cri:
        assert [s.name for s in await cri.list_pod_sandboxes()] == []  # the orphan is gone
    assert authz.denials() == [], "requests nodesync needed were refused"
    # nodesync's own permissions; Prometheus' (the monitoring component) are exactly those of
    # its service discovery, checked below and in tests/deploy/test_overlays.py.
    unused = "\n".join(str(p) for p in authz.unused(AGENT) + authz.unused(CONTROLLER))
    assert unused == "", f"granted and never used (remove them from deploy/):\n{unused}"


def _report(results: dict[Permission, Outcome]) -> str:
    lines = []
    for permission, outcome in results.items():
        if outcome.succeeded:
            lines.append(f"the run succeeded without {permission}: it is not needed")
        elif not outcome.refused:
            lines.append(f"the run failed without {permission}, but nothing it governs was refused")
    return "\n".join(lines)


@pytest.mark.timeout(240)
async def test_every_agent_permission_is_needed(
    containerd: LocalContainerd, tmp_path: Path
) -> None:
    full = shipped_rbac()
    permissions = full.permissions(AGENT)
    assert permissions

    async def run(authz: RBACAuthorizer, removed: Permission | None, index: int) -> Outcome:
        async with (
            cluster(authz, tmp_path / f"run-{index}") as env,
            agent(env, containerd, tmp_path / f"run-{index}") as node_agent,
        ):
            request = f"rbac-{index}"
            node_agent.request(request)
            return await watch(
                lambda: node_agent.missing(request),
                env,
                removed=removed,
                within=30.0,
                grace=AGENT_GRACE,
            )

    baseline = await run(full.fresh(), None, 0)
    assert baseline.succeeded, f"the agent's run fails with every permission: {baseline.missing}"
    results = {}
    for index, permission in enumerate(permissions, start=1):
        results[permission] = await run(full.without(permission), permission, index)
    assert _report(results) == ""


async def _controller_run(
    authz: RBACAuthorizer, removed: Permission | None, tmp_path: Path
) -> Outcome:
    """The controller alone rolls the node back; the node's agent is played in the store."""
    async with cluster(authz, tmp_path) as env, controller(env, tmp_path) as ctl:
        stand_in = StandInAgent(env.server.store)
        answering = asyncio.create_task(stand_in.run())
        try:
            return await watch(
                ctl.missing, env, removed=removed, within=40.0, grace=CONTROLLER_GRACE
            )
        finally:
            answering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answering


#: Controller runs at once: each must finish its rollback within its own deadline, so on two
#: busy cores only a few share them.
CONCURRENT_RUNS = 3


@pytest.mark.timeout(420)
async def test_every_controller_permission_is_needed(tmp_path: Path) -> None:
    full = shipped_rbac()
    permissions = full.permissions(CONTROLLER)
    assert permissions
    baseline = await _controller_run(full.fresh(), None, tmp_path / "run-0")
    assert baseline.succeeded, (
        f"the controller's run fails with every permission: {baseline.missing}"
    )
    slots = asyncio.Semaphore(CONCURRENT_RUNS)

    async def without(index: int, permission: Permission) -> Outcome:
        async with slots:
            return await _controller_run(
                full.without(permission), permission, tmp_path / f"run-{index}"
            )

    outcomes = await asyncio.gather(*(without(i, p) for i, p in enumerate(permissions, start=1)))
    assert _report(dict(zip(permissions, outcomes, strict=True))) == ""


async def test_a_permission_nodesync_does_not_need_is_found(tmp_path: Path) -> None:
    """The checks above would notice an extra grant: unused in the run, and not missed."""
    objects = shipped_objects()
    role = one(objects, "ClusterRole", "nodesync-controller")
    role["rules"].append({"apiGroups": [""], "resources": ["events"], "verbs": ["list"]})
    authz = RBACAuthorizer.from_objects(objects)
    outcome = await _controller_run(authz, None, tmp_path / "with")
    assert outcome.succeeded, outcome.missing
    (unneeded,) = authz.unused(CONTROLLER)
    assert (unneeded.verb, unneeded.resource) == ("list", "events")
    without = await _controller_run(authz.without(unneeded), unneeded, tmp_path / "without")
    assert without.succeeded
    assert "is not needed" in _report({unneeded: without})


def test_every_shipped_permission_belongs_to_the_agent_the_controller_or_prometheus() -> None:
    authz = shipped_rbac()
    ours = authz.permissions(AGENT) + authz.permissions(CONTROLLER)
    assert sorted(ours + authz.permissions(PROMETHEUS)) == authz.permissions()
    # Prometheus reads the nodesync namespace only, and writes nothing.
    assert {(p.role.namespace, p.verb) for p in authz.permissions(PROMETHEUS)} == {
        (NAMESPACE, "list"),
        (NAMESPACE, "watch"),
    }
