"""NodeRollbacks to and from the API's JSON: everything the model holds survives the round
trip; an object without a status reads as just created; one that cannot be a rollback is an
error the informer skips. Then, against both API servers (contract suite, tests/kube/cluster.py;
on the real kube-apiserver 1.20 with the shipped CustomResourceDefinition): what the code writes
is what the server keeps (a structural schema silently prunes unknown fields), the status is a
subresource, every write carries its resourceVersion, deletion has preconditions."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import AsyncIterator

import pytest

from exporter.kube.api import KubeAPI
from exporter.kube.convert import ConversionError
from exporter.kube.errors import AlreadyExists, Conflict
from exporter.kube.noderollbacks import (
    NODEROLLBACKS,
    RollbackWrites,
    node_rollback,
    object_json,
    spec_json,
    status_json,
)
from exporter.model.rollback import (
    Action,
    NodeRollback,
    Phase,
    PodTarget,
    RollbackSpec,
    StepKind,
    StepState,
    Trigger,
    Verdicts,
)
from exporter.model.rollback_state import (
    BEFORE_ABSENT,
    OBSERVED_BEFORE,
    StepResult,
    add_trigger,
    finish_step,
    initial_status,
    start_step,
    wait_step,
)
from tests.kube.cluster import REAL, Cluster

pytestmark = pytest.mark.timeout(120)  # the first test on the real server installs the CRD

T = 1_700_000_000.25


def rollback(**spec: object) -> NodeRollback:
    base = RollbackSpec(
        node="ip-10-0-1-7.ec2.internal",
        node_uid="8f6c4bde-1111-2222-3333-444455556666",
        action=Action.ROLLBACK_NODE,
        trigger=Trigger("NodesyncNewNodeNotReady", "0123abcd", T - 60.125),
        decision=Verdicts(
            decided_at=T,
            decided_by="controller-0",
            node_created_at=T - 600,
            failing_since=T - 120.5,
            absolute_used=2,
            absolute_limit=10,
            window_seconds=3600.0,
            wave_size=40,
            wave_used=1,
            wave_limit=4,
            established_nodes=100,
            established_failing=1,
        ),
        wave="2026-11-30T01:00:00Z",
        delete_node=True,
    )
    s = dataclasses.replace(base, **spec)  # type: ignore[arg-type]
    return NodeRollback("ip-10-0-1-7.ec2.internal-0a1b2c3d4e", s, initial_status(s), uid="u1",
                        resource_version="42", generation=1, created_at=T)  # fmt: skip


def served(r: NodeRollback) -> dict[str, object]:
    """As a server returns it: with generation and creation time."""
    obj = object_json(r)
    obj["metadata"]["generation"] = r.generation  # type: ignore[index]
    obj["metadata"]["creationTimestamp"] = "2023-11-14T22:13:20Z"  # type: ignore[index]
    return obj


def test_everything_survives_the_round_trip() -> None:
    r = rollback()
    status = start_step(r.status, 0, T + 1, {OBSERVED_BEFORE: BEFORE_ABSENT})
    status = finish_step(status, 0, StepResult(StepState.DONE, "cordoned", made_change=True), T + 2)
    status = wait_step(start_step(status, 1, T + 3), 1, "api_error", "503", T + 9)
    r = dataclasses.replace(r, status=status)
    back = node_rollback(served(r))
    assert back.spec == r.spec
    assert back.status == r.status
    assert (back.name, back.uid, back.resource_version) == (r.name, "u1", "42")
    assert back.status.phase is Phase.WAITING
    assert back.status.steps[0].made_change


def test_an_eviction_carries_its_pod() -> None:
    r = rollback(
        action=Action.EVICT_POD, pod=PodTarget("web", "web-0", "pod-uid"), delete_node=False
    )
    back = node_rollback(served(r))
    assert back.spec.pod == PodTarget("web", "web-0", "pod-uid")
    assert [s.kind for s in back.status.steps] == [StepKind.EVICT_POD]


def test_empty_strings_are_left_out_and_read_back_as_empty() -> None:
    """An eviction as the planner decides it has no pod uid; the server may refuse "" (see
    spec_json), so it is not sent."""
    r = rollback(action=Action.EVICT_POD, pod=PodTarget("web", "web-0"), wave="", delete_node=False)
    spec = spec_json(r.spec)
    assert spec["pod"] == {"namespace": "web", "name": "web-0"}
    assert "wave" not in spec
    assert node_rollback(served(r)).spec == r.spec


def test_an_object_without_a_status_reads_as_just_created() -> None:
    obj = served(rollback())
    del obj["status"]
    back = node_rollback(obj)
    assert back.status.phase is Phase.PENDING
    assert back.status.observed_generation == 0  # the executor writes the first status
    assert len(back.status.steps) == 6


def test_labels_are_valid_label_values_or_left_out() -> None:
    labels = object_json(rollback())["metadata"]["labels"]
    assert labels["nodesync.io/node"] == "ip-10-0-1-7.ec2.internal"
    assert labels["nodesync.io/action"] == "rollback_node"
    long = object_json(rollback(node="n" * 100))["metadata"]["labels"]
    assert "nodesync.io/node" not in long


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda o: o["metadata"].pop("name"), id="no-name"),
        pytest.param(lambda o: o["spec"].update(action="reboot"), id="unknown-action"),
        pytest.param(lambda o: o["spec"].pop("nodeName"), id="no-node"),
        pytest.param(lambda o: o["spec"].pop("trigger"), id="no-trigger"),
        pytest.param(lambda o: o.update(spec=[]), id="spec-not-an-object"),
    ],
)
def test_what_cannot_be_a_rollback_is_an_error(change: object) -> None:
    obj = served(rollback())
    change(obj)  # type: ignore[operator]
    with pytest.raises(ConversionError):
        node_rollback(obj)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(
            {"steps": [{"name": "cordon", "state": "exploded"}]},
            "$.status.steps[0].state: invalid enum value 'exploded'",
            id="unknown-step-state",
        ),
        pytest.param(
            {"steps": [{"name": "cordon"}, {"name": 5}]},
            "$.status.steps[1].name: expected `str`, got `int`",
            id="step-name-number",
        ),
        pytest.param(
            {"steps": ["x"]}, "$.status.steps[0]: expected `object`, got `str`", id="step-text"
        ),
        pytest.param(
            {"triggers": "none"}, "$.status.triggers: expected `array`, got `str`", id="triggers"
        ),
        pytest.param(
            {"triggers": [{"fingerprint": "ab", "startsAt": "soon"}]},
            "$.status.triggers[0].startsAt: not an RFC 3339 time: 'soon'",
            id="trigger-time",
        ),
        pytest.param(
            {"phase": "Exploded"}, "$.status.phase: invalid enum value 'Exploded'", id="phase"
        ),
        pytest.param(
            {"observedGeneration": "1"},
            "$.status.observedGeneration: expected `int`, got `str`",
            id="generation-text",
        ),
    ],
)
def test_a_malformed_status_is_an_error_naming_the_field(
    damage: dict[str, object], message: str
) -> None:
    """A damaged status never reads as another state (not even as just created)."""
    obj = served(rollback())
    obj["status"].update(damage)  # type: ignore[union-attr]
    with pytest.raises(ConversionError) as raised:
        node_rollback(obj)
    assert str(raised.value) == message


def test_the_json_is_what_the_crd_describes() -> None:
    spec, status = spec_json(rollback().spec), status_json(rollback().status)
    assert set(spec) == {"nodeName", "nodeUID", "action", "wave", "deleteNode", "paused",
                         "trigger", "decision"}  # fmt: skip
    assert {"phase", "step", "steps", "triggers", "observedGeneration"} <= set(status)


# ---------------------------------------------------------------- on both servers


@pytest.fixture
async def api(cluster: Cluster, request: pytest.FixtureRequest) -> AsyncIterator[KubeAPI]:
    """The product's client as admin; the real server serves the shipped CRD."""
    if cluster.kind == REAL:
        request.getfixturevalue("noderollback_crd")
    async with await cluster.client() as client:
        yield client


@pytest.fixture
def writes(api: KubeAPI) -> RollbackWrites:
    return RollbackWrites(api)


def unique(name: str) -> str:
    return f"{name}-{secrets.token_hex(3)}"


async def test_what_is_written_is_what_is_read_back(writes: RollbackWrites) -> None:
    wanted = dataclasses.replace(rollback(), name=unique("n1"), uid="", resource_version="")
    created = await writes.create(wanted)
    try:
        assert created.uid
        assert created.resource_version
        assert created.spec == wanted.spec
        assert created.status == wanted.status
        status = start_step(created.status, 0, T + 1, {OBSERVED_BEFORE: BEFORE_ABSENT})
        status = finish_step(
            status, 0, StepResult(StepState.DONE, "cordoned", made_change=True), T + 2
        )
        status = wait_step(start_step(status, 1, T + 3), 1, "api_error", "503", T + 9)
        status = add_trigger(status, dataclasses.replace(wanted.spec.trigger, fingerprint="ff"))
        updated = await writes.update_status(created, status)
        again = await writes.get(created.name)
        assert again is not None
        assert again.status == status  # nothing pruned, every field kept
        assert again.spec == wanted.spec
        assert again.resource_version == updated.resource_version
        # The stale version of the object: refused, so two writers cannot both start a step.
        with pytest.raises(Conflict):
            await writes.update_status(created, status)
        # A second create of the same decision: AlreadyExists, the first one stands.
        with pytest.raises(AlreadyExists):
            await writes.create(wanted)
    finally:
        current = await writes.get(created.name)
        assert current is not None
        assert await writes.delete(current)
    assert await writes.get(created.name) is None


async def test_status_and_spec_are_written_apart(writes: RollbackWrites) -> None:
    created = await writes.create(dataclasses.replace(rollback(), name=unique("n2")))
    try:
        paused = await writes.change_spec(
            created.name, lambda r: dataclasses.replace(r.spec, paused=True)
        )
        assert paused is not None
        assert paused.spec.paused
        assert paused.generation == created.generation + 1
        assert paused.status == created.status  # a spec write leaves the status alone
        moved = await writes.change_status(created.name, lambda r: start_step(r.status, 0, T + 5))
        assert moved is not None
        assert moved.generation == paused.generation  # a status write is no new generation
        assert moved.spec.paused
    finally:
        current = await writes.get(created.name)
        assert current is not None
        await writes.delete(current)


async def test_an_eviction_as_decided_is_accepted(writes: RollbackWrites) -> None:
    """An evict_pod rollback as the planner makes it: its pod has no uid, the wave may be
    empty. The server takes it (it refuses "" for a string of the schema: 422)."""
    wanted = dataclasses.replace(
        rollback(action=Action.EVICT_POD, pod=PodTarget("web", "web-0"), delete_node=False),
        name=unique("n4"),
    )
    wanted = dataclasses.replace(wanted, spec=dataclasses.replace(wanted.spec, wave=""))
    created = await writes.create(wanted)
    try:
        assert created.spec == wanted.spec
        assert created.status == wanted.status
    finally:
        current = await writes.get(created.name)
        assert current is not None
        await writes.delete(current)


async def test_deletion_checks_the_uid_and_version(writes: RollbackWrites, api: KubeAPI) -> None:
    created = await writes.create(dataclasses.replace(rollback(), name=unique("n3")))
    stale = dataclasses.replace(created, resource_version=str(int(created.resource_version) - 1))
    with pytest.raises(Conflict):
        await writes.delete(stale)
    current = await writes.get(created.name)
    assert current is not None
    assert await writes.delete(current)
    assert not await writes.delete(current)  # gone: nothing to do
    page = await api.list(NODEROLLBACKS, field_selector=f"metadata.name={created.name}")
    assert page.items == []
