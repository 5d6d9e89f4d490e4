"""The real node's kubelet side where it touches the machine: its pods run in a real containerd,
and its healthz answers for the simulated kubelet.

- :class:`ContainerdPods`: a :class:`~nodesync_sim.fake.scaleout.kubelet.PodRuntime` that runs each
  pod the simulated kubelet starts as a real host-network sandbox with one ``sleep`` container
  per container name (nodesync_sim.real.runtime_pods, kubelet's labels), stops it when the kubelet
  stops the pod, and removes it once the pod's deletion is confirmed.
- :class:`KubeletHealthz`: ``/healthz`` answering ``ok`` while the node's simulated kubelet
  talks to the API server, 503 while it is silent (the real agent probes it).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from nodesync_sim.fake.scaleout.pods import BoundPod
from nodesync_sim.real.runtime_pods import ContainerSpec, remove_pod, run_pod, stop_pod

SLEEP: tuple[str, ...] = ("/bin/sleep", "inf")


class ContainerdPods:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.sandboxes: dict[str, str] = {}  # pod uid -> sandbox id

    async def run_pod(self, pod: BoundPod) -> None:
        info = pod.info
        if info.uid in self.sandboxes:
            return
        specs = [ContainerSpec(name, list(SLEEP)) for name in pod.containers]
        ran = await run_pod(self.endpoint, info.name, info.namespace, info.uid, specs)
        self.sandboxes[info.uid] = ran.sandbox_id

    async def stop_pod(self, uid: str) -> None:
        sandbox = self.sandboxes.get(uid)
        if sandbox is not None:
            await stop_pod(self.endpoint, sandbox)

    async def remove_pod(self, uid: str) -> None:
        sandbox = self.sandboxes.pop(uid, None)
        if sandbox is not None:
            await remove_pod(self.endpoint, sandbox)


class KubeletHealthz:
    """A kubelet healthz endpoint for the real node; serve :meth:`app`."""

    def __init__(self, alive: Callable[[], bool]) -> None:
        self._alive = alive

    def app(self) -> web.Application:
        async def healthz(request: web.Request) -> web.Response:
            if self._alive():
                return web.Response(text="ok")
            return web.Response(status=503, text="kubelet is not posting status")

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        return app
