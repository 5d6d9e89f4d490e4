from __future__ import annotations

from typing import Any

import pytest

from exporter.model.kube import ContainerStatusInfo, PodInfo
from exporter.model.pod_problems import (
    LAST_TERMINATED_REASONS,
    WAITING_REASONS,
    PodProblem,
    api_phase_counts,
    last_terminated_reason,
    pod_problems,
    waiting_reason,
)

NOW = 10_000.0


def pod(
    name: str = "web",
    *,
    uid: str | None = None,
    phase: str = "Running",
    namespace: str = "default",
    created_at: float = NOW - 3600,
    **kw: Any,
) -> PodInfo:
    return PodInfo(
        uid=uid or f"uid-{namespace}-{name}",
        namespace=namespace,
        name=name,
        node_name="node-1",
        phase=phase,
        created_at=created_at,
        **kw,
    )


def waiting(reason: str, name: str = "app", **kw: Any) -> ContainerStatusInfo:
    return ContainerStatusInfo(name=name, state="waiting", waiting_reason=reason, **kw)


def restarted(
    reason: str, exit_code: int | None, restarts: int, name: str = "app"
) -> ContainerStatusInfo:
    return ContainerStatusInfo(
        name=name,
        state="running",
        restart_count=restarts,
        last_terminated_reason=reason,
        last_terminated_exit_code=exit_code,
    )


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], {}, id="no-pods"),
        pytest.param(
            [pod("a"), pod("b"), pod("c", phase="Pending"), pod("d", phase="Failed")],
            {"Running": 2, "Pending": 1, "Failed": 1},
            id="mixed",
        ),
        pytest.param(
            [pod("a", phase="Succeeded"), pod("b", phase="Unknown")],
            {"Succeeded": 1, "Unknown": 1},
            id="succeeded-and-unknown",
        ),
        pytest.param([pod("a", phase="")], {"Pending": 1}, id="empty-phase-is-pending"),
        pytest.param([pod("a", phase="Weird")], {"Unknown": 1}, id="unknown-phase-string"),
        pytest.param(
            [pod("a", uid="u1"), pod("a", uid="u1", phase="Failed")],
            {"Failed": 1},
            id="same-uid-counts-once-last-wins",
        ),
    ],
)
def test_api_phase_counts(pods: list[PodInfo], expected: dict[str, int]) -> None:
    every_phase = {"Pending": 0, "Running": 0, "Succeeded": 0, "Failed": 0, "Unknown": 0}
    assert api_phase_counts(pods) == every_phase | expected


PENDING_OLD = NOW - 300


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([pod()], [], id="healthy-running-pod"),
        pytest.param(
            [pod(phase="Pending", created_at=PENDING_OLD)],
            [PodProblem("pending", "uid-default-web", "default", "web", since=PENDING_OLD)],
            id="pending-since-creation",
        ),
        pytest.param(
            [pod(phase="Pending", created_at=NOW - 900, scheduled_at=PENDING_OLD)],
            [PodProblem("pending", "uid-default-web", "default", "web", since=PENDING_OLD)],
            id="pending-since-scheduled",
        ),
        pytest.param(
            [pod(phase="Pending", created_at=NOW - 60, containers=(waiting("ErrImagePull"),))],
            [],
            id="pending-at-grace-boundary-not-yet",
        ),
        pytest.param(
            [
                pod(
                    phase="Pending",
                    created_at=NOW - 900,
                    scheduled_at=NOW - 30,
                    containers=(waiting("ContainerCreating"),),
                )
            ],
            [],
            id="young-pending-pod-reports-nothing",
        ),
        pytest.param(
            [pod(phase="Pending", created_at=NOW - 61)],
            [PodProblem("pending", "uid-default-web", "default", "web", since=NOW - 61)],
            id="pending-just-past-grace",
        ),
        pytest.param(
            [
                pod(
                    phase="Pending",
                    created_at=PENDING_OLD,
                    containers=(waiting("ImagePullBackOff"), waiting("", name="side")),
                )
            ],
            [
                PodProblem("pending", "uid-default-web", "default", "web", since=PENDING_OLD),
                PodProblem(
                    "waiting",
                    "uid-default-web",
                    "default",
                    "web",
                    container="app",
                    reason="ImagePullBackOff",
                ),
            ],
            id="pending-with-image-pull-backoff-and-reasonless-wait",
        ),
        pytest.param(
            [pod(containers=(waiting("CrashLoopBackOff", restart_count=4),))],
            [
                PodProblem(
                    "waiting",
                    "uid-default-web",
                    "default",
                    "web",
                    container="app",
                    reason="CrashLoopBackOff",
                )
            ],
            id="running-pod-crash-looping",
        ),
        pytest.param(
            [pod(containers=(waiting("SomethingNew"),))],
            [
                PodProblem(
                    "waiting",
                    "uid-default-web",
                    "default",
                    "web",
                    container="app",
                    reason="other",
                )
            ],
            id="unknown-waiting-reason-is-other",
        ),
        pytest.param(
            [pod(containers=(restarted("OOMKilled", 137, 5),))],
            [
                PodProblem(
                    "last_terminated",
                    "uid-default-web",
                    "default",
                    "web",
                    container="app",
                    reason="OOMKilled",
                    restart_count=5,
                )
            ],
            id="last-oom-killed",
        ),
        pytest.param(
            [pod(containers=(restarted("", 2, 1),))],
            [
                PodProblem(
                    "last_terminated",
                    "uid-default-web",
                    "default",
                    "web",
                    container="app",
                    reason="Error",
                    restart_count=1,
                )
            ],
            id="last-nonzero-without-reason-is-error",
        ),
        pytest.param(
            [pod(containers=(restarted("ContainerStatusUnknown", 137, 2),))],
            [
                PodProblem(
                    "last_terminated",
                    "uid-default-web",
                    "default",
                    "web",
                    container="app",
                    reason="other",
                    restart_count=2,
                )
            ],
            id="last-other-reason",
        ),
        pytest.param(
            [pod(containers=(restarted("Completed", 0, 3), restarted("", 0, 1, name="b")))],
            [],
            id="last-completed-is-no-problem",
        ),
        pytest.param(
            [pod(containers=(restarted("", None, 0),))], [], id="no-last-termination-at-all"
        ),
        pytest.param(
            [
                pod(
                    containers=(
                        waiting(
                            "CrashLoopBackOff", restart_count=7, last_terminated_reason="Error"
                        ),
                    )
                )
            ],
            [
                PodProblem(
                    "last_terminated",
                    "uid-default-web",
                    "default",
                    "web",
                    container="app",
                    reason="Error",
                    restart_count=7,
                ),
                PodProblem(
                    "waiting",
                    "uid-default-web",
                    "default",
                    "web",
                    container="app",
                    reason="CrashLoopBackOff",
                ),
            ],
            id="crash-loop-both-waiting-and-last-terminated",
        ),
        pytest.param(
            [
                pod(
                    phase="Pending",
                    created_at=PENDING_OLD,
                    deletion_timestamp=NOW - 10,
                    containers=(waiting("ImagePullBackOff"),),
                )
            ],
            [],
            id="pod-being-deleted",
        ),
        pytest.param(
            [pod(phase="Failed", containers=(restarted("OOMKilled", 137, 3),))],
            [],
            id="terminal-failed-pod",
        ),
        pytest.param(
            [pod(phase="Succeeded", containers=(waiting("CrashLoopBackOff"),))],
            [],
            id="terminal-succeeded-pod",
        ),
        pytest.param(
            [
                pod(
                    uid="old",
                    created_at=NOW - 900,
                    containers=(restarted("Error", 1, 9),),
                ),
                pod(uid="new", created_at=NOW - 100, containers=(restarted("OOMKilled", 137, 1),)),
            ],
            [
                PodProblem(
                    "last_terminated",
                    "new",
                    "default",
                    "web",
                    container="app",
                    reason="OOMKilled",
                    restart_count=1,
                )
            ],
            id="same-name-two-uids-newer-pod-wins",
        ),
        pytest.param(
            [
                pod("b", phase="Pending", created_at=PENDING_OLD),
                pod("a", namespace="z", phase="Pending", created_at=PENDING_OLD),
                pod("a", phase="Pending", created_at=PENDING_OLD),
            ],
            [
                PodProblem("pending", "uid-default-a", "default", "a", since=PENDING_OLD),
                PodProblem("pending", "uid-default-b", "default", "b", since=PENDING_OLD),
                PodProblem("pending", "uid-z-a", "z", "a", since=PENDING_OLD),
            ],
            id="sorted-by-namespace-and-name",
        ),
    ],
)
def test_pod_problems(pods: list[PodInfo], expected: list[PodProblem]) -> None:
    assert pod_problems(pods, NOW) == expected


def test_pending_grace_is_configurable() -> None:
    young = pod(phase="Pending", created_at=NOW - 5)
    assert pod_problems([young], NOW) == []
    assert [p.kind for p in pod_problems([young], NOW, pending_grace_seconds=0)] == ["pending"]


@pytest.mark.parametrize(
    ("reason", "expected"),
    [pytest.param(r, r, id=r) for r in WAITING_REASONS if r != "other"]
    + [pytest.param("ContainerStatusUnknown", "other", id="unlisted")],
)
def test_waiting_reason_buckets(reason: str, expected: str) -> None:
    assert waiting_reason(reason) == expected
    assert expected in WAITING_REASONS


@pytest.mark.parametrize(
    ("reason", "exit_code", "expected"),
    [
        pytest.param("OOMKilled", 137, "OOMKilled", id="oom"),
        pytest.param("Error", 1, "Error", id="error"),
        pytest.param("", 1, "Error", id="non-zero-no-reason"),
        pytest.param("Evicted", None, "other", id="other-reason"),
        pytest.param("Completed", 0, None, id="completed"),
        pytest.param("", 0, None, id="zero-no-reason"),
        pytest.param("", None, None, id="nothing"),
    ],
)
def test_last_terminated_reason_buckets(
    reason: str, exit_code: int | None, expected: str | None
) -> None:
    bucket = last_terminated_reason(reason, exit_code)
    assert bucket == expected
    assert bucket is None or bucket in LAST_TERMINATED_REASONS
