"""A node's containerd: a :class:`LocalContainerd` inside the node's namespace, at the paths a
real node uses, with the node's CNI configuration."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path

from nodesync_sim.real.containerd import IMAGE_REF, ContainerdLayout, LocalContainerd, config_toml
from nodesync_sim.real.namespace import MountNamespace

CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CONTAINERD_ROOT = "/var/lib/containerd"
CNI_BIN_DIR = "/usr/lib/cni"
LOOPBACK_CNI = {"cniVersion": "0.4.0", "name": "lo", "plugins": [{"type": "loopback"}]}
"""Only ``loopback``: the node turns Ready and host-network pods run; pods on the pod network
fail ``FailedCreatePodSandBox`` (a broken network)."""


class NodeContainerd(LocalContainerd):
    """A :class:`LocalContainerd` inside a node's namespace, at the paths a real node uses."""

    def __init__(
        self,
        namespace: MountNamespace,
        cgroup_root: str,
        base_dir: Path,
        bin_dir: str | None = None,
        cni: Mapping[str, object] = LOOPBACK_CNI,
    ) -> None:
        super().__init__(IMAGE_REF, str(base_dir), bin_dir)
        self.namespace = namespace
        self._cgroup_root = cgroup_root
        self._cni = cni

    @property
    def socket_path(self) -> str:
        """The socket as the machine reaches it (through the namespace's root)."""
        return self.namespace.path(CONTAINERD_SOCKET)

    @property
    def cgroup_root(self) -> str:
        return self._cgroup_root

    @property
    def cni_conf_dir(self) -> Path:
        return self.directory / "net.d"

    def _config(self) -> str:
        self.cni_conf_dir.mkdir(exist_ok=True)
        (self.cni_conf_dir / "10-pods.conflist").write_text(json.dumps(self._cni))
        layout = ContainerdLayout(
            root=CONTAINERD_ROOT,
            state="/run/containerd",
            socket=CONTAINERD_SOCKET,
            ttrpc_socket=CONTAINERD_SOCKET + ".ttrpc",
            opt=f"{CONTAINERD_ROOT}/opt",
            cni_bin_dir=CNI_BIN_DIR,
            cni_conf_dir=str(self.cni_conf_dir),
            # pod network namespaces in the tmpfs, not in the machine's /var/run/netns
            cri_options=("netns_mounts_under_state_dir = true",),
        )
        return config_toml(layout, IMAGE_REF)

    def _command(self) -> list[str]:
        return [*self.namespace.command(), *super()._command()]

    def _remember_shim_sockets(self) -> None:
        """Shim sockets are in the namespace's tmpfs: they go with it."""

    def _own_shim_pids(self) -> list[int]:
        """The shims in this node's namespace (every node's shims name the same socket)."""
        found = []
        for pid in self.namespace.processes():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().startswith("containerd-shim"):
                    found.append(pid)
        return found
