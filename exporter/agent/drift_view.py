"""The agent's drift, cycle after cycle: when it first saw each of kubelet's pod directories,
when it last saw listed each pod the node still holds, and whether its kubelet is gone (its last
healthz probe failed and its own Node says Ready Unknown, exporter.model.drift.kubelet_gone)."""

from __future__ import annotations

from collections.abc import Callable

from exporter.model.drift import (
    Drift,
    compute_drift,
    kubelet_gone,
    track_first_seen,
    track_last_listed,
)
from exporter.model.host import KubeletSnapshot
from exporter.model.kube import NodeInfo, PodInfo
from exporter.model.runtime import RuntimeSnapshot


class DriftView:
    def __init__(self, grace_seconds: float, node: Callable[[], NodeInfo | None]) -> None:
        self._grace = grace_seconds
        self._node = node
        self._first_seen: dict[str, float] = {}
        self._last_listed: dict[str, float] = {}

    def compute(
        self,
        pods: tuple[PodInfo, ...] | None,
        runtime: RuntimeSnapshot | None,
        kubelet: KubeletSnapshot | None,
        now: float,
    ) -> Drift | None:
        """Drift needs both sides complete: a partial list would make desired pods look
        orphaned. Pod directories count only while kubelet's root could be read."""
        dir_uids = kubelet.pod_uids if kubelet is not None and kubelet.pod_dir_readable else None
        if dir_uids is not None:
            self._first_seen = track_first_seen(self._first_seen, dir_uids, now)
        if pods is None or runtime is None:
            return None
        # Held by the node: in the runtime, or a pod dir (as last read, when not readable now).
        held = {s.uid for s in runtime.sandboxes} | {c.pod_uid for c in runtime.containers}
        self._last_listed = track_last_listed(
            self._last_listed, {p.uid for p in pods}, held | set(self._first_seen), now
        )
        return compute_drift(
            pods,
            runtime,
            dir_uids or (),
            now,
            grace_seconds=self._grace,
            first_seen=self._first_seen,
            last_listed=self._last_listed,
            kubelet_gone=kubelet_gone(kubelet.healthy if kubelet else None, self._node()),
        )
