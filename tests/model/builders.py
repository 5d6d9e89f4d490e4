"""Small constructors for runtime data in tests (defaults fill what a test does not care about)."""

from __future__ import annotations

from typing import Any

from exporter.model.runtime import (
    Container,
    ContainerState,
    PodSandbox,
    SandboxState,
)


def sandbox(
    uid: str = "uid-a",
    *,
    id: str | None = None,
    name: str = "web",
    namespace: str = "default",
    attempt: int = 0,
    state: SandboxState = SandboxState.READY,
    created_at: float = 100.0,
) -> PodSandbox:
    return PodSandbox(
        id=id or f"sb-{uid}-{attempt}",
        name=name,
        namespace=namespace,
        uid=uid,
        attempt=attempt,
        state=state,
        created_at=created_at,
    )


def running(name: str = "app", attempt: int = 0, **kw: Any) -> Container:
    return container(name, attempt, ContainerState.RUNNING, **kw)


def created(name: str = "app", attempt: int = 0, **kw: Any) -> Container:
    return container(name, attempt, ContainerState.CREATED, **kw)


def unknown(name: str = "app", attempt: int = 0, **kw: Any) -> Container:
    return container(name, attempt, ContainerState.UNKNOWN, **kw)


def exited(
    name: str = "app",
    attempt: int = 0,
    exit_code: int | None = 0,
    reason: str | None = None,
    finished_at: float | None = None,
    **kw: Any,
) -> Container:
    if reason is None:
        reason = "" if exit_code is None else "Completed" if exit_code == 0 else "Error"
    return container(
        name,
        attempt,
        ContainerState.EXITED,
        exit_code=exit_code,
        reason=reason,
        finished_at=finished_at,
        **kw,
    )


def oom(
    name: str = "app", attempt: int = 0, finished_at: float | None = None, **kw: Any
) -> Container:
    return exited(name, attempt, exit_code=137, reason="OOMKilled", finished_at=finished_at, **kw)


def container(
    name: str,
    attempt: int,
    state: ContainerState,
    *,
    uid: str = "uid-a",
    sandbox_id: str | None = None,
    namespace: str = "default",
    pod: str = "web",
    created_at: float | None = None,
    exit_code: int | None = None,
    reason: str = "",
    finished_at: float | None = None,
    settled: bool = True,
) -> Container:
    return Container(
        id=f"c-{uid}-{sandbox_id or 0}-{name}-{attempt}",
        pod_sandbox_id=sandbox_id or f"sb-{uid}-0",
        name=name,
        attempt=attempt,
        state=state,
        created_at=created_at if created_at is not None else 100.0 + attempt,
        pod_uid=uid,
        pod_namespace=namespace,
        pod_name=pod,
        exit_code=exit_code,
        reason=reason,
        finished_at=finished_at,
        settled=settled,
    )
