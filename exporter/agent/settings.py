"""The agent's settings, each declared once (exporter.settings.declare)."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.declare import group, setting
from exporter.settings.kube import KUBE_CONTEXT, KUBECONFIG
from exporter.settings.server import ServerSettings
from exporter.settings.values import (
    ADDRESS,
    BOOLEAN,
    DURATION,
    NAME,
    PATH,
    POSITIVE_DURATION,
    UNIX_ENDPOINT,
    URL,
)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    cri_endpoint: str = setting(
        "--cri.endpoint",
        "unix:///run/containerd/containerd.sock",
        "CRI v1 endpoint of the container runtime",
        UNIX_ENDPOINT,
        doc="CRI v1 endpoint of the container runtime: `unix://` and an absolute path, as "
        "kubelet's `--container-runtime-endpoint` (a bare path, `tcp://` or an empty path is "
        "refused at start)",
        aliases=("--cri-endpoint",),
    )
    listen: tuple[str, int] = setting(
        "--web.listen-address",
        "0.0.0.0:9617",
        "address serving /metrics, /healthz and /readyz",
        ADDRESS,
        doc="address serving `/metrics`, `/healthz`, `/readyz`",
    )
    server: ServerSettings = group(ServerSettings)  # the listener's timeouts and limits
    sync_period: float = setting(
        "--sync.period",
        "10s",
        "how often the runtime's state, kubelet and host are read",
        POSITIVE_DURATION,
        doc="how often the runtime's state, kubelet and host are read (kubelet's own period); "
        "the containers' resource usage has its own `--stats.period`",
        aliases=("--sync-period",),
    )
    stats_period: float = setting(
        "--stats.period",
        "60s",
        "how often the containers' resource usage is read (CRI ListContainerStats); 0: never",
        DURATION,
        doc="how often the containers' resource usage is read (CRI ListContainerStats, the "
        "`nodesync_runtime_memory_working_set_bytes`, `nodesync_runtime_writable_layer_bytes` "
        "and `nodesync_runtime_stats_timestamp_seconds` families). At 110 pods one read costs "
        "containerd and its shims ~0.25 CPU-seconds, ~100x the state calls of a sync, so it "
        "has its own period; `0s`: never read, the three families are absent",
        aliases=("--stats-period",),
    )
    cri_timeout: float = setting(
        "--cri.timeout",
        "2s",
        "deadline of every CRI call",
        POSITIVE_DURATION,
        doc="deadline of every CRI call; a frozen runtime fails the call after this",
        aliases=("--cri-timeout",),
    )
    kubelet_root_dir: str = setting(
        "--kubelet.root-dir",
        "/var/lib/kubelet",
        "kubelet's root directory (pod directories, nodefs)",
        PATH,
        doc="kubelet's root: pod directories, and the filesystem kubelet calls nodefs",
        aliases=("--kubelet-root-dir",),
    )
    containerd_root: str = setting(
        "--containerd.root",
        "/var/lib/containerd",
        "containerd's root directory (imagefs)",
        PATH,
        doc="containerd's root: the filesystem kubelet calls imagefs",
        aliases=("--containerd-root",),
    )
    kubelet_healthz_url: str = setting(
        "--kubelet.healthz-url",
        "http://127.0.0.1:10248/healthz",
        "kubelet's healthz endpoint",
        URL,
        doc="kubelet's healthz endpoint; no answer means kubelet is down",
        aliases=("--kubelet-healthz-url",),
    )
    kubelet_timeout: float = setting(
        "--kubelet.timeout",
        "1s",
        "deadline of the kubelet healthz probe",
        POSITIVE_DURATION,
        aliases=("--kubelet-timeout",),
    )
    node_name: str = setting(
        "--node.name",
        "",
        "this node's name in the API server (from the downward API); empty: no API view",
        NAME,
        env="NODE_NAME",
        doc="this node's name in the API server (set it from the downward API); empty: the "
        'agent runs without the API view and reports `nodesync_source_up{source="apiserver"} 0`',
        aliases=("--node-name",),
    )
    pod_uid: str = setting(
        "--pod.uid",
        "",
        "the agent's own pod's uid (from the downward API), which a cleanup never removes",
        NAME,
        env="POD_UID",
        doc="the agent's own pod's uid (set it from the downward API, `metadata.uid`): a "
        "cleanup never waits for, removes or reports that pod, see [cleanup.md](cleanup.md); "
        "empty: the agent does not know its pod, and may remove it while the kubelet is gone",
    )
    kubeconfig: str = KUBECONFIG.field()
    context: str = KUBE_CONTEXT.field()
    api_initial_jitter: float = setting(
        "--apiserver.initial-jitter",
        "5s",
        "random delay up to this before the first list, so joining nodes spread out",
        DURATION,
        doc="random delay, up to this, before the first list: 100+ nodes joining at once do "
        "not list at the same instant",
        aliases=("--api-initial-jitter",),
    )
    drift_grace_period: float = setting(
        "--drift.grace-period",
        "60s",
        "how long a difference between API, runtime and kubelet must last to count as drift",
        DURATION,
        doc="how long a difference between the API server, the runtime and kubelet's pod "
        "directories must last before it counts as drift",
        aliases=("--drift-grace-period",),
    )
    cleanup: bool = setting(
        "--cleanup.enabled",
        "true",
        "answer the controller's cleanup requests (the Node annotation "
        "nodesync.io/cleanup-request) by removing drift's orphans",
        BOOLEAN,
        doc="answer the controller's cleanup requests (Node annotation "
        "`nodesync.io/cleanup-request`) by removing the node's orphan and stale sandboxes and "
        "orphan containers, see [cleanup.md](cleanup.md); needs `patch` on the agent's own "
        "Node. `--no-cleanup.enabled`: never remove anything, never write to the API server (the "
        "former values `enabled` and `disabled` are still accepted)",
        aliases=("--cleanup",),
    )
    cleanup_call_timeout: float = setting(
        "--cleanup.call-timeout",
        "30s",
        "deadline of each stop and remove call of a cleanup",
        POSITIVE_DURATION,
        doc="deadline of each stop and remove call a cleanup makes to the runtime",
        aliases=("--cleanup-call-timeout",),
    )

    @property
    def listen_host(self) -> str:
        return self.listen[0]

    @property
    def listen_port(self) -> int:
        return self.listen[1]
