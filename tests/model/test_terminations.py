from __future__ import annotations

from collections.abc import Sequence

import pytest

from exporter.model.runtime import Container
from exporter.model.terminations import (
    REASONS,
    LoopKind,
    LoopState,
    TerminationTracker,
    bucket_reason,
)
from tests.model.builders import created, exited, oom, running


def unsettled_kill(attempt: int, finished_at: float) -> Container:
    """Exit 137 read before the runtime's OOM event, as the agent's reader shows it."""
    return exited(attempt=attempt, exit_code=137, finished_at=finished_at, settled=False)


Step = tuple[float, Sequence[Container]]
Loop = tuple[
    str, str, LoopKind, int, float
]  # pod, container, kind, terminations, last_termination_at


@pytest.mark.parametrize(
    ("reason", "exit_code", "bucket"),
    [
        pytest.param("OOMKilled", 137, "OOMKilled", id="oom"),
        pytest.param("Error", 1, "Error", id="error"),
        pytest.param("Completed", 0, "Completed", id="completed"),
        pytest.param("ContainerCannotRun", 128, "other", id="other-reason"),
        pytest.param("", 0, "Completed", id="no-reason-exit-0"),
        pytest.param("", 3, "Error", id="no-reason-non-zero"),
        pytest.param("", None, "unknown", id="no-reason-no-code"),
    ],
)
def test_bucket_reason(reason: str, exit_code: int | None, bucket: str) -> None:
    assert bucket_reason(reason, exit_code) == bucket
    assert bucket in REASONS


SEQUENCES: list[tuple[str, list[Step], dict[str, int], list[Loop]]] = [
    (
        "first-observation-counts-old-exits-outside-window",
        [
            (
                5000.0,
                [
                    oom(attempt=0, finished_at=10.0),
                    oom(attempt=1, finished_at=20.0),
                    running(attempt=2),
                ],
            )
        ],
        {"OOMKilled": 2},
        [],
    ),
    (
        "first-observation-infers-unseen-attempts-as-unknown",
        [(1000.0, [exited(attempt=3, exit_code=1, finished_at=990.0), running(attempt=4)])],
        {"unknown": 3, "Error": 1},
        [],
    ),
    (
        "running-then-exited-counted-once",
        [
            (100.0, [running(attempt=0)]),
            (110.0, [exited(attempt=0, exit_code=1, finished_at=105.0)]),
            (120.0, [exited(attempt=0, exit_code=1, finished_at=105.0)]),
            (130.0, [exited(attempt=0, exit_code=1, finished_at=105.0), running(attempt=1)]),
        ],
        {"Error": 1},
        [],
    ),
    (
        "restart-between-polls-with-record",
        [
            (100.0, [running(attempt=0)]),
            (110.0, [oom(attempt=0, finished_at=104.0), running(attempt=1)]),
        ],
        {"OOMKilled": 1},
        [],
    ),
    (
        "two-restarts-between-polls-first-record-gone",
        [
            (100.0, [running(attempt=0)]),
            (110.0, [oom(attempt=1, finished_at=108.0), running(attempt=2)]),
        ],
        {"unknown": 1, "OOMKilled": 1},
        [],
    ),
    (
        "garbage-collected-attempts-not-recounted",
        [
            (100.0, [exited(attempt=0, exit_code=1, finished_at=95.0), running(attempt=1)]),
            (110.0, [running(attempt=1)]),
            (120.0, [exited(attempt=1, exit_code=1, finished_at=115.0), created(attempt=2)]),
            (130.0, [created(attempt=2)]),
            (140.0, []),
        ],
        {"Error": 2},
        [],
    ),
    (
        "new-sandbox-restarts-attempts",
        [
            (100.0, [exited(attempt=0, finished_at=90.0)]),
            (
                110.0,
                [
                    exited(attempt=0, finished_at=90.0),
                    exited(attempt=0, exit_code=2, finished_at=105.0, sandbox_id="sb-new"),
                ],
            ),
        ],
        {"Completed": 1, "Error": 1},
        [],
    ),
    (
        "containers-of-two-pods-are-separate",
        [
            (
                100.0,
                [
                    oom(uid="u1", pod="p1", finished_at=90.0),
                    oom(uid="u2", pod="p2", finished_at=95.0),
                ],
            )
        ],
        {"OOMKilled": 2},
        [],
    ),
    (
        "oom-loop",
        [
            (100.0, [running(attempt=0)]),
            (110.0, [oom(attempt=0, finished_at=105.0), running(attempt=1)]),
            (130.0, [oom(attempt=1, finished_at=125.0), running(attempt=2)]),
        ],
        {"OOMKilled": 2},
        [("web", "app", "oom_loop", 2, 125.0)],
    ),
    (
        "oom-loop-survives-recreation",
        [
            (100.0, [oom(attempt=0, finished_at=95.0), oom(attempt=1, finished_at=99.0)]),
            (110.0, [oom(attempt=1, finished_at=99.0), running(attempt=2)]),
            (400.0, [running(attempt=2)]),
        ],
        {"OOMKilled": 2},
        [("web", "app", "oom_loop", 2, 99.0)],
    ),
    (
        "oom-loop-ends-when-window-passes",
        [
            (100.0, [oom(attempt=0, finished_at=95.0), oom(attempt=1, finished_at=99.0)]),
            (700.0, [oom(attempt=1, finished_at=99.0), running(attempt=2)]),
        ],
        {"OOMKilled": 2},
        [],
    ),
    (
        "one-oom-in-window-is-no-loop",
        [
            (1000.0, [oom(attempt=0, finished_at=10.0), oom(attempt=1, finished_at=990.0)]),
        ],
        {"OOMKilled": 2},
        [],
    ),
    (
        "crash-loop-counts-oom-too",
        [
            (100.0, [running(attempt=0)]),
            (110.0, [exited(attempt=0, exit_code=1, finished_at=105.0), running(attempt=1)]),
            (130.0, [oom(attempt=1, finished_at=120.0), running(attempt=2)]),
            (160.0, [exited(attempt=2, exit_code=1, finished_at=150.0), created(attempt=3)]),
        ],
        {"Error": 2, "OOMKilled": 1},
        [("web", "app", "crash_loop", 3, 150.0)],
    ),
    (
        "oom-and-crash-loop-together",
        [
            (
                200.0,
                [
                    oom(attempt=0, finished_at=150.0),
                    oom(attempt=1, finished_at=160.0),
                    exited(attempt=2, exit_code=1, finished_at=170.0),
                ],
            )
        ],
        {"OOMKilled": 2, "Error": 1},
        [("web", "app", "crash_loop", 3, 170.0), ("web", "app", "oom_loop", 2, 160.0)],
    ),
    (
        "completed-restarts-are-no-crash-loop",
        [
            (
                200.0,
                [
                    exited(attempt=0, finished_at=150.0),
                    exited(attempt=1, finished_at=160.0),
                    exited(attempt=2, finished_at=170.0),
                ],
            )
        ],
        {"Completed": 3},
        [],
    ),
    (
        "unknown-terminations-are-no-crash-loop",
        [(200.0, [running(attempt=5)])],
        {"unknown": 5},
        [],
    ),
    (
        "exit-without-finished-at-uses-now",
        [
            (100.0, [oom(attempt=0), running(attempt=1)]),
            (110.0, [oom(attempt=1), running(attempt=2)]),
        ],
        {"OOMKilled": 2},
        [("web", "app", "oom_loop", 2, 110.0)],
    ),
    (
        # containerd handled the exit before the OOM event: the status says Error at first.
        # Unsettled, the kill is not counted, even with a later attempt running; once the
        # reason is final it is counted as what it was, and the loop shows.
        "an-unsettled-kill-waits-for-its-reason",
        [
            (100.0, [oom(attempt=0, finished_at=95.0), running(attempt=1)]),
            (105.0, [unsettled_kill(attempt=1, finished_at=104.0), running(attempt=2)]),
            (106.0, [oom(attempt=1, finished_at=104.0), running(attempt=2)]),
        ],
        {"OOMKilled": 2},
        [("web", "app", "oom_loop", 2, 104.0)],
    ),
    (
        # Unsettled: nothing counted yet, neither it nor the attempts after it.
        "nothing-after-an-unsettled-kill-is-counted-yet",
        [
            (
                100.0,
                [
                    exited(attempt=0, exit_code=1, finished_at=90.0),
                    unsettled_kill(attempt=1, finished_at=95.0),
                    exited(attempt=2, exit_code=1, finished_at=99.0),
                    running(attempt=3),
                ],
            )
        ],
        {"Error": 1},
        [],
    ),
    (
        # A SIGKILL from someone else: after the grace the record is final as it is, Error.
        "a-kill-that-stays-error-is-counted-as-error",
        [
            (100.0, [unsettled_kill(attempt=0, finished_at=95.0)]),
            (110.0, [exited(attempt=0, exit_code=137, finished_at=95.0)]),
            (111.0, [exited(attempt=0, exit_code=137, finished_at=95.0)]),
        ],
        {"Error": 1},
        [],
    ),
    (
        "loop-ends-with-the-pod-counts-stay",
        [
            (100.0, [oom(attempt=0, finished_at=95.0), oom(attempt=1, finished_at=99.0)]),
            (110.0, []),
        ],
        {"OOMKilled": 2},
        [],
    ),
]


@pytest.mark.parametrize(
    ("steps", "totals", "loops"), [pytest.param(*row[1:], id=row[0]) for row in SEQUENCES]
)
def test_sequence(steps: list[Step], totals: dict[str, int], loops: list[Loop]) -> None:
    tracker = TerminationTracker()
    for now, containers in steps:
        tracker.observe(containers, now)
    assert tracker.totals() == {reason: totals.get(reason, 0) for reason in REASONS}
    last_now = steps[-1][0]
    assert tracker.loops(last_now) == [
        LoopState("default", pod, name, kind, n, at) for pod, name, kind, n, at in loops
    ]


def test_totals_are_monotonic_and_a_copy() -> None:
    tracker = TerminationTracker()
    tracker.observe([oom(attempt=0, finished_at=1.0), running(attempt=1)], 10.0)
    first = tracker.totals()
    first["OOMKilled"] = 100  # type: ignore[index]
    tracker.observe([], 20.0)
    assert tracker.totals()["OOMKilled"] == 1


def test_forgets_gone_pods_once_the_window_passed() -> None:
    tracker = TerminationTracker(loop_window_seconds=60.0)
    tracker.observe(
        [
            oom(attempt=0, finished_at=95.0, uid="u1"),
            oom(attempt=1, finished_at=99.0, uid="u1"),
            running(uid="u2"),
        ],
        100.0,
    )
    assert tracker.tracked_containers() == 2
    assert [loop.kind for loop in tracker.loops(100.0)] == ["oom_loop"]
    tracker.observe([running(uid="u2")], 110.0)  # u1 gone: its loop is over, its history kept
    assert tracker.tracked_containers() == 2
    assert tracker.loops(110.0) == []
    tracker.observe([running(uid="u2")], 160.0)
    assert tracker.tracked_containers() == 1
    assert tracker.loops(160.0) == []
    tracker.observe([], 170.0)  # u2 gone without any termination: forgotten at once
    assert tracker.tracked_containers() == 0


def test_present_pod_is_not_recounted_after_a_long_quiet_time() -> None:
    tracker = TerminationTracker(loop_window_seconds=60.0)
    listing = [exited(attempt=0, exit_code=1, finished_at=5.0), running(attempt=1)]
    for now in (10.0, 100.0, 1000.0, 5000.0):
        tracker.observe(listing, now)
    assert tracker.totals()["Error"] == 1


def test_thresholds_are_configurable() -> None:
    tracker = TerminationTracker(
        oom_loop_threshold=3, crash_loop_threshold=2, loop_window_seconds=30.0
    )
    tracker.observe([oom(attempt=0, finished_at=80.0), oom(attempt=1, finished_at=90.0)], 100.0)
    assert [(s.kind, s.terminations) for s in tracker.loops(100.0)] == [("crash_loop", 2)]
    assert tracker.loops(111.0) == []  # the first OOM left the 30 s window


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"oom_loop_threshold": 0}, id="oom-threshold"),
        pytest.param({"crash_loop_threshold": 0}, id="crash-threshold"),
        pytest.param({"loop_window_seconds": 0.0}, id="window"),
    ],
)
def test_rejects_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="threshold"):
        TerminationTracker(**kwargs)  # type: ignore[arg-type]
