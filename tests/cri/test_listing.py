"""Lists converted at what changed: the key messages read what the generated ones read, and a
reply whose items are all known is never parsed whole."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from exporter.cri import convert
from exporter.cri.listing import LIST_CONTAINERS, LIST_POD_SANDBOX, ListCall, Listing
from exporter.cri.pb import api_pb2, keys_pb2
from exporter.model.runtime import Container, ContainerState

RUNNING, EXITED = api_pb2.CONTAINER_RUNNING, api_pb2.CONTAINER_EXITED


def _container(n: int, state: int = RUNNING) -> api_pb2.Container:
    """A container as kubelet creates them: metadata, image, labels and annotations."""
    message = api_pb2.Container(
        id=f"c{n:03d}",
        pod_sandbox_id=f"s{n:03d}",
        metadata=api_pb2.ContainerMetadata(name="app", attempt=n % 3),
        image=api_pb2.ImageSpec(image="registry.example/app:1"),
        image_ref="sha256:" + "ab" * 32,
        state=state,
        created_at=1_700_000_000_000_000_000 + n,
    )
    message.labels.update({"io.kubernetes.pod.name": f"web-{n}", "io.kubernetes.pod.uid": f"u{n}"})
    message.annotations.update({"io.kubernetes.container.restartCount": str(n % 3)})
    return message


def _containers_reply(*items: api_pb2.Container) -> bytes:
    return api_pb2.ListContainersResponse(containers=list(items)).SerializeToString()


def _sandbox(n: int, state: int = api_pb2.SANDBOX_READY) -> api_pb2.PodSandbox:
    message = api_pb2.PodSandbox(
        id=f"s{n:03d}",
        metadata=api_pb2.PodSandboxMetadata(name=f"web-{n}", uid=f"u{n}", namespace="default"),
        state=state,
        created_at=1_700_000_000_000_000_000 + n,
        runtime_handler="runc",
    )
    message.labels.update({"io.kubernetes.pod.name": f"web-{n}"})
    return message


@dataclasses.dataclass
class Counting:
    """Counts the whole parses of a ListCall's replies."""

    call: ListCall
    parsed: int = 0

    def __call__(self) -> ListCall:
        def parse(reply: bytes) -> Any:
            self.parsed += 1
            return self.call.parse(reply)

        return dataclasses.replace(self.call, parse=parse)


def test_the_call_names_its_rpc() -> None:
    assert LIST_CONTAINERS.method == "/runtime.v1.RuntimeService/ListContainers"
    assert LIST_POD_SANDBOX.method == "/runtime.v1.RuntimeService/ListPodSandbox"
    assert isinstance(LIST_CONTAINERS.request(), api_pb2.ListContainersRequest)


@pytest.mark.parametrize(
    ("call", "reply"),
    [
        pytest.param(
            LIST_CONTAINERS,
            _containers_reply(*(_container(n, (RUNNING, EXITED)[n % 2]) for n in range(7))),
            id="containers",
        ),
        pytest.param(
            LIST_POD_SANDBOX,
            api_pb2.ListPodSandboxResponse(
                items=[_sandbox(n, n % 2) for n in range(7)]
            ).SerializeToString(),
            id="sandboxes",
        ),
    ],
)
def test_keys_are_what_the_whole_reply_says(call: ListCall, reply: bytes) -> None:
    whole = [(item.id, item.state) for item in call.items(call.parse(reply))]
    assert [(item.id, item.state) for item in call.parse_keys(reply).items] == whole
    assert len({state for _, state in whole}) == 2  # both states seen: the field is read


def test_a_list_of_known_items_in_any_order_is_the_previous_listing_unparsed() -> None:
    counting = Counting(LIST_CONTAINERS)
    call = counting()
    items = [_container(n) for n in range(20)]
    first: Listing[Container] = Listing().update(call, _containers_reply(*items), convert.container)
    assert counting.parsed == 1
    assert [c.id for c in first.listed] == sorted(c.id for c in first.listed)

    random.Random(3).shuffle(items)  # containerd lists in no fixed order
    again = first.update(call, _containers_reply(*items), convert.container)
    assert again is first
    assert counting.parsed == 1  # the keys sufficed


def test_a_changed_state_converts_that_item_and_keeps_the_others() -> None:
    counting = Counting(LIST_CONTAINERS)
    call = counting()
    first: Listing[Container] = Listing().update(
        call, _containers_reply(*(_container(n) for n in range(3))), convert.container
    )
    changed = first.update(
        call,
        _containers_reply(_container(2), _container(0), _container(1, EXITED)),
        convert.container,
    )
    assert counting.parsed == 2
    assert changed is not first
    assert [c.id for c in changed.listed] == ["c000", "c001", "c002"]
    assert changed.listed[0] is first.listed[0]
    assert changed.listed[2] is first.listed[2]
    assert changed.listed[1].state is ContainerState.EXITED
    assert changed.listed[1].pod_name == "web-1"  # converted whole, labels included


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param([0, 1], id="one-gone"),
        pytest.param([0, 1, 2, 3], id="one-new"),
        pytest.param([0, 1, 3], id="one-replaced"),
    ],
)
def test_a_list_with_other_items_is_a_new_listing_of_exactly_them(ids: list[int]) -> None:
    first: Listing[Container] = Listing().update(
        LIST_CONTAINERS, _containers_reply(*(_container(n) for n in range(3))), convert.container
    )
    other = first.update(
        LIST_CONTAINERS, _containers_reply(*(_container(n) for n in ids)), convert.container
    )
    assert other is not first
    assert [c.id for c in other.listed] == [f"c{n:03d}" for n in ids]
    assert set(other.by_key) == {(f"c{n:03d}", RUNNING) for n in ids}


def test_an_empty_list_after_items_is_empty() -> None:
    first: Listing[Container] = Listing().update(
        LIST_CONTAINERS, _containers_reply(_container(0)), convert.container
    )
    empty = first.update(LIST_CONTAINERS, _containers_reply(), convert.container)
    assert empty.listed == ()
    assert empty.update(LIST_CONTAINERS, _containers_reply(), convert.container) is empty


@pytest.mark.parametrize(
    ("keys", "reply", "items_field"),
    [
        pytest.param(
            keys_pb2.ListPodSandboxKeys, api_pb2.ListPodSandboxResponse, "items", id="sandboxes"
        ),
        pytest.param(
            keys_pb2.ListContainersKeys,
            api_pb2.ListContainersResponse,
            "containers",
            id="containers",
        ),
    ],
)
def test_key_messages_use_the_cri_field_numbers(keys: Any, reply: Any, items_field: str) -> None:
    items = reply.DESCRIPTOR.fields_by_name[items_field]
    assert keys.DESCRIPTOR.fields_by_name["items"].number == items.number
    key = keys.DESCRIPTOR.fields_by_name["items"].message_type.fields_by_name
    item = items.message_type.fields_by_name
    for name in ("id", "state"):
        assert key[name].number == item[name].number, name
