"""containerd's task events: a subscription to its events service on the CRI's socket.

containerd serves ``containerd.services.events.v1.Events/Subscribe`` beside the CRI on the same
socket, to any number of subscribers, on 1.6, 1.7 and 2.x alike (unlike the CRI's
GetContainerEvents, which containerd 1.7 served to one caller only). The subscription asks for
the topics of :mod:`exporter.model.runtime_events` in the CRI's namespace and yields them as
:class:`~exporter.model.runtime_events.TaskEvent`; a failure is a CRIError
(``operation_type`` ``events_subscribe``): UNIMPLEMENTED where a runtime does not serve the
service, UNAVAILABLE when the runtime went away.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from exporter.cri.client import CRIClient
from exporter.cri.errors import error_for
from exporter.cri.pb import events_pb2, events_pb2_grpc, task_events_pb2
from exporter.model.runtime_events import (
    CRI_NAMESPACE,
    TOPIC_EXIT,
    TOPIC_OOM,
    TOPIC_START,
    TOPICS,
    TaskEvent,
)

OPERATION: Final = "events_subscribe"

_PAYLOADS: Final = {
    TOPIC_START: task_events_pb2.TaskStart,
    TOPIC_EXIT: task_events_pb2.TaskExit,
    TOPIC_OOM: task_events_pb2.TaskOOM,
}


def filters(namespace: str = CRI_NAMESPACE) -> list[str]:
    """containerd's event filters: one per topic (a filter list is a disjunction)."""
    return [f'topic=="{topic}",namespace=="{namespace}"' for topic in TOPICS]


def task_event(envelope: events_pb2.Envelope) -> TaskEvent | None:
    """The event an envelope carries; None for another topic or a payload that does not decode."""
    payload_type = _PAYLOADS.get(envelope.topic)
    if payload_type is None:
        return None
    payload = payload_type()
    try:
        payload.ParseFromString(envelope.event.value)
    except DecodeError:
        return None
    published_at = envelope.timestamp.seconds + envelope.timestamp.nanos / 1e9
    if not isinstance(payload, task_events_pb2.TaskExit):
        return TaskEvent(envelope.topic, payload.container_id, published_at)
    exited = payload.exited_at
    return TaskEvent(
        envelope.topic,
        payload.container_id,
        published_at,
        payload.id,
        exit_status=payload.exit_status,
        exited_at=exited.seconds + exited.nanos / 1e9 if exited.seconds else None,
    )


async def subscribe(client: CRIClient, namespace: str = CRI_NAMESPACE) -> AsyncIterator[TaskEvent]:
    """The runtime's task events from now on, on the client's channel, until the stream ends
    (the runtime stopped) or fails (raised as a CRIError). Closing the iterator cancels it."""
    stub = events_pb2_grpc.EventsStub(client.channel)
    call = stub.Subscribe(events_pb2.SubscribeRequest(filters=filters(namespace)))
    try:
        async for envelope in call:
            event = task_event(envelope)
            if event is not None:
                yield event
    except grpc.aio.AioRpcError as err:
        raise error_for(OPERATION, err.code().name, err.details() or "") from err
    finally:
        call.cancel()
