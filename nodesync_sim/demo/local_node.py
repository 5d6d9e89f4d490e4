"""``nodesync sim node``: a private containerd with example pods, and an agent watching it.

For a first look at what the agent exports, on a machine without Kubernetes. Everything it
creates (containerd, its pods, mounts, cgroups, directories) is removed on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import uuid

from exporter.agent.app import make_app
from exporter.agent.settings import AgentSettings
from exporter.serve import serve
from nodesync_sim.real.containerd import LocalContainerd, missing_binaries
from nodesync_sim.real.runtime_pods import ContainerSpec, run_mixed_pod, run_pod

log = logging.getLogger(__name__)


async def _example_pods(endpoint: str) -> None:
    for name in ("web-0", "web-1"):
        await run_pod(
            endpoint,
            name,
            "default",
            str(uuid.uuid4()),
            [ContainerSpec("app", ["/bin/sleep", "inf"])],
        )
    await run_mixed_pod(endpoint, name="mixed", namespace="default")


async def run_local_node(args: argparse.Namespace) -> int:
    missing = missing_binaries()
    if missing:
        log.error(
            "cannot start a local containerd: missing %s (run scripts/setup as root)",
            ", ".join(missing),
        )
        return 1
    containerd = LocalContainerd()
    await asyncio.to_thread(containerd.start)
    try:
        await _example_pods(containerd.endpoint)
        with tempfile.TemporaryDirectory(prefix="nodesync-kubelet-") as kubelet_root:
            host, port = args.web_listen_address
            settings = AgentSettings(
                cri_endpoint=containerd.endpoint,
                listen=(host, port),
                sync_period=args.sync_period,
                cri_timeout=2.0,
                kubelet_root_dir=kubelet_root,
                containerd_root=str(containerd.root),
                kubelet_healthz_url="http://127.0.0.1:10248/healthz",
                kubelet_timeout=1.0,
            )
            log.info(
                "local node ready: metrics on http://%s:%d/metrics (Ctrl-C stops and cleans up)",
                host,
                port,
                extra={"cri_endpoint": containerd.endpoint},
            )
            await serve(make_app(settings), host, port)
    finally:
        await asyncio.to_thread(containerd.cleanup)
        log.info("local containerd stopped and removed")
    return 0
