"""Each source of the agent's sync loop (the runtime, the host, kubelet, the API server) as
up or down, since when it last worked, and its failures logged once loudly, then quietly."""

from __future__ import annotations

import logging

from exporter.agent.state import SourceState
from exporter.model.host import HostSnapshot, KubeletSnapshot
from exporter.model.runtime import RuntimeSnapshot

log = logging.getLogger("exporter.agent.sync")

SOURCE_CRI = "runtime"
SOURCE_HOST = "host"
SOURCE_KUBELET = "kubelet"
SOURCE_APISERVER = "apiserver"


def source_state(previous: SourceState | None, result: object, now: float) -> SourceState:
    last = previous.last_success if previous else None
    if isinstance(result, Exception):
        return SourceState(up=False, last_success=last, error=str(result))
    if isinstance(result, KubeletSnapshot) and not result.healthy:
        return SourceState(up=False, last_success=last, error=result.error or "healthz failed")
    if previous is not None and not previous.up:
        log.info("source recovered", extra={"source": _name_of(result)})
    return SourceState(up=True, last_success=now)


def _name_of(result: object) -> str:
    if isinstance(result, RuntimeSnapshot):
        return SOURCE_CRI
    if isinstance(result, HostSnapshot):
        return SOURCE_HOST
    return SOURCE_KUBELET


def was_up(previous: SourceState | None) -> bool:
    return previous is None or previous.up


def log_source_error(previous: SourceState | None, source: str, exc: Exception) -> None:
    # Log the transition to down loudly, repeats quietly: a dead runtime must not flood logs.
    level = logging.WARNING if was_up(previous) else logging.DEBUG
    log.log(level, "source read failed", extra={"source": source, "error": str(exc)})
