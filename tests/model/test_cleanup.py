"""The cleanup handshake's pure parts: the status annotation, pending requests, and which drift
items a cleanup may act on after the re-check."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.model.cleanup import (
    CLEANABLE,
    REMAINING_PODS_MAX,
    CleanupState,
    CleanupStatus,
    Remaining,
    desired_uids,
    pending_request,
    remaining_after,
    select,
)
from exporter.model.drift import Drift, DriftItem, DriftKind, compute_drift
from exporter.model.kube import PodInfo
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION
from exporter.model.runtime import RuntimeSnapshot, SandboxState
from tests.model.builders import exited, running, sandbox

NOW = 1_700_000_000.0
OLD = NOW - 3600


def status(request: str = "r1", **kw: Any) -> CleanupStatus:
    fields: dict[str, Any] = {
        "id": request,
        "state": CleanupState.DONE,
        "removed_sandboxes": 2,
        "removed_containers": 1,
        "finished_at": 1_800_000_000.0,
    }
    return CleanupStatus(**(fields | kw))


# ---------------------------------------------------------------- the status annotation


def test_status_round_trips_through_json() -> None:
    original = status(state=CleanupState.FAILED, error="CRI remove_podsandbox failed", skipped=3)
    text = original.to_json()
    assert json.loads(text) == {
        "id": "r1",
        "state": "failed",
        "removedSandboxes": 2,
        "removedContainers": 1,
        "skipped": 3,
        "finishedAt": "2027-01-15T08:00:00Z",
        "error": "CRI remove_podsandbox failed",
    }
    assert CleanupStatus.from_json(text) == original


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"state": "done"}',
        '{"id": 7, "state": "done"}',
        '{"id": "r1", "state": "started"}',
        '{"id": "r1"}',
    ],
)
def test_anything_else_is_no_status(text: str) -> None:
    assert CleanupStatus.from_json(text) is None


def test_odd_fields_read_as_defaults() -> None:
    text = '{"id":"r1","state":"done","removedSandboxes":"2","finishedAt":"soon","error":5}'
    parsed = CleanupStatus.from_json(text)
    assert parsed == CleanupStatus("r1", CleanupState.DONE, 0, 0, 0.0, "", 0)


@pytest.mark.parametrize(
    ("annotations", "pending"),
    [
        pytest.param({}, None, id="no request"),
        pytest.param({CLEANUP_REQUEST_ANNOTATION: ""}, None, id="empty request"),
        pytest.param({CLEANUP_REQUEST_ANNOTATION: "r1"}, "r1", id="new"),
        pytest.param(
            {CLEANUP_REQUEST_ANNOTATION: "r1", CLEANUP_STATUS_ANNOTATION: status("r1").to_json()},
            None,
            id="answered",
        ),
        pytest.param(
            {
                CLEANUP_REQUEST_ANNOTATION: "r1",
                CLEANUP_STATUS_ANNOTATION: status("r1", state=CleanupState.FAILED).to_json(),
            },
            None,
            id="failed: only a new id retries",
        ),
        pytest.param(
            {CLEANUP_REQUEST_ANNOTATION: "r2", CLEANUP_STATUS_ANNOTATION: status("r1").to_json()},
            "r2",
            id="a newer request",
        ),
        pytest.param(
            {CLEANUP_REQUEST_ANNOTATION: "r1", CLEANUP_STATUS_ANNOTATION: "garbage"},
            "r1",
            id="unreadable status",
        ),
    ],
)
def test_pending_request(annotations: dict[str, str], pending: str | None) -> None:
    assert pending_request(annotations) == pending


# ---------------------------------------------------------------- what a cleanup acts on


def pod(uid: str, name: str = "web", **kw: Any) -> PodInfo:
    fields: dict[str, Any] = {"node_name": "node-a", "phase": "Running", "created_at": OLD}
    return PodInfo(uid=uid, namespace="default", name=name, **(fields | kw))


def drift(pods: list[PodInfo], sandboxes: list[Any], containers: list[Any]) -> Drift:
    snapshot = RuntimeSnapshot(NOW, None, (), tuple(sandboxes), tuple(containers))
    return compute_drift(pods, snapshot, (), NOW, grace_seconds=60)


# The node as the request saw it: a desired pod "web" (u-web) with a stale, superseded
# sandbox; an orphan sandbox (u-gone) with a container; an orphan container whose sandbox is
# gone (u-lost); a desired pod "slow" without a sandbox (missing: nothing to remove).
WEB_OLD = sandbox("u-web", id="sb-web-0", state=SandboxState.NOTREADY, created_at=OLD)
WEB_NEW = sandbox("u-web", id="sb-web-1", attempt=1, created_at=OLD + 10)
GONE = sandbox("u-gone", id="sb-gone", name="gone", created_at=OLD)
GONE_APP = running(uid="u-gone", sandbox_id="sb-gone", pod="gone", created_at=OLD)
LOST_APP = exited(uid="u-lost", sandbox_id="sb-lost", pod="lost", created_at=OLD)
WEB_APP = running(uid="u-web", sandbox_id="sb-web-1", created_at=OLD + 11)
PODS = [pod("u-web"), pod("u-slow", "slow")]
REQUESTED = drift(PODS, [WEB_OLD, WEB_NEW, GONE], [GONE_APP, LOST_APP, WEB_APP])


def ids(items: tuple[DriftItem, ...]) -> list[tuple[str, str]]:
    return [(i.kind.value, i.container_id or i.sandbox_id) for i in items]


def test_the_requested_drift_has_every_kind() -> None:
    counts = REQUESTED.counts()
    assert counts[DriftKind.ORPHAN_SANDBOX] == 1
    assert counts[DriftKind.STALE_SANDBOX] == 1
    assert counts[DriftKind.ORPHAN_CONTAINER] == 1
    assert counts[DriftKind.MISSING_SANDBOX] == 1


def test_unchanged_state_acts_on_exactly_the_cleanable_items_containers_first() -> None:
    chosen = select(REQUESTED, REQUESTED, PODS, NOW)
    assert ids(chosen.act) == [
        ("orphan_container", LOST_APP.id),
        ("orphan_sandbox", "sb-gone"),
        ("stale_sandbox", "sb-web-0"),
    ]
    assert chosen.skipped == ()


def test_a_pod_desired_again_is_skipped() -> None:
    # Since the request, the API server lists a pod with the orphan's uid.
    live = [*PODS, pod("u-gone", "gone")]
    fresh = drift(live, [WEB_OLD, WEB_NEW, GONE], [GONE_APP, LOST_APP, WEB_APP])
    chosen = select(REQUESTED, fresh, live, NOW)
    assert ("orphan_sandbox", "sb-gone") not in ids(chosen.act)
    assert [(i.sandbox_id, why) for i, why in chosen.skipped] == [
        ("sb-gone", "its pod is desired now")
    ]


def test_even_a_stale_fresh_read_cannot_clean_a_desired_pod() -> None:
    # Belt and braces: the live pod list alone is enough to refuse.
    live = [*PODS, pod("u-gone", "gone")]
    chosen = select(REQUESTED, REQUESTED, live, NOW)
    assert ("orphan_sandbox", "sb-gone") not in ids(chosen.act)


def test_a_pod_being_deleted_past_its_grace_is_not_desired() -> None:
    deleted = pod("u-gone", "gone", deletion_timestamp=NOW - 100, deletion_grace_period_seconds=30)
    assert desired_uids([deleted], NOW) == frozenset()
    terminating = pod(
        "u-gone", "gone", deletion_timestamp=NOW + 5, deletion_grace_period_seconds=30
    )
    assert desired_uids([terminating], NOW) == {"u-gone"}


def test_what_changed_since_the_request_is_skipped() -> None:
    # The orphan sandbox is gone already; the stale sandbox was removed by kubelet.
    fresh = drift(PODS, [WEB_NEW], [LOST_APP, WEB_APP])
    chosen = select(REQUESTED, fresh, PODS, NOW)
    assert ids(chosen.act) == [("orphan_container", LOST_APP.id)]
    assert sorted((i.kind.value, why) for i, why in chosen.skipped) == [
        ("orphan_sandbox", "no longer drifted"),
        ("stale_sandbox", "no longer drifted"),
    ]


def test_the_newest_sandbox_is_never_stale() -> None:
    # The request saw sb-web-0 superseded; now sb-web-1 is gone, so sb-web-0 is the newest.
    fresh = drift(PODS, [WEB_OLD, GONE], [GONE_APP, LOST_APP])
    chosen = select(REQUESTED, fresh, PODS, NOW)
    assert ("stale_sandbox", "sb-web-0") not in ids(chosen.act)


def test_items_not_in_the_request_are_never_acted_on() -> None:
    newer = sandbox("u-new", id="sb-new", name="new", created_at=OLD)
    fresh = drift(PODS, [WEB_OLD, WEB_NEW, GONE, newer], [GONE_APP, LOST_APP, WEB_APP])
    assert ("orphan_sandbox", "sb-new") in ids(fresh.items)
    chosen = select(REQUESTED, fresh, PODS, NOW)
    assert "sb-new" not in {i.sandbox_id for i in chosen.act}


# ---------------------------------------------------------------- the kubelet gone


TERMINATING_AT = NOW - 5  # its deletionTimestamp: the grace ended 5 s ago
EVICTED = pod(
    "u-evicted", "evicted", deletion_timestamp=TERMINATING_AT, deletion_grace_period_seconds=30
)
EVICTED_SB = sandbox("u-evicted", id="sb-evicted", name="evicted", created_at=OLD)
EVICTED_APP = running(uid="u-evicted", sandbox_id="sb-evicted", pod="evicted", created_at=OLD)
NOT_DUE = pod("u-due", "due", deletion_timestamp=NOW + 20, deletion_grace_period_seconds=30)
NOT_DUE_SB = sandbox("u-due", id="sb-due", name="due", created_at=OLD)


def gone_drift(pods: list[PodInfo], sandboxes: list[Any], gone: bool, at: float = NOW) -> Drift:
    containers = (EVICTED_APP,) if EVICTED_SB in sandboxes else ()
    snapshot = RuntimeSnapshot(at, None, (), tuple(sandboxes), containers)
    return compute_drift(pods, snapshot, (), at, grace_seconds=60, kubelet_gone=gone)


HELD = frozenset({"u-web", "u-evicted", "u-due"})


@pytest.mark.parametrize(
    ("pods", "gone", "act", "waiting"),
    [
        pytest.param(
            [*PODS, EVICTED], True, ["sb-evicted"], [], id="past-due-kubelet-gone:-removed"
        ),
        pytest.param([*PODS, EVICTED], False, [], [], id="past-due-kubelet-alive:-kubelets"),
        pytest.param(
            [*PODS, NOT_DUE],
            True,
            [],
            [("due", "its deletion is due in 20 s")],
            id="not-due-kubelet-gone:-waits",
        ),
        pytest.param([*PODS, NOT_DUE], False, [], [], id="not-due-kubelet-alive:-nothing"),
        pytest.param(
            [*PODS, EVICTED, NOT_DUE],
            True,
            ["sb-evicted"],
            [("due", "its deletion is due in 20 s")],
            id="one-due-one-not:-waits-for-both",
        ),
    ],
)
def test_pods_being_deleted_are_cleaned_only_past_due_with_the_kubelet_gone(
    pods: list[PodInfo], gone: bool, act: list[str], waiting: list[tuple[str, str]]
) -> None:
    sandboxes = [
        WEB_NEW,
        *(s for p, s in ((EVICTED, EVICTED_SB), (NOT_DUE, NOT_DUE_SB)) if p in pods),
    ]
    requested = gone_drift(pods, sandboxes, gone)
    chosen = select(requested, requested, pods, NOW, kubelet_gone=gone, held=HELD)
    assert [i.sandbox_id for i in chosen.act] == act
    assert [(p.name, why) for p, why in chosen.waiting] == waiting
    assert "sb-web-1" not in {i.sandbox_id for i in chosen.act}  # the running pod, never


def test_a_deletion_the_requested_drift_has_not_seen_past_is_waited_for() -> None:
    # The sync loop computed the drift 10 s ago, before the deletion was due: it shows nothing.
    pods = [*PODS, EVICTED]
    requested = gone_drift(pods, [WEB_NEW, EVICTED_SB], True, at=NOW - 10)
    assert requested.of(DriftKind.ORPHAN_SANDBOX) == ()
    fresh = gone_drift(pods, [WEB_NEW, EVICTED_SB], True)
    chosen = select(requested, fresh, pods, NOW, kubelet_gone=True, held=HELD)
    assert chosen.act == ()
    assert [(p.name, why) for p, why in chosen.waiting] == [
        ("evicted", "the drift the request is answered from does not show it yet")
    ]
    # The same disagreement with the kubelet alive (as checked now): nothing to wait for.
    alive = select(requested, gone_drift(pods, [WEB_NEW, EVICTED_SB], False), pods, NOW, held=HELD)
    assert (alive.act, alive.waiting) == ((), ())


def test_a_pod_being_deleted_the_runtime_no_longer_holds_is_not_waited_for() -> None:
    pods = [*PODS, NOT_DUE]
    requested = gone_drift(pods, [WEB_NEW], True)
    chosen = select(requested, requested, pods, NOW, kubelet_gone=True, held={"u-web"})
    assert chosen.waiting == ()


def test_a_kubelet_that_came_back_keeps_the_pods_sandbox() -> None:
    # The request saw the kubelet gone; right before acting it answers again.
    pods = [*PODS, EVICTED]
    requested = gone_drift(pods, [WEB_NEW, EVICTED_SB], True)
    fresh = gone_drift(pods, [WEB_NEW, EVICTED_SB], False)
    chosen = select(requested, fresh, pods, NOW, kubelet_gone=False, held=HELD)
    assert chosen.act == ()
    assert [(i.sandbox_id, why) for i, why in chosen.skipped] == [
        ("sb-evicted", "its pod is desired now")
    ]


def test_desired_uids_with_the_kubelet_gone_end_at_the_deletion_timestamp() -> None:
    assert desired_uids([EVICTED, NOT_DUE], NOW) == {"u-evicted", "u-due"}
    assert desired_uids([EVICTED, NOT_DUE], NOW, kubelet_gone=True) == {"u-due"}


# ---------------------------------------------------------------- the agent's own pod


# The agent's own pod, deleted (its DaemonSet updated) while the kubelet is gone: Terminating,
# and still held by the runtime, exactly as EVICTED and NOT_DUE are.
OWN = pod("u-agent", "agent", deletion_timestamp=TERMINATING_AT, deletion_grace_period_seconds=30)
OWN_NOT_DUE = pod("u-agent", "agent", deletion_timestamp=NOW + 20, deletion_grace_period_seconds=30)
OWN_SB = sandbox("u-agent", id="sb-agent", name="agent", created_at=OLD)
OWN_APP = running(uid="u-agent", sandbox_id="sb-agent", pod="agent", created_at=OLD)
OWN_HELD = HELD | {"u-agent"}


def own_drift(pods: list[PodInfo], sandboxes: list[Any], gone: bool) -> Drift:
    containers = [c for s, c in ((EVICTED_SB, EVICTED_APP), (OWN_SB, OWN_APP)) if s in sandboxes]
    snapshot = RuntimeSnapshot(NOW, None, (), tuple(sandboxes), tuple(containers))
    return compute_drift(pods, snapshot, (), NOW, grace_seconds=60, kubelet_gone=gone)


GONE_DUE = ([*PODS, EVICTED, OWN], [WEB_NEW, EVICTED_SB, OWN_SB])
GONE_NOT_DUE = ([*PODS, NOT_DUE, OWN_NOT_DUE], [WEB_NEW, NOT_DUE_SB, OWN_SB])
OBJECTS_GONE = (PODS, [WEB_NEW, EVICTED_SB, OWN_SB])  # a live kubelet confirmed both deletions
REMOVED = (["sb-evicted"], [])  # (sandboxes acted on, pods waited for)
BOTH_REMOVED = (["sb-agent", "sb-evicted"], [])


@pytest.mark.parametrize(
    ("scene", "gone", "spared", "unchanged"),
    [
        pytest.param(GONE_DUE, True, REMOVED, BOTH_REMOVED, id="gone-past-due:-the-other-removed"),
        pytest.param(
            GONE_NOT_DUE, True, ([], ["due"]), ([], ["agent", "due"]), id="gone-not-due:-waits"
        ),
        pytest.param(GONE_DUE, False, ([], []), ([], []), id="live-being-deleted:-the-kubelets"),
        pytest.param(
            OBJECTS_GONE, False, REMOVED, BOTH_REMOVED, id="live-objects-gone:-the-other-removed"
        ),
    ],
)
def test_the_agents_own_pod_is_never_waited_for_nor_removed(
    scene: tuple[list[PodInfo], list[Any]],
    gone: bool,
    spared: tuple[list[str], list[str]],
    unchanged: tuple[list[str], list[str]],
) -> None:
    """(sandboxes acted on, pods waited for): with the own pod's uid, and without (as before:
    the own pod is one more pod being deleted)."""
    pods, sandboxes = scene
    requested = own_drift(pods, sandboxes, gone)
    own = [i.sandbox_id for i in requested.items if i.pod_uid == "u-agent" and i.kind in CLEANABLE]
    for spare, (act, waiting) in (("u-agent", spared), ("", unchanged)):
        chosen = select(
            requested, requested, pods, NOW, kubelet_gone=gone, held=OWN_HELD, own_pod_uid=spare
        )
        assert sorted({i.sandbox_id for i in chosen.act}) == act, spare
        assert sorted(p.name for p, _ in chosen.waiting) == waiting, spare
        skipped = [i.sandbox_id for i, why in chosen.skipped if why == "the agent's own pod"]
        assert skipped == (own if spare else []), spare


@pytest.mark.parametrize(
    ("scene", "gone"),
    [pytest.param(GONE_DUE, True, id="gone"), pytest.param(OBJECTS_GONE, False, id="live")],
)
def test_the_agents_own_pod_never_remains(
    scene: tuple[list[PodInfo], list[Any]], gone: bool
) -> None:
    """Left alone by the cleanup, the own pod would otherwise fail the controller's verify;
    the other pod in the same state remains, and without the setting both do (as before)."""
    pods, sandboxes = scene
    requested = own_drift(pods, sandboxes, gone)
    relisted = own_drift(pods, sandboxes, gone)

    def left(spare: str) -> Remaining:
        return remaining_after(requested, relisted, pods, NOW, kubelet_gone=gone, own_pod_uid=spare)

    assert left("u-agent") == Remaining(1, 0, ("default/evicted",))
    assert left("") == Remaining(2, 0, ("default/agent", "default/evicted"))


# ---------------------------------------------------------------- what remains


NEW = sandbox("u-new", id="sb-new", name="new", created_at=OLD)
DESIRED_AGAIN = [*PODS, pod("u-gone", "gone")]
EVERY_KIND = ([WEB_OLD, WEB_NEW, GONE], [GONE_APP, LOST_APP, WEB_APP])
CLEANED = ([WEB_NEW], [WEB_APP])
LEFT_BY_THE_CLEANUP = Remaining(2, 1, ("default/gone", "default/lost", "default/web"))


@pytest.mark.parametrize(
    ("pods", "runtime", "gone", "left"),
    [
        pytest.param(PODS, EVERY_KIND, False, LEFT_BY_THE_CLEANUP, id="live:-nothing-removed"),
        pytest.param(PODS, EVERY_KIND, True, LEFT_BY_THE_CLEANUP, id="gone:-nothing-removed"),
        pytest.param(PODS, CLEANED, False, Remaining(), id="live:-all-removed-missing-is-not-held"),
        pytest.param(PODS, CLEANED, True, Remaining(), id="gone:-all-removed-missing-is-not-held"),
        pytest.param(
            PODS, ([WEB_NEW, NEW], [WEB_APP]), False, Remaining(), id="live:-new-orphan-kubelets"
        ),
        pytest.param(
            PODS,
            ([WEB_NEW, NEW], [WEB_APP]),
            True,
            Remaining(1, 0, ("default/new",)),
            id="gone:-new-orphan-counts",
        ),
        pytest.param(
            [*PODS, EVICTED],
            ([WEB_NEW, EVICTED_SB], [WEB_APP, EVICTED_APP]),
            False,
            Remaining(),
            id="live:-a-deleted-pods-sandbox-is-the-kubelets",
        ),
        pytest.param(
            [*PODS, EVICTED],
            ([WEB_NEW, EVICTED_SB], [WEB_APP, EVICTED_APP]),
            True,
            Remaining(1, 0, ("default/evicted",)),
            id="gone:-a-deleted-pods-sandbox-counts",
        ),
        pytest.param(
            DESIRED_AGAIN,
            ([WEB_NEW, GONE], [GONE_APP, WEB_APP]),
            False,
            Remaining(),
            id="live:-a-pod-desired-again-is-not-unwanted",
        ),
        pytest.param(
            DESIRED_AGAIN,
            ([WEB_NEW, GONE], [GONE_APP, WEB_APP]),
            True,
            Remaining(),
            id="gone:-a-pod-desired-again-is-not-unwanted",
        ),
    ],
)
def test_what_remains_after_a_cleanup_with_the_kubelet_live_or_gone(
    pods: list[PodInfo], runtime: tuple[list[Any], list[Any]], gone: bool, left: Remaining
) -> None:
    """A live kubelet: only what the cleanup selected from REQUESTED and the re-list still
    finds. The kubelet gone: every cleanable item of the re-list."""
    sandboxes, containers = runtime
    snapshot = RuntimeSnapshot(NOW, None, (), tuple(sandboxes), tuple(containers))
    relisted = compute_drift(pods, snapshot, (), NOW, grace_seconds=60, kubelet_gone=gone)
    assert remaining_after(REQUESTED, relisted, pods, NOW, kubelet_gone=gone) == left
    assert remaining_after(REQUESTED, relisted, pods, NOW, kubelet_gone=gone).empty == (
        left == Remaining()
    )


def test_remaining_names_at_most_ten_pods() -> None:
    many = [
        sandbox(f"u-{n:02}", id=f"sb-{n:02}", name=f"p{n:02}", created_at=OLD) for n in range(12)
    ]
    left = Remaining.of_items(drift([], many, []).items)
    assert (left.sandboxes, left.containers) == (12, 0)
    assert left.pods == tuple(f"default/p{n:02}" for n in range(REMAINING_PODS_MAX))


def test_status_with_remaining_round_trips() -> None:
    original = status(remaining=Remaining(1, 2, ("apps/web-0",)))
    text = original.to_json()
    assert json.loads(text)["remaining"] == {
        "sandboxes": 1,
        "containers": 2,
        "pods": ["apps/web-0"],
    }
    assert CleanupStatus.from_json(text) == original


@pytest.mark.parametrize(
    "remaining",
    [
        pytest.param(None, id="absent: an agent that does not report it"),
        pytest.param([], id="not an object"),
        pytest.param({"sandboxes": 1}, id="no containers"),
        pytest.param({"sandboxes": -1, "containers": 0}, id="negative"),
        pytest.param({"sandboxes": True, "containers": 0}, id="a boolean"),
        pytest.param({"sandboxes": "1", "containers": 0}, id="a string"),
    ],
)
def test_a_status_without_a_readable_remaining_has_none(remaining: Any) -> None:
    data = json.loads(status().to_json())
    if remaining is not None:
        data["remaining"] = remaining
    parsed = CleanupStatus.from_json(json.dumps(data))
    assert parsed is not None
    assert parsed.remaining is None


def test_odd_pod_names_in_remaining_are_dropped() -> None:
    data = json.loads(status().to_json())
    data["remaining"] = {"sandboxes": 1, "containers": 0, "pods": ["a/b", 7, None]}
    parsed = CleanupStatus.from_json(json.dumps(data))
    assert parsed is not None
    assert parsed.remaining == Remaining(1, 0, ("a/b",))
