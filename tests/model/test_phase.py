from __future__ import annotations

import pytest

from exporter.model.phase import PodPhase, phase_counts, pod_phase, pods_by_uid
from exporter.model.runtime import Container, PodSandbox, RuntimeSnapshot, SandboxState
from tests.model.builders import created, exited, oom, running, sandbox, unknown

READY = sandbox()
NOTREADY = sandbox(state=SandboxState.NOTREADY)

PHASE_RULES: list[tuple[str, PodSandbox | None, list[Container], bool, PodPhase]] = [
    ("runtime-unreachable", READY, [running()], False, PodPhase.UNKNOWN),
    ("runtime-unreachable-no-sandbox", None, [], False, PodPhase.UNKNOWN),
    ("container-unknown", READY, [running("a"), unknown("b")], True, PodPhase.UNKNOWN),
    ("unknown-beats-waiting", READY, [created("a"), unknown("b")], True, PodPhase.UNKNOWN),
    ("exited-without-exit-code", READY, [exited(exit_code=None)], True, PodPhase.UNKNOWN),
    ("one-waiting", READY, [running("a"), created("b")], True, PodPhase.PENDING),
    (
        "waiting-beats-failed",
        READY,
        [created("a"), exited("b", exit_code=1)],
        True,
        PodPhase.PENDING,
    ),
    ("one-non-zero", READY, [running("a"), exited("b", exit_code=2)], True, PodPhase.FAILED),
    ("oom-killed", READY, [oom("a"), exited("b", exit_code=0)], True, PodPhase.FAILED),
    ("all-exit-zero", NOTREADY, [exited("a"), exited("b")], True, PodPhase.SUCCEEDED),
    ("all-running", READY, [running("a"), running("b")], True, PodPhase.RUNNING),
    ("running-and-exit-zero", READY, [running("a"), exited("b")], True, PodPhase.RUNNING),
    ("ready-sandbox-no-containers", READY, [], True, PodPhase.PENDING),
    ("notready-sandbox-no-containers", NOTREADY, [], True, PodPhase.FAILED),
    ("no-sandbox-no-containers", None, [], True, PodPhase.UNKNOWN),
    (
        "latest-attempt-running-after-crash",
        READY,
        [exited(attempt=0, exit_code=1), running(attempt=1)],
        True,
        PodPhase.RUNNING,
    ),
    (
        "latest-attempt-crashed-after-success",
        READY,
        [exited(attempt=0), exited(attempt=1, exit_code=1)],
        True,
        PodPhase.FAILED,
    ),
    (
        "latest-attempt-waiting",
        READY,
        [exited(attempt=3, exit_code=1), created(attempt=4)],
        True,
        PodPhase.PENDING,
    ),
    (
        "same-attempt-newest-created-wins",
        READY,
        [exited(attempt=1, exit_code=1, created_at=5.0), running(attempt=1, created_at=6.0)],
        True,
        PodPhase.RUNNING,
    ),
]


@pytest.mark.parametrize(
    ("sandbox_", "containers", "reachable", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in PHASE_RULES],
)
def test_pod_phase(
    sandbox_: PodSandbox | None, containers: list[Container], reachable: bool, expected: PodPhase
) -> None:
    assert pod_phase(sandbox_, containers, reachable) is expected


def test_pod_phase_ignores_input_order() -> None:
    containers = [running(attempt=2), exited(attempt=1, exit_code=1), exited(attempt=0)]
    assert pod_phase(READY, containers, True) is PodPhase.RUNNING
    assert pod_phase(READY, list(reversed(containers)), True) is PodPhase.RUNNING


def snapshot(sandboxes: list[PodSandbox], containers: list[Container]) -> RuntimeSnapshot:
    return RuntimeSnapshot(
        taken_at=1000.0,
        version=None,
        conditions=(),
        sandboxes=tuple(sandboxes),
        containers=tuple(containers),
    )


def test_pods_by_uid_uses_newest_sandbox_and_its_containers_only() -> None:
    old = sandbox("u1", attempt=0, state=SandboxState.NOTREADY, created_at=10.0)
    new = sandbox("u1", attempt=1, created_at=20.0)
    other = sandbox("u2")
    snap = snapshot(
        [new, old, other],
        [
            exited("app", attempt=5, exit_code=1, uid="u1", sandbox_id=old.id),
            running("app", attempt=0, uid="u1", sandbox_id=new.id),
            running("app", uid="u2", sandbox_id=other.id),
            running("stray", uid="u3", sandbox_id="sb-gone"),
        ],
    )
    pods = pods_by_uid(snap)
    assert set(pods) == {"u1", "u2"}
    sb, containers = pods["u1"]
    assert sb == new
    assert [(c.name, c.attempt, c.pod_sandbox_id) for c in containers] == [("app", 0, new.id)]


def test_pods_by_uid_breaks_attempt_tie_by_created_at() -> None:
    earlier = sandbox("u1", id="sb-early", created_at=10.0)
    later = sandbox("u1", id="sb-late", created_at=20.0)
    assert pods_by_uid(snapshot([later, earlier], []))["u1"][0].id == "sb-late"
    assert pods_by_uid(snapshot([earlier, later], []))["u1"][0].id == "sb-late"


@pytest.mark.parametrize(
    ("snap", "last_known", "expected"),
    [
        pytest.param(
            None, ["u1", "u2", "u2"], {PodPhase.UNKNOWN: 2}, id="unreachable-last-known-unknown"
        ),
        pytest.param(None, [], {}, id="unreachable-nothing-known"),
        pytest.param(snapshot([], []), ["u1"], {}, id="reachable-empty-ignores-last-known"),
        pytest.param(
            snapshot(
                [
                    sandbox("u1"),
                    sandbox("u2"),
                    sandbox("u3", state=SandboxState.NOTREADY),
                    sandbox("u4"),
                ],
                [
                    running(uid="u1"),
                    created(uid="u2"),
                    exited(uid="u3"),
                ],
            ),
            ["gone"],
            {PodPhase.RUNNING: 1, PodPhase.PENDING: 2, PodPhase.SUCCEEDED: 1},
            id="reachable-counts-each-pod",
        ),
    ],
)
def test_phase_counts(
    snap: RuntimeSnapshot | None, last_known: list[str], expected: dict[PodPhase, int]
) -> None:
    counts = phase_counts(snap, last_known)
    assert set(counts) == set(PodPhase)
    assert counts == {phase: expected.get(phase, 0) for phase in PodPhase}
