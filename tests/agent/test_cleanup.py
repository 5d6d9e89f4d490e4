"""NodeCleanup with stand-ins for the runtime and the API server: the paths a real containerd
cannot be made to take on demand (a remove that fails, a sandbox that changes between the
re-check and the act, a status write that fails), and level triggering."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest

from exporter.agent.cleanup import NodeCleanup
from exporter.cri.errors import CRIError, NotFound, RuntimeUnavailable
from exporter.kube.errors import KubeError, ServerError
from exporter.metrics.cleanup import CleanupTotals
from exporter.model.cleanup import CleanupState, CleanupStatus, Remaining
from exporter.model.drift import Drift, compute_drift, kubelet_gone
from exporter.model.kube import NodeCondition, NodeInfo, PodInfo
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION
from exporter.model.runtime import Container, PodSandbox, RuntimeSnapshot, SandboxState
from tests.model.builders import exited, running, sandbox

NOW = 1_700_000_000.0
OLD = NOW - 3600
NODE = "node-a"


@dataclass
class FakeRuntime:
    sandboxes: dict[str, PodSandbox]
    containers: dict[str, Container]
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail: dict[str, CRIError] = field(default_factory=dict)  # operation -> error
    down: bool = False

    def _call(self, op: str, target: str) -> None:
        if self.down:
            raise RuntimeUnavailable(op, "UNAVAILABLE", "connection refused")
        self.calls.append((op, target))
        if op in self.fail:
            raise self.fail[op]

    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0].startswith(("stop", "remove"))]

    async def list_pod_sandboxes(self) -> tuple[PodSandbox, ...]:
        self._call("list_podsandbox", "")
        return tuple(self.sandboxes.values())

    async def list_containers(self) -> tuple[Container, ...]:
        self._call("list_containers", "")
        return tuple(self.containers.values())

    async def pod_sandbox_status(self, pod_sandbox_id: str) -> PodSandbox:
        self._call("podsandbox_status", pod_sandbox_id)
        if pod_sandbox_id not in self.sandboxes:
            raise NotFound("podsandbox_status", "NOT_FOUND", "not found")
        return self.sandboxes[pod_sandbox_id]

    async def container_status(self, container_id: str, pod_sandbox_id: str = "") -> Container:
        self._call("container_status", container_id)
        if container_id not in self.containers:
            raise NotFound("container_status", "NOT_FOUND", "not found")
        return self.containers[container_id]

    async def stop_pod_sandbox(
        self, pod_sandbox_id: str, call_timeout: float | None = None
    ) -> None:
        self._call("stop_podsandbox", pod_sandbox_id)
        if pod_sandbox_id in self.sandboxes:
            s = self.sandboxes[pod_sandbox_id]
            self.sandboxes[pod_sandbox_id] = replace(s, state=SandboxState.NOTREADY)

    async def remove_pod_sandbox(
        self, pod_sandbox_id: str, call_timeout: float | None = None
    ) -> None:
        self._call("remove_podsandbox", pod_sandbox_id)
        self.sandboxes.pop(pod_sandbox_id, None)
        for cid in [c.id for c in self.containers.values() if c.pod_sandbox_id == pod_sandbox_id]:
            del self.containers[cid]

    async def stop_container(self, container_id: str, timeout_seconds: int = 0) -> None:
        self._call("stop_container", container_id)

    async def remove_container(self, container_id: str, call_timeout: float | None = None) -> None:
        self._call("remove_container", container_id)
        self.containers.pop(container_id, None)


@dataclass
class FakeAPI:
    node: NodeInfo
    pods: list[PodInfo]
    list_error: KubeError | None = None
    annotate_error: KubeError | None = None
    lists: int = 0
    written: list[str] = field(default_factory=list)

    @property
    def reads(self) -> FakeAPI:
        return self

    async def list_pods_on_node(self, node: str) -> list[PodInfo]:
        assert node == NODE
        self.lists += 1
        if self.list_error is not None:
            raise self.list_error
        return list(self.pods)

    async def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> object:
        if self.annotate_error is not None:
            raise self.annotate_error
        merged = {**self.node.annotations}
        for k, v in annotations.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        self.node = replace(self.node, annotations=merged)
        self.written.append(annotations[CLEANUP_STATUS_ANNOTATION] or "")
        return None

    def request(self, request_id: str) -> None:
        annotations = {**self.node.annotations, CLEANUP_REQUEST_ANNOTATION: request_id}
        self.node = replace(self.node, annotations=annotations)

    def status(self) -> CleanupStatus | None:
        return CleanupStatus.from_json(self.node.annotations.get(CLEANUP_STATUS_ANNOTATION, ""))


def pod(uid: str, name: str) -> PodInfo:
    return PodInfo(
        uid=uid, namespace="default", name=name, node_name=NODE, phase="Running", created_at=OLD
    )


class Node:
    """A desired pod (u-web), an orphan sandbox (u-gone) and an orphan container (u-lost)."""

    def __init__(self) -> None:
        self.now = NOW
        self.healthz: list[bool] = []  # what each healthz probe answered
        self.kubelet_answers = False
        web = sandbox("u-web", id="sb-web", created_at=OLD)
        gone = sandbox("u-gone", id="sb-gone", name="gone", created_at=OLD)
        web_app = running(uid="u-web", sandbox_id="sb-web", created_at=OLD)
        lost = exited(uid="u-lost", sandbox_id="sb-lost", pod="lost", created_at=OLD)
        self.runtime = FakeRuntime(
            {s.id: s for s in (web, gone)}, {c.id: c for c in (web_app, lost)}
        )
        self.lost_id = lost.id
        self.api = FakeAPI(
            NodeInfo(name=NODE, uid="node-uid", created_at=OLD), [pod("u-web", "web")]
        )
        self.drift: Drift | None = self.compute()
        self.cleanup = NodeCleanup(
            NODE,
            node=lambda: self.api.node,
            drift=lambda: self.drift,
            runtime=self.runtime,
            api=self.api,
            kubelet_healthy=self.probe,
            clock=lambda: self.now,
        )

    async def probe(self) -> bool:
        self.healthz.append(self.kubelet_answers)
        return self.kubelet_answers

    def compute(self) -> Drift:
        """The sync loop's drift now, the kubelet gone as its last probe and the Node say."""
        snapshot = RuntimeSnapshot(
            self.now,
            None,
            (),
            tuple(self.runtime.sandboxes.values()),
            tuple(self.runtime.containers.values()),
        )
        gone = kubelet_gone(self.kubelet_answers, self.api.node)
        return compute_drift(
            self.api.pods, snapshot, (), self.now, grace_seconds=60, kubelet_gone=gone
        )


@pytest.fixture
def node() -> Node:
    return Node()


async def test_no_request_no_action(node: Node) -> None:
    assert await node.cleanup.check_once() is None
    assert node.runtime.calls == []
    assert node.api.lists == 0
    assert node.cleanup.checks == 1


async def test_a_request_removes_the_orphans_and_answers_once(node: Node) -> None:
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert (status.id, status.state) == ("r1", CleanupState.DONE)
    assert (status.removed_sandboxes, status.removed_containers) == (1, 1)
    assert node.api.status() == status
    assert status.remaining == Remaining()
    assert node.runtime.writes() == [
        ("stop_container", node.lost_id),
        ("remove_container", node.lost_id),
        ("stop_podsandbox", "sb-gone"),
        ("remove_podsandbox", "sb-gone"),
    ]
    assert set(node.runtime.sandboxes) == {"sb-web"}
    assert node.cleanup.totals() == CleanupTotals(
        done=1, removed_sandboxes=1, removed_containers=1, last_finished_at=NOW
    )
    # Seen again and again, the answered request does nothing.
    for _ in range(3):
        assert await node.cleanup.check_once() is None
    assert len(node.runtime.writes()) == 4
    assert node.api.written == [status.to_json()]


async def test_an_answered_request_is_not_redone_after_a_restart(node: Node) -> None:
    node.api.request("r1")
    await node.cleanup.check_once()
    restarted = NodeCleanup(
        NODE,
        node=lambda: node.api.node,
        drift=lambda: node.drift,  # the old drift, still naming sb-gone
        runtime=node.runtime,
        api=node.api,
    )
    assert await restarted.check_once() is None
    assert len(node.runtime.writes()) == 4


async def test_a_lagging_watch_does_not_clean_twice(node: Node) -> None:
    node.api.request("r1")
    stale_view = node.api.node  # the watch will not see the status for a while
    cleanup = NodeCleanup(
        NODE,
        node=lambda: stale_view,
        drift=lambda: node.drift,
        runtime=node.runtime,
        api=node.api,
    )
    assert await cleanup.check_once() is not None
    assert await cleanup.check_once() is None
    assert len(node.runtime.writes()) == 4
    assert len(node.api.written) == 1


@pytest.mark.parametrize("cause", ["no drift", "API down"])
async def test_a_request_waits_acknowledged_while_drift_cannot_be_known(
    node: Node, cause: str
) -> None:
    """The agent's view is not synced or the API server cannot be read: the request is taken
    up (``running``, so the controller knows the agent is there), nothing is removed, and it is
    answered once drift can be known."""
    node.api.request("r1")
    if cause == "no drift":
        node.drift = None
    else:
        node.api.list_error = ServerError(500, "InternalError")
    for _ in range(3):
        assert await node.cleanup.check_once() is None
    assert node.runtime.writes() == []
    ack = node.api.status()
    assert ack is not None
    assert (ack.id, ack.state) == ("r1", CleanupState.RUNNING)
    assert len(node.api.written) == 1, "acknowledged once, not at every look"
    assert node.cleanup.totals() == CleanupTotals()
    # Once it can be known, the request is answered.
    node.drift = node.compute()
    node.api.list_error = None
    status = await node.cleanup.check_once()
    assert status is not None
    assert status.state is CleanupState.DONE
    assert node.api.status() == status


@pytest.mark.parametrize("how", ["calls fail", "sync loop says so"])
async def test_a_runtime_that_cannot_be_read_is_answered_unavailable_at_the_second_look(
    node: Node, how: str
) -> None:
    errors = {"error": ""}
    cleanup = NodeCleanup(
        NODE,
        node=lambda: node.api.node,
        drift=lambda: node.drift,
        runtime=node.runtime,
        runtime_error=lambda: errors["error"],
        api=node.api,
        clock=lambda: NOW,
    )
    node.api.request("r1")
    if how == "calls fail":
        node.runtime.down = True
    else:  # the sync loop has no drift because the runtime is down, and says why
        node.drift = None
        errors["error"] = "rpc error: code = DeadlineExceeded"
    assert await cleanup.check_once() is None  # the first look: acknowledged, looked at again
    ack = node.api.status()
    assert ack is not None
    assert ack.state is CleanupState.RUNNING
    status = await cleanup.check_once()
    assert status is not None
    assert (status.id, status.state) == ("r1", CleanupState.UNAVAILABLE)
    assert status.error
    assert node.api.status() == status
    assert node.runtime.writes() == []
    assert cleanup.totals() == CleanupTotals(unavailable=1, last_finished_at=NOW)
    # Answered: the runtime coming back does not start it again; a new request would.
    node.runtime.down = False
    node.drift = node.compute()
    errors["error"] = ""
    assert await cleanup.check_once() is None
    assert node.runtime.writes() == []


async def test_a_failure_is_reported_and_only_a_new_id_retries(node: Node) -> None:
    node.runtime.fail["remove_podsandbox"] = CRIError("remove_podsandbox", "INTERNAL", "boom")
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert status.state is CleanupState.FAILED
    assert "remove_podsandbox" in status.error
    assert "boom" in status.error
    assert (status.removed_sandboxes, status.removed_containers) == (0, 1)
    assert node.api.status() == status
    assert node.cleanup.totals().failed == 1
    writes = len(node.runtime.writes())
    assert await node.cleanup.check_once() is None  # same id: no retry
    assert len(node.runtime.writes()) == writes

    del node.runtime.fail["remove_podsandbox"]
    node.drift = node.compute()
    node.api.request("r2")
    retried = await node.cleanup.check_once()
    assert retried is not None
    assert (retried.id, retried.state, retried.removed_sandboxes) == ("r2", CleanupState.DONE, 1)
    assert node.cleanup.totals() == CleanupTotals(
        done=1, failed=1, removed_sandboxes=1, removed_containers=1, last_finished_at=NOW
    )


async def test_a_failed_status_write_is_retried_without_cleaning_again(node: Node) -> None:
    node.api.annotate_error = ServerError(503, "ServiceUnavailable")
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert node.api.status() is None
    writes = len(node.runtime.writes())
    node.api.annotate_error = None
    assert await node.cleanup.check_once() is None
    assert node.api.status() == status
    assert len(node.runtime.writes()) == writes
    assert node.cleanup.totals().done == 1


async def test_a_sandbox_that_changed_since_the_fresh_read_is_left_alone(node: Node) -> None:
    # Between the fresh list and the act, the runtime reports another pod for the id.
    real_status = node.runtime.pod_sandbox_status

    async def other_pod(pod_sandbox_id: str) -> PodSandbox:
        return replace(await real_status(pod_sandbox_id), uid="u-someone-else")

    node.runtime.pod_sandbox_status = other_pod  # type: ignore[method-assign]
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert (status.removed_sandboxes, status.skipped) == (0, 1)
    assert "sb-gone" in node.runtime.sandboxes
    assert ("remove_podsandbox", "sb-gone") not in node.runtime.calls


async def test_an_object_already_gone_is_skipped_not_failed(node: Node) -> None:
    real_list = node.runtime.list_containers

    async def list_then_vanish() -> tuple[Container, ...]:
        listed = await real_list()
        node.runtime.containers.pop(node.lost_id, None)  # kubelet's GC was quicker
        return listed

    node.runtime.list_containers = list_then_vanish  # type: ignore[method-assign]
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert status.state is CleanupState.DONE
    assert (status.removed_containers, status.skipped) == (0, 1)
    assert ("remove_container", node.lost_id) not in node.runtime.calls


async def test_a_pod_desired_now_keeps_its_sandbox(node: Node) -> None:
    node.api.pods.append(pod("u-gone", "gone"))  # the API server lists it now
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert (status.removed_sandboxes, status.removed_containers, status.skipped) == (0, 1, 1)
    assert "sb-gone" in node.runtime.sandboxes
    assert all(target != "sb-gone" for op, target in node.runtime.writes())


async def test_missing_and_kubelet_only_drift_is_never_acted_on() -> None:
    node = Node()
    node.api.pods.append(pod("u-slow", "slow"))  # desired, no sandbox: missing_sandbox
    node.runtime.sandboxes.pop("sb-gone")
    node.runtime.containers.pop(node.lost_id)
    snapshot = RuntimeSnapshot(
        NOW,
        None,
        (),
        tuple(node.runtime.sandboxes.values()),
        tuple(node.runtime.containers.values()),
    )
    node.drift = compute_drift(
        node.api.pods, snapshot, {"u-dir"}, NOW, grace_seconds=60, first_seen={"u-dir": OLD}
    )
    assert {i.kind.value for i in node.drift.items} == {"missing_sandbox", "kubelet_only"}
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert (status.state, status.removed_sandboxes, status.skipped) == (CleanupState.DONE, 0, 0)
    assert node.runtime.writes() == []


# ---------------------------------------------------------------- the kubelet gone


def evicted(deleted_at: float) -> PodInfo:
    """The API server's pod after an eviction: deletionTimestamp = the end of its grace."""
    return replace(
        pod("u-ev", "evicted"), deletion_timestamp=deleted_at, deletion_grace_period_seconds=30
    )


def with_evicted_pod(node: Node, deleted_at: float, ready: str) -> None:
    """The node also runs a pod the drain evicted, and its Node says Ready ``ready``."""
    ev = sandbox("u-ev", id="sb-ev", name="evicted", created_at=OLD)
    app = running(uid="u-ev", sandbox_id="sb-ev", pod="evicted", created_at=OLD)
    node.runtime.sandboxes[ev.id] = ev
    node.runtime.containers[app.id] = app
    node.api.pods.append(evicted(deleted_at))
    condition = NodeCondition("Ready", ready)
    node.api.node = replace(node.api.node, conditions=(condition,))
    node.drift = node.compute()


async def test_a_pod_past_its_deletion_is_removed_when_the_kubelet_is_gone(node: Node) -> None:
    with_evicted_pod(node, NOW + 25, "Unknown")
    node.api.request("r1")
    # Its deletion is not due: acknowledged, nothing removed, looked at again.
    for _ in range(2):
        assert await node.cleanup.check_once() is None
    assert node.runtime.writes() == []
    ack = node.api.status()
    assert ack is not None
    assert ack.state is CleanupState.RUNNING
    assert node.healthz == [False, False]  # probed at each look, right before deciding
    # Due, but the sync loop's drift was computed before: still waits for it.
    node.now = NOW + 26
    assert await node.cleanup.check_once() is None
    assert node.runtime.writes() == []
    # The sync loop's next drift shows it: removed, with the orphans, the runtime clean.
    node.drift = node.compute()
    status = await node.cleanup.check_once()
    assert status is not None
    assert status.state is CleanupState.DONE
    assert (status.removed_sandboxes, status.removed_containers) == (2, 1)
    assert ("remove_podsandbox", "sb-ev") in node.runtime.writes()
    assert set(node.runtime.sandboxes) == {"sb-web"}
    assert status.remaining == Remaining()


@pytest.mark.parametrize(
    ("answers", "ready"),
    [
        pytest.param(True, "Unknown", id="its healthz answers"),
        pytest.param(False, "True", id="its Node is Ready"),
        pytest.param(False, "False", id="its Node is NotReady (posted by a live kubelet)"),
    ],
)
async def test_a_pod_being_deleted_is_left_to_a_kubelet_that_is_not_gone(
    node: Node, answers: bool, ready: str
) -> None:
    node.kubelet_answers = answers
    with_evicted_pod(node, NOW - 5, ready)
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert (status.state, status.removed_sandboxes, status.removed_containers) == (
        CleanupState.DONE,
        1,
        1,
    )
    assert "sb-ev" in node.runtime.sandboxes
    assert [c.pod_uid for c in node.runtime.containers.values()].count("u-ev") == 1
    assert all(target != "sb-ev" for _, target in node.runtime.writes())
    assert status.remaining == Remaining()  # a live kubelet's pod is not unwanted yet
    if ready != "Unknown":
        assert node.healthz == [], "no probe while the Node is not Ready Unknown"


async def test_a_kubelet_that_answers_again_right_before_acting_keeps_the_pod(node: Node) -> None:
    with_evicted_pod(node, NOW - 5, "Unknown")  # the sync loop's drift saw the kubelet gone
    assert node.drift is not None
    assert "sb-ev" in {i.sandbox_id for i in node.drift.items}
    node.kubelet_answers = True  # ... and right before acting it answers
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert status.state is CleanupState.DONE
    assert "sb-ev" in node.runtime.sandboxes
    assert status.skipped == 1


async def test_without_a_healthz_probe_the_kubelet_is_never_gone(node: Node) -> None:
    with_evicted_pod(node, NOW - 5, "Unknown")
    cleanup = NodeCleanup(
        NODE,
        node=lambda: node.api.node,
        drift=lambda: node.drift,
        runtime=node.runtime,
        api=node.api,
        clock=lambda: NOW,
    )
    node.api.request("r1")
    status = await cleanup.check_once()
    assert status is not None
    assert "sb-ev" in node.runtime.sandboxes


async def test_what_a_removal_left_behind_is_reported(node: Node) -> None:
    async def remove_nothing(pod_sandbox_id: str, call_timeout: float | None = None) -> None:
        node.runtime.calls.append(("remove_podsandbox", pod_sandbox_id))  # OK, yet it stays

    node.runtime.remove_pod_sandbox = remove_nothing  # type: ignore[method-assign]
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert status.state is CleanupState.DONE
    assert status.remaining == Remaining(1, 0, ("default/gone",))
    assert node.api.status() == status


async def test_a_runtime_that_cannot_be_listed_after_the_cleanup_fails_it(node: Node) -> None:
    real_list = node.runtime.list_pod_sandboxes
    lists = []

    async def second_list_fails() -> tuple[PodSandbox, ...]:
        lists.append(1)
        if len(lists) > 1:
            raise CRIError("list_podsandbox", "DEADLINE_EXCEEDED", "frozen")
        return await real_list()

    node.runtime.list_pod_sandboxes = second_list_fails  # type: ignore[method-assign]
    node.api.request("r1")
    status = await node.cleanup.check_once()
    assert status is not None
    assert status.state is CleanupState.FAILED
    assert "cannot list the runtime after the cleanup" in status.error
    assert status.remaining is None
    assert (status.removed_sandboxes, status.removed_containers) == (1, 1)
