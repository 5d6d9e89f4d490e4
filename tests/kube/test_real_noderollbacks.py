"""NodeRollbacks on a real kube-apiserver with the shipped CustomResourceDefinition: what the
code writes is what the schema keeps (a structural schema silently prunes unknown fields), the
status is a subresource, every write carries its resourceVersion, deletion has preconditions."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from exporter.kube.api import KubeAPI
from exporter.kube.config import kubeconfig_configuration
from exporter.kube.errors import AlreadyExists, Conflict
from exporter.kube.noderollbacks import NODEROLLBACKS, RollbackWrites
from exporter.model.rollback import Action, PodTarget, StepState
from exporter.model.rollback_state import (
    BEFORE_ABSENT,
    OBSERVED_BEFORE,
    StepResult,
    add_trigger,
    finish_step,
    start_step,
    wait_step,
)
from nodesync_sim.real.kube_apiserver import ADMIN, LocalKubeAPIServer
from tests.kube.test_noderollbacks import T, rollback

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(120)]


@pytest.fixture
async def api(noderollback_crd: LocalKubeAPIServer) -> AsyncIterator[KubeAPI]:
    config = await kubeconfig_configuration(str(noderollback_crd.kubeconfig(ADMIN)))
    async with KubeAPI(config) as client:
        yield client


@pytest.fixture
def writes(api: KubeAPI) -> RollbackWrites:
    return RollbackWrites(api)


def unique(name: str) -> str:
    import secrets

    return f"{name}-{secrets.token_hex(3)}"


async def test_what_is_written_is_what_is_read_back(
    writes: RollbackWrites, noderollback_crd: LocalKubeAPIServer
) -> None:
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
