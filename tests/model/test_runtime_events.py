"""When a listing shows a task event, and OOM events' repeats."""

from __future__ import annotations

import pytest

from exporter.model.runtime import (
    Container,
    ContainerState,
    PodSandbox,
    RuntimeSnapshot,
    SandboxState,
)
from exporter.model.runtime_events import (
    TOPIC_EXIT,
    TOPIC_LABELS,
    TOPIC_OOM,
    TOPIC_START,
    OomDeduplicator,
    TaskEvent,
    shown,
)


def _container(state: ContainerState, *, settled: bool = True) -> Container:
    return Container(
        id="c1",
        pod_sandbox_id="s1",
        name="app",
        attempt=0,
        state=state,
        created_at=1.0,
        settled=settled,
    )


def _sandbox(state: SandboxState) -> PodSandbox:
    return PodSandbox("s1", "web", "shop", "uid", 0, state, 1.0)


def _snapshot(*items: Container | PodSandbox) -> RuntimeSnapshot:
    return RuntimeSnapshot(
        taken_at=1.0,
        version=None,
        conditions=(),
        sandboxes=tuple(i for i in items if isinstance(i, PodSandbox)),
        containers=tuple(i for i in items if isinstance(i, Container)),
    )


@pytest.mark.parametrize(
    ("topic", "item", "expected"),
    [
        (TOPIC_START, _container(ContainerState.CREATED), False),
        (TOPIC_START, _container(ContainerState.RUNNING), True),
        (TOPIC_START, _container(ContainerState.EXITED), True),  # ran and ended already
        (TOPIC_START, None, False),  # not stored by the CRI yet
        (TOPIC_EXIT, _container(ContainerState.RUNNING), False),
        (TOPIC_EXIT, _container(ContainerState.EXITED, settled=False), False),
        (TOPIC_EXIT, _container(ContainerState.EXITED), True),
        (TOPIC_EXIT, None, True),  # removed already
        (TOPIC_OOM, _container(ContainerState.RUNNING), False),
        (TOPIC_OOM, _container(ContainerState.EXITED), True),
        (TOPIC_START, _sandbox(SandboxState.READY), True),
        (TOPIC_START, _sandbox(SandboxState.NOTREADY), False),
        (TOPIC_EXIT, _sandbox(SandboxState.READY), False),
        (TOPIC_EXIT, _sandbox(SandboxState.NOTREADY), True),
    ],
)
def test_shown(topic: str, item: Container | PodSandbox | None, expected: bool) -> None:
    event_id = item.id if item is not None else "c1"
    snapshot = _snapshot(item) if item is not None else _snapshot()
    assert shown(TaskEvent(topic, event_id, 1.0), snapshot) is expected


def test_an_exec_exit_is_not_the_containers() -> None:
    assert TaskEvent(TOPIC_EXIT, "c1", 1.0, "c1").of_init_process
    assert TaskEvent(TOPIC_EXIT, "c1", 1.0, "").of_init_process
    assert not TaskEvent(TOPIC_EXIT, "c1", 1.0, "exec-7").of_init_process


def test_topic_labels() -> None:
    assert TOPIC_LABELS == ("start", "exit", "oom")
    assert TaskEvent(TOPIC_OOM, "c1", 1.0).short_topic == "oom"


def test_an_oom_kills_repeat_within_a_second_is_dropped() -> None:
    dedupe = OomDeduplicator()
    assert not dedupe.is_repeat(TaskEvent(TOPIC_OOM, "c1", 100.0))
    assert dedupe.is_repeat(TaskEvent(TOPIC_OOM, "c1", 100.01))
    assert not dedupe.is_repeat(TaskEvent(TOPIC_OOM, "c2", 100.02))  # another container
    assert not dedupe.is_repeat(TaskEvent(TOPIC_EXIT, "c1", 100.03))  # not an OOM event
    assert not dedupe.is_repeat(TaskEvent(TOPIC_OOM, "c1", 105.0))  # a later OOM kill
    assert dedupe.is_repeat(TaskEvent(TOPIC_OOM, "c1", 105.5))
