"""CRIClient and RuntimeReader against a real containerd."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest

from exporter.cri.client import CRIClient
from exporter.cri.errors import NotFound, RuntimeTimeout, RuntimeUnavailable
from exporter.cri.snapshot import RuntimeReader
from exporter.model.runtime import ContainerState, SandboxState
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.runtime_pods import (
    ContainerSpec,
    MixedPod,
    Pod,
    restart_container,
    run_mixed_pod,
    run_pod,
    wait_for_state,
)
from tests.cri.observer import RecordingObserver
from tests.support.containerd import Release
from tests.support.wait import until_async

#: On the machine's containerd; the tests of what each release answers (versions, reasons,
#: codes, its state after a restart) run on every release too, with the reason beside them.
pytestmark = [pytest.mark.containerd]


@pytest.fixture
async def client(
    containerd: LocalContainerd,
) -> AsyncIterator[tuple[CRIClient, RecordingObserver]]:
    observer = RecordingObserver()
    # A deadline a busy machine's containerd meets (these tests are not about it; the frozen
    # runtime's test makes a client of its own).
    cri = CRIClient(containerd.endpoint, timeout=5.0, observer=observer)
    try:
        yield cri, observer
    finally:
        await cri.close()


# On every release: each answers the listings, statuses, exit reasons and stats itself.
@pytest.mark.containerd_releases
async def test_lists_states_exit_codes_and_reasons(
    containerd: LocalContainerd, client: tuple[CRIClient, RecordingObserver]
) -> None:
    cri, observer = client
    pod = await run_mixed_pod(containerd.endpoint, name="mixed", namespace="demo")

    version = await cri.version()
    assert version.runtime_name == "containerd"
    assert version.runtime_api_version == "v1"
    conditions = {c.type: c for c in await cri.status()}
    assert conditions["RuntimeReady"].status is True
    assert conditions["NetworkReady"].status is False  # no CNI: host-network pods only

    (sandbox,) = await cri.list_pod_sandboxes()
    assert (sandbox.id, sandbox.name, sandbox.namespace, sandbox.uid) == (
        pod.sandbox_id,
        "mixed",
        "demo",
        pod.uid,
    )
    assert sandbox.state is SandboxState.READY
    assert sandbox.created_at == pytest.approx(time.time(), abs=60)
    assert (await cri.pod_sandbox_status(pod.sandbox_id)).state is SandboxState.READY

    listed = {c.name: c for c in await cri.list_containers()}
    assert set(listed) == {MixedPod.RUNNING, MixedPod.COMPLETED, MixedPod.ERROR, MixedPod.OOM}
    assert listed[MixedPod.RUNNING].state is ContainerState.RUNNING
    for name in (MixedPod.COMPLETED, MixedPod.ERROR, MixedPod.OOM):
        assert listed[name].state is ContainerState.EXITED
    for c in listed.values():
        assert (c.pod_uid, c.pod_namespace, c.pod_name) == (pod.uid, "demo", "mixed")
        assert c.pod_sandbox_id == pod.sandbox_id

    expected = {
        MixedPod.COMPLETED: (0, "Completed"),
        MixedPod.ERROR: (1, "Error"),
        MixedPod.OOM: (137, "OOMKilled"),
    }
    for name, (exit_code, reason) in expected.items():
        status = await cri.container_status(pod.container_ids[name], pod.sandbox_id)
        assert (status.exit_code, status.reason) == (exit_code, reason), name
        assert status.started_at is not None
        assert status.finished_at is not None
        assert status.pod_sandbox_id == pod.sandbox_id
    running = await cri.container_status(pod.container_ids[MixedPod.RUNNING])
    assert running.state is ContainerState.RUNNING
    assert running.exit_code is None
    assert running.finished_at is None
    assert running.started_at is not None

    stats = {s.container_id: s for s in await cri.list_container_stats()}
    sleeper = stats[pod.container_ids[MixedPod.RUNNING]]
    assert sleeper.memory_working_set_bytes is not None
    assert sleeper.cpu_usage_core_seconds is not None
    assert len(await cri.image_fs_info()) >= 1
    assert {code for _, _, code in observer.calls} == {"OK"}


# On every release: 1.6 answers a second stop NOT_FOUND, 1.7 and 2.x OK.
@pytest.mark.containerd_releases
async def test_not_found_on_stop_and_remove_is_success(
    containerd: LocalContainerd,
    containerd_release: Release,
    client: tuple[CRIClient, RecordingObserver],
) -> None:
    cri, observer = client
    pod = await run_pod(
        containerd.endpoint,
        "cleanup",
        "demo",
        str(uuid.uuid4()),
        [ContainerSpec("app", ["/bin/sleep", "inf"])],
    )
    container_id = pod.container_ids["app"]

    await cri.stop_container(container_id, timeout_seconds=0)
    await cri.remove_container(container_id)
    with pytest.raises(NotFound):
        await cri.container_status(container_id)
    # Everything again, now on a container that no longer exists.
    await cri.stop_container(container_id, timeout_seconds=0)
    await cri.remove_container(container_id)

    await cri.stop_pod_sandbox(pod.sandbox_id)
    await cri.remove_pod_sandbox(pod.sandbox_id)
    await cri.stop_pod_sandbox(pod.sandbox_id)
    await cri.remove_pod_sandbox(pod.sandbox_id)
    assert await cri.list_pod_sandboxes() == ()

    # containerd 1.6 answers NOT_FOUND to the second stops, and the client turned it into
    # success; 1.7 and 2.x answer a stop of a removed container or sandbox OK themselves.
    codes = {op: observer.codes(op) for op in ("stop_container", "stop_podsandbox")}
    if containerd_release.name.startswith("1.6."):
        assert codes == {
            "stop_container": ["OK", "NOT_FOUND"],
            "stop_podsandbox": ["OK", "NOT_FOUND"],
        }
    else:
        assert codes == {"stop_container": ["OK", "OK"], "stop_podsandbox": ["OK", "OK"]}


async def test_frozen_runtime_times_out_within_the_deadline(
    containerd: LocalContainerd,
) -> None:
    observer = RecordingObserver()
    cri = CRIClient(containerd.endpoint, timeout=0.5, observer=observer)
    try:
        await cri.status()  # connected while healthy
        containerd.freeze()
        started = time.monotonic()
        with pytest.raises(RuntimeTimeout) as caught:
            await cri.list_containers()
        elapsed = time.monotonic() - started
        containerd.thaw()
        assert 0.4 <= elapsed < 5.0  # the 0.5 s deadline, and whatever a busy machine adds
        assert caught.value.code == "DEADLINE_EXCEEDED"
        assert caught.value.operation_type == "list_containers"
        assert observer.codes("list_containers") == ["DEADLINE_EXCEEDED"]
        # Thawed, the same client answers again.
        await cri.list_containers()
    finally:
        containerd.thaw()
        await cri.close()


# On every release: a restarted release finds its running pod again through its own shim
# records (2.x writes bootstrap.json, not address).
@pytest.mark.containerd_releases
async def test_stopped_runtime_is_unavailable_and_restart_recovers(
    containerd: LocalContainerd, client: tuple[CRIClient, RecordingObserver]
) -> None:
    cri, observer = client
    pod: Pod = await run_pod(
        containerd.endpoint,
        "survivor",
        "demo",
        str(uuid.uuid4()),
        [ContainerSpec("app", ["/bin/sleep", "inf"])],
    )
    await cri.status()

    containerd.stop()
    started = time.monotonic()
    with pytest.raises(RuntimeUnavailable) as caught:
        await cri.status()
    assert time.monotonic() - started < 0.5  # fails fast, no waiting for the deadline
    assert caught.value.code == "UNAVAILABLE"
    with pytest.raises(RuntimeUnavailable):
        await RuntimeReader(cri).read()

    containerd.restart()

    async def answers() -> bool:
        try:
            await cri.status()
        except RuntimeUnavailable:
            return False
        return True

    await until_async(answers, timeout=10.0, what="containerd to answer")
    (sandbox,) = await cri.list_pod_sandboxes()
    assert sandbox.id == pod.sandbox_id
    (container,) = await cri.list_containers()
    assert container.state is ContainerState.RUNNING
    assert observer.codes("status")[-1] == "OK"


async def test_reader_asks_container_status_once_per_exited_container(
    containerd: LocalContainerd, client: tuple[CRIClient, RecordingObserver]
) -> None:
    cri, observer = client
    pod = await run_mixed_pod(containerd.endpoint, name="cached", namespace="demo")
    reader = RuntimeReader(cri)

    first = await reader.read()
    assert observer.count("container_status") == 3  # the three exited containers
    by_name = {c.name: c for c in first.containers}
    assert (by_name[MixedPod.OOM].exit_code, by_name[MixedPod.OOM].reason) == (137, "OOMKilled")
    assert by_name[MixedPod.ERROR].exit_code == 1
    assert by_name[MixedPod.COMPLETED].reason == "Completed"
    assert by_name[MixedPod.RUNNING].exit_code is None
    for c in first.containers:
        assert (c.pod_uid, c.pod_name, c.pod_namespace) == (pod.uid, "cached", "demo")
    assert [s.uid for s in first.sandboxes] == [pod.uid]
    assert first.version is not None
    assert first.version.runtime_name == "containerd"
    assert observer.count("list_container_stats") == 0  # the state only: stats are apart
    stats = await reader.read_stats()
    assert pod.container_ids[MixedPod.RUNNING] in {s.container_id for s in stats.containers}
    assert observer.count("list_container_stats") == 1

    second = await reader.read()
    assert observer.count("container_status") == 3  # nothing new exited: no status calls
    assert {c.id: c for c in second.containers} == {c.id: c for c in first.containers}
    assert observer.count("version") == 1
    # Nothing changed: the very tuples of the first read (what the agent's sync relies on to
    # skip its per-pod work), whatever order containerd listed them in this time.
    assert second.sandboxes is first.sandboxes
    assert second.containers is first.containers
    assert [c.id for c in first.containers] == sorted(c.id for c in first.containers)

    # A new attempt of the failing container exits: exactly one more status call.
    new_id = await restart_container(containerd.endpoint, pod, MixedPod.ERROR)
    await wait_for_state(containerd.endpoint, new_id, ContainerState.EXITED)
    third = await reader.read()
    assert observer.count("container_status") == 4
    attempts = sorted(c.attempt for c in third.containers if c.name == MixedPod.ERROR)
    assert attempts == [0, 1]
    assert third.containers is not second.containers
    assert third.sandboxes is second.sandboxes  # the sandbox did not change
    unchanged = {c.id: c for c in second.containers}
    for c in third.containers:  # the containers that did not change are the same objects
        if c.id in unchanged:
            assert c is unchanged[c.id], c.name

    # Removed containers leave the cache.
    await cri.stop_pod_sandbox(pod.sandbox_id)
    await cri.remove_pod_sandbox(pod.sandbox_id)
    empty = await reader.read()
    assert empty.containers == ()
    assert empty.sandboxes == ()
    assert reader.cached_container_ids == frozenset()
