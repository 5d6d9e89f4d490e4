"""containerd's event envelopes decoded into task events (wire layout as containerd sends it)."""

from __future__ import annotations

from exporter.cri.events import filters, task_event
from exporter.cri.pb import events_pb2, task_events_pb2
from exporter.model.runtime_events import TOPIC_EXIT, TOPIC_OOM, TaskEvent


def _envelope(topic: str, type_url: str, payload: bytes) -> events_pb2.Envelope:
    return events_pb2.Envelope(
        timestamp=events_pb2.Timestamp(seconds=1_700_000_000, nanos=250_000_000),
        namespace="k8s.io",
        topic=topic,
        event=events_pb2.AnyEvent(type_url=type_url, value=payload),
    )


def test_an_exit_decodes_with_its_process_and_time() -> None:
    exit_ = task_events_pb2.TaskExit(container_id="c1", id="c1", pid=42, exit_status=137)
    exit_.exited_at.seconds, exit_.exited_at.nanos = 1_699_999_999, 500_000_000
    event = task_event(
        _envelope(TOPIC_EXIT, "containerd.events.TaskExit", exit_.SerializeToString())
    )
    assert event == TaskEvent(
        TOPIC_EXIT, "c1", 1_700_000_000.25, "c1", exit_status=137, exited_at=1_699_999_999.5
    )


def test_an_exit_without_its_time_has_none() -> None:
    exit_ = task_events_pb2.TaskExit(container_id="c1", id="e1", exit_status=0)
    event = task_event(
        _envelope(TOPIC_EXIT, "containerd.events.TaskExit", exit_.SerializeToString())
    )
    assert event == TaskEvent(TOPIC_EXIT, "c1", 1_700_000_000.25, "e1", exit_status=0)
    assert not event.of_init_process


def test_an_oom_decodes() -> None:
    oom = task_events_pb2.TaskOOM(container_id="c2").SerializeToString()
    assert task_event(_envelope(TOPIC_OOM, "containerd.events.TaskOOM", oom)) == TaskEvent(
        TOPIC_OOM, "c2", 1_700_000_000.25
    )


def test_another_topic_or_a_broken_payload_is_none() -> None:
    assert task_event(_envelope("/tasks/delete", "containerd.events.TaskDelete", b"")) is None
    assert task_event(_envelope(TOPIC_EXIT, "containerd.events.TaskExit", b"\xff\xff")) is None


def test_filters_ask_each_topic_in_the_cri_namespace() -> None:
    assert filters() == [
        'topic=="/tasks/start",namespace=="k8s.io"',
        'topic=="/tasks/exit",namespace=="k8s.io"',
        'topic=="/tasks/oom",namespace=="k8s.io"',
    ]
