"""Agent settings for tests: fast sync, short deadlines, a kubelet that does not answer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from exporter.agent.settings import AgentSettings
from nodesync_sim.real.containerd import LocalContainerd


def agent_settings(
    containerd: LocalContainerd, kubelet_root: Path, closed_port: int, **overrides: Any
) -> AgentSettings:
    base = AgentSettings(
        cri_endpoint=containerd.endpoint,
        listen=("127.0.0.1", 0),
        sync_period=0.2,
        cri_timeout=0.5,
        kubelet_root_dir=str(kubelet_root),
        containerd_root=str(containerd.root),
        kubelet_healthz_url=f"http://127.0.0.1:{closed_port}/healthz",
        kubelet_timeout=0.5,
    )
    return replace(base, **overrides)
