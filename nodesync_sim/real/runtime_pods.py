"""Create pods and containers on a real CRI runtime the way kubelet would (tests and demo).

Pods are host-network (no CNI is needed), each with its own cgroup parent under the runtime
instance's cgroup root, and carry kubelet's ``io.kubernetes.*`` labels so nodesync can tell
which pod a sandbox or container belongs to.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
import grpc.aio

from exporter.cri.pb import api_pb2, api_pb2_grpc
from exporter.model.runtime import (
    LABEL_CONTAINER_NAME,
    LABEL_POD_NAME,
    LABEL_POD_NAMESPACE,
    LABEL_POD_UID,
    ContainerState,
)
from nodesync_sim.real.containerd import IMAGE_REF, cgroup_root_for

ANNOTATION_RESTART_COUNT = "io.kubernetes.container.restartCount"
OOM_LIMIT_BYTES = 32 * 1024 * 1024
"""Memory limit of the OOM container of :func:`run_mixed_pod`."""

_CALL_TIMEOUT = 30.0
_STATES = {
    ContainerState.CREATED: api_pb2.CONTAINER_CREATED,
    ContainerState.RUNNING: api_pb2.CONTAINER_RUNNING,
    ContainerState.EXITED: api_pb2.CONTAINER_EXITED,
    ContainerState.UNKNOWN: api_pb2.CONTAINER_UNKNOWN,
}


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """One container: ``args`` is the whole command line (the image has no entrypoint)."""

    name: str
    args: Sequence[str]
    memory_limit_bytes: int | None = None
    attempt: int = 0


@dataclass(slots=True)
class Pod:
    """A pod sandbox created by :func:`run_pod` and the ids of its latest containers by name."""

    sandbox_id: str
    name: str
    namespace: str
    uid: str
    cgroup_parent: str
    container_ids: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    specs: dict[str, ContainerSpec] = field(default_factory=dict)
    log_directory: str = ""


class MixedPod:
    """Container names of :func:`run_mixed_pod` and the outcome each one reaches."""

    RUNNING = "sleeper"  # keeps running
    COMPLETED = "completes"  # exit 0, reason Completed
    ERROR = "fails"  # exit 1, reason Error
    OOM = "oom"  # exit 137, reason OOMKilled


def _namespaces() -> api_pb2.NamespaceOption:
    return api_pb2.NamespaceOption(
        network=api_pb2.NODE, pid=api_pb2.CONTAINER, ipc=api_pb2.POD
    )  # fmt: skip


def _sandbox_config(pod: Pod) -> api_pb2.PodSandboxConfig:
    labels = {LABEL_POD_NAME: pod.name, LABEL_POD_NAMESPACE: pod.namespace, LABEL_POD_UID: pod.uid}
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(
            name=pod.name, uid=pod.uid, namespace=pod.namespace, attempt=0
        ),
        log_directory=pod.log_directory,
        labels=labels,
        annotations={"kubernetes.io/config.source": "nodesync-sim"},
        linux=api_pb2.LinuxPodSandboxConfig(
            cgroup_parent=pod.cgroup_parent,
            security_context=api_pb2.LinuxSandboxSecurityContext(namespace_options=_namespaces()),
        ),
    )


def _container_config(pod: Pod, spec: ContainerSpec, attempt: int) -> api_pb2.ContainerConfig:
    resources = api_pb2.LinuxContainerResources()
    if spec.memory_limit_bytes is not None:
        resources.memory_limit_in_bytes = spec.memory_limit_bytes
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=spec.name, attempt=attempt),
        image=api_pb2.ImageSpec(image=IMAGE_REF),
        command=list(spec.args),
        labels={
            LABEL_POD_NAME: pod.name,
            LABEL_POD_NAMESPACE: pod.namespace,
            LABEL_POD_UID: pod.uid,
            LABEL_CONTAINER_NAME: spec.name,
        },
        annotations={ANNOTATION_RESTART_COUNT: str(attempt)},
        log_path=f"{spec.name}/{attempt}.log" if pod.log_directory else "",
        linux=api_pb2.LinuxContainerConfig(
            resources=resources,
            security_context=api_pb2.LinuxContainerSecurityContext(namespace_options=_namespaces()),
        ),
    )


async def _create_and_start(
    stub: api_pb2_grpc.RuntimeServiceStub, pod: Pod, spec: ContainerSpec, attempt: int
) -> str:
    created = await stub.CreateContainer(
        api_pb2.CreateContainerRequest(
            pod_sandbox_id=pod.sandbox_id,
            config=_container_config(pod, spec, attempt),
            sandbox_config=_sandbox_config(pod),
        ),
        timeout=_CALL_TIMEOUT,
    )
    await stub.StartContainer(
        api_pb2.StartContainerRequest(container_id=created.container_id), timeout=_CALL_TIMEOUT
    )
    pod.container_ids[spec.name] = created.container_id
    pod.attempts[spec.name] = attempt
    pod.specs[spec.name] = spec
    return str(created.container_id)


async def run_pod(
    endpoint: str,
    name: str,
    namespace: str,
    uid: str,
    containers: Sequence[ContainerSpec],
    *,
    cgroup_root: str | None = None,
    log_root: str | None = None,
) -> Pod:
    """Run a host-network pod sandbox and create and start its containers.

    The pod's cgroup parent is ``<cgroup_root>/pod<uid>`` (default root: the one
    :class:`~nodesync_sim.real.containerd.LocalContainerd` cleans up for this endpoint). With
    ``log_root`` set, container logs go to ``<log_root>/<namespace>_<name>_<uid>/``.
    """
    root = cgroup_root if cgroup_root is not None else cgroup_root_for(endpoint)
    pod = Pod(
        sandbox_id="",
        name=name,
        namespace=namespace,
        uid=uid,
        cgroup_parent=f"{root}/pod{uid}",
        log_directory=f"{log_root}/{namespace}_{name}_{uid}" if log_root else "",
    )
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        ran = await stub.RunPodSandbox(
            api_pb2.RunPodSandboxRequest(config=_sandbox_config(pod)), timeout=_CALL_TIMEOUT
        )
        pod.sandbox_id = ran.pod_sandbox_id
        for spec in containers:
            await _create_and_start(stub, pod, spec, spec.attempt)
    return pod


async def restart_container(endpoint: str, pod: Pod, name: str) -> str:
    """Create and start the next attempt of container ``name`` (as kubelet does on restart).

    The previous attempt stays listed as exited, like kubelet keeps it for its logs.
    Returns the new container id.
    """
    spec = pod.specs[name]
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        return await _create_and_start(stub, pod, spec, pod.attempts[name] + 1)


async def wait_for_state(
    endpoint: str,
    container_id: str,
    state: ContainerState,
    wait_seconds: float = 30.0,
    *,
    reason: str | None = None,
) -> None:
    """Poll ContainerStatus until the container is in ``state`` (and, if given, says
    ``reason``: containerd may report an exit before the OOM event that makes it OOMKilled);
    TimeoutError otherwise."""
    wanted = _STATES[state]
    deadline = time.monotonic() + wait_seconds
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        last = None
        while True:
            reply = await stub.ContainerStatus(
                api_pb2.ContainerStatusRequest(container_id=container_id), timeout=5.0
            )
            last = reply.status.state
            if last == wanted and reason in (None, reply.status.reason):
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"container {container_id} is {api_pb2.ContainerState.Name(last)} "
                    f"({reply.status.reason or 'no reason'}), not {state.name} "
                    f"{f'({reason}) ' if reason else ''}after {wait_seconds} s"
                )
            await asyncio.sleep(0.05)


async def _stop_sandbox(stub: api_pb2_grpc.RuntimeServiceStub, sandbox_id: str) -> None:
    try:
        await stub.StopPodSandbox(
            api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=_CALL_TIMEOUT
        )
    except grpc.aio.AioRpcError as err:
        if err.code() != grpc.StatusCode.NOT_FOUND:
            raise


async def stop_pod(endpoint: str, sandbox_id: str) -> None:
    """Stop a pod sandbox and its containers, leaving them listed (what kubelet does before it
    confirms a pod's deletion); a missing pod is not an error."""
    async with grpc.aio.insecure_channel(endpoint) as channel:
        await _stop_sandbox(api_pb2_grpc.RuntimeServiceStub(channel), sandbox_id)


async def remove_pod(endpoint: str, sandbox_id: str) -> None:
    """Stop and remove a pod sandbox with its containers; a missing pod is not an error."""
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        await _stop_sandbox(stub, sandbox_id)
        await stub.RemovePodSandbox(
            api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=_CALL_TIMEOUT
        )


def mixed_pod_specs() -> list[ContainerSpec]:
    """A running, an exit-0, an exit-1 and an OOM-killed container."""
    return [
        ContainerSpec(MixedPod.RUNNING, ["/bin/sleep", "inf"]),
        ContainerSpec(MixedPod.COMPLETED, ["/bin/true"]),
        ContainerSpec(MixedPod.ERROR, ["/bin/sh", "-c", "exit 1"]),
        # tail keeps everything after the last newline; /dev/zero has none, so it holds 200 MB.
        # It starts after a pause: containerd's shim watches a container's cgroup for OOM kills
        # only once runc's start returned, and under cgroup v1 a kill before that is never
        # reported (the container ends 137, Error, as it would on a node).
        ContainerSpec(
            MixedPod.OOM,
            ["/bin/sh", "-c", "sleep 0.5; head -c 200m /dev/zero | tail"],
            memory_limit_bytes=OOM_LIMIT_BYTES,
        ),
    ]


async def run_mixed_pod(
    endpoint: str,
    name: str = "mixed",
    namespace: str = "default",
    uid: str | None = None,
    *,
    cgroup_root: str | None = None,
    log_root: str | None = None,
    wait_seconds: float = 30.0,
) -> Pod:
    """Run the four-container pod of :class:`MixedPod` and wait until each reached its state.

    Container names are ``MixedPod.RUNNING`` (running), ``MixedPod.COMPLETED`` (exit 0,
    Completed), ``MixedPod.ERROR`` (exit 1, Error) and ``MixedPod.OOM`` (exit 137, OOMKilled).
    """
    pod = await run_pod(
        endpoint,
        name,
        namespace,
        uid or str(uuid.uuid4()),
        mixed_pod_specs(),
        cgroup_root=cgroup_root,
        log_root=log_root,
    )
    await asyncio.gather(
        wait_for_state(
            endpoint, pod.container_ids[MixedPod.RUNNING], ContainerState.RUNNING, wait_seconds
        ),
        *(
            wait_for_state(endpoint, pod.container_ids[n], ContainerState.EXITED, wait_seconds)
            for n in (MixedPod.COMPLETED, MixedPod.ERROR)
        ),
        wait_for_state(
            endpoint,
            pod.container_ids[MixedPod.OOM],
            ContainerState.EXITED,
            wait_seconds,
            reason="OOMKilled",
        ),
    )
    return pod
