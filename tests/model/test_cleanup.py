"""The cleanup handshake's pure parts: the status annotation, pending requests, and which drift
items a cleanup may act on after the re-check."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.model.cleanup import (
    CleanupState,
    CleanupStatus,
    desired_uids,
    pending_request,
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
