"""A real node: its own containerd and a kubelet, in a private mount namespace.

Inside the namespace (nodesync_sim.real.namespace) the node looks like a real one to every process
in it, the shipped DaemonSet's hostPath mounts included: containerd's socket is
``/run/containerd/containerd.sock``, its root ``/var/lib/containerd``, kubelet's root
``/var/lib/kubelet``, its pod logs ``/var/log/pods``. Each of these is a directory of the node's
own (:attr:`RealNode.directory`), which the machine reads directly.

The kubelet joins with a client certificate (CN ``system:node:<name>``, O ``system:nodes``), is
named after a loopback address (the API server dials it there: ``kubectl logs/exec`` work),
serves on that address only, keeps its pods' cgroups under a cgroup root of its own (made in every
v1 hierarchy before it starts, removed with everything under it, the unified hierarchy included)
and never touches iptables (``makeIPTablesUtilChains: false``). Its network plugin is CNI with
only ``loopback``: the node turns Ready and host-network pods run; pods on the pod network fail
``FailedCreatePodSandBox`` (a broken network, on purpose).

Stopping is by PID: the processes started in the namespace, kubelet, containerd (its pods first,
then shims and every process left in the cgroups), the namespace's holder; then the cgroups and the
directory. :meth:`RealNode.leftovers` lists what is still there.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodesync_sim.real.containerd import (
    IMAGE_REF,
    ContainerdLayout,
    LocalContainerd,
    _all_threads_stopped,
    _pid_alive,
    config_toml,
)
from nodesync_sim.real.namespace import MountNamespace
from nodesync_sim.real.pki import ClientCA
from nodesync_sim.real.process import ChildProcess, free_port

CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CONTAINERD_ROOT = "/var/lib/containerd"
KUBELET_ROOT = "/var/lib/kubelet"
CNI_BIN_DIR = "/usr/lib/cni"
LOOPBACK_CNI = {"cniVersion": "0.4.0", "name": "lo", "plugins": [{"type": "loopback"}]}

_CGROUP_FS = Path("/sys/fs/cgroup")
_UNIFIED = "unified"
_STOP_TIMEOUT = 10.0


class NodeError(RuntimeError):
    """The node could not be set up."""


@dataclass(frozen=True)
class NodeSpec:
    """What makes a node differ from another."""

    name: str
    """A loopback address (127.0.0.x): the node's name, kubelet's address and the address the
    API server dials for logs and exec."""
    labels: Mapping[str, str] = field(default_factory=dict)
    node_status_update_frequency: str = "2s"
    runtime_request_timeout: str = "2m"
    containerd_bin_dir: str | None = None
    """Where the node's containerd, its shim and ctr come from (a release unpacked by
    scripts/setup-containerd); None: the machine's. kubelet 1.20 speaks CRI v1alpha2 only, which
    containerd 1.6 and 1.7 serve and 2.x no longer does."""


class NodeContainerd(LocalContainerd):
    """A :class:`LocalContainerd` inside a node's namespace, at the paths a real node uses."""

    def __init__(
        self,
        namespace: MountNamespace,
        cgroup_root: str,
        base_dir: Path,
        bin_dir: str | None = None,
    ) -> None:
        super().__init__(IMAGE_REF, str(base_dir), bin_dir)
        self.namespace = namespace
        self._cgroup_root = cgroup_root

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
        (self.cni_conf_dir / "10-loopback.conflist").write_text(json.dumps(LOOPBACK_CNI))
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


def _v1_hierarchies() -> list[Path]:
    return sorted(p for p in _CGROUP_FS.iterdir() if p.is_dir() and p.name != _UNIFIED)


class RealNode:
    """One node; :meth:`start` it (containerd, kubelet), :meth:`cleanup` it."""

    def __init__(
        self,
        spec: NodeSpec,
        *,
        kubelet: str,
        server_url: str,
        server_ca: Path,
        client_ca: ClientCA,
        base_dir: Path,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.kubelet_binary = kubelet
        self.server_url = server_url
        self.server_ca = server_ca
        self.client_ca = client_ca
        self.directory = base_dir / f"node-{spec.name}"
        self.cgroup_root = f"/nodesync-node-{secrets.token_hex(4)}"
        self.namespace = MountNamespace(self.directory / "ns")
        self.containerd = NodeContainerd(
            self.namespace, self.cgroup_root, self.directory, spec.containerd_bin_dir
        )
        self.kubelet: ChildProcess | None = None
        self.kubelet_port = 0
        self.healthz_port = 0
        self._processes: list[ChildProcess] = []

    # -- paths, as the machine sees them

    @property
    def kubelet_root(self) -> Path:
        return self.directory / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.directory / "log" / "pods"

    @property
    def healthz_url(self) -> str:
        return f"http://{self.name}:{self.healthz_port}/healthz"

    @property
    def cri_endpoint(self) -> str:
        """The node's containerd as the machine reaches it."""
        return self.containerd.endpoint

    # -- lifecycle

    def start(self) -> None:
        """The namespace, cgroups and containerd, then kubelet. Returns once kubelet runs (the
        caller waits for the Node). On a failure everything is removed again."""
        try:
            self.directory.mkdir(parents=True)
            self._make_namespace()
            self._make_cgroups()
            self.containerd.start()
            self.start_kubelet()
        except BaseException:
            self.cleanup()
            raise

    def _make_namespace(self) -> None:
        ns = self.namespace
        ns.start()
        ns.mask_sysctls()
        ns.tmpfs("/run/containerd")
        for parent, children in (
            ("/var/lib", {"kubelet": self.kubelet_root, "containerd": self.directory / "crd"}),
            ("/var/log", {"pods": self.pod_logs, "containers": self.directory / "log" / "ctr"}),
        ):
            ns.overlay(parent)
            for child, source in children.items():
                source.mkdir(parents=True, exist_ok=True)
                ns.run("mkdir", "-p", f"{parent}/{child}")
                ns.bind(source, f"{parent}/{child}")

    def _make_cgroups(self) -> None:
        relative = self.cgroup_root.lstrip("/")
        for hierarchy in _v1_hierarchies():
            path = hierarchy / relative
            path.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (path / name).write_text((hierarchy / name).read_text())

    def _write_kubelet_files(self) -> tuple[Path, Path]:
        files = self.directory / "kubelet-files"
        files.mkdir(exist_ok=True)
        cert, key = self.client_ca.issue(
            f"kubelet-{self.name}", f"system:node:{self.name}", "system:nodes"
        )
        kubeconfig = files / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "cluster",
                            "cluster": {
                                "server": self.server_url,
                                "certificate-authority": str(self.server_ca),
                            },
                        }
                    ],
                    "users": [
                        {
                            "name": "kubelet",
                            "user": {"client-certificate": str(cert), "client-key": str(key)},
                        }
                    ],
                    "contexts": [
                        {"name": "kubelet", "context": {"cluster": "cluster", "user": "kubelet"}}
                    ],
                    "current-context": "kubelet",
                }
            )
        )
        self.kubelet_port = free_port(self.name)
        self.healthz_port = free_port(self.name)
        config = files / "config.json"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "address": self.name,
                    "port": self.kubelet_port,
                    "readOnlyPort": 0,
                    "healthzBindAddress": self.name,
                    "healthzPort": self.healthz_port,
                    "authentication": {
                        "anonymous": {"enabled": False},
                        "webhook": {"enabled": True},
                        "x509": {"clientCAFile": str(self.client_ca.cert)},
                    },
                    "authorization": {"mode": "Webhook"},
                    "cgroupDriver": "cgroupfs",
                    "cgroupRoot": self.cgroup_root,
                    "failSwapOn": False,
                    "makeIPTablesUtilChains": False,
                    "nodeStatusUpdateFrequency": self.spec.node_status_update_frequency,
                    "runtimeRequestTimeout": self.spec.runtime_request_timeout,
                    "volumePluginDir": f"{KUBELET_ROOT}/volume-plugins",
                }
            )
        )
        return kubeconfig, config

    def start_kubelet(self) -> None:
        """Start kubelet (again: a restart keeps its files and its certificate)."""
        if self.kubelet is not None and self.kubelet.running:
            raise NodeError(f"kubelet of {self.name} is already running")
        files = self.directory / "kubelet-files"
        if not (files / "config.json").exists():
            self._write_kubelet_files()
        argv = [
            self.kubelet_binary,
            f"--config={files / 'config.json'}",
            f"--kubeconfig={files / 'kubeconfig'}",
            "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{CONTAINERD_SOCKET}",
            f"--containerd={CONTAINERD_SOCKET}",  # cadvisor's
            f"--root-dir={KUBELET_ROOT}",
            f"--hostname-override={self.name}",
            f"--pod-infra-container-image={IMAGE_REF}",
        ]
        if self.spec.labels:
            labels = ",".join(f"{k}={v}" for k, v in sorted(self.spec.labels.items()))
            argv.append(f"--node-labels={labels}")
        self.kubelet = self.spawn("kubelet", argv)

    def spawn(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> ChildProcess:
        """Start a process in the node's namespace (as a pod of the node would see it); it is
        stopped by :meth:`cleanup`."""
        proc = ChildProcess(
            [*self.namespace.command(), *argv],
            log_path=self.directory / f"{name}.log",
            name=f"{name}@{self.name}",
            env=env,
        )
        proc.start()
        self._processes.append(proc)
        return proc

    # -- faults

    def freeze_kubelet(self) -> None:
        """SIGSTOP kubelet: it stops posting status and renewing its Lease."""
        _freeze(self._kubelet())

    def thaw_kubelet(self) -> None:
        self._kubelet().signal(signal.SIGCONT)

    def stop_kubelet(self) -> None:
        kubelet = self._kubelet()
        kubelet.signal(signal.SIGCONT)
        kubelet.stop(_STOP_TIMEOUT)

    def restart_kubelet(self) -> None:
        self.stop_kubelet()
        self.start_kubelet()

    def _kubelet(self) -> ChildProcess:
        if self.kubelet is None:
            raise NodeError(f"kubelet of {self.name} has not started")
        return self.kubelet

    # -- teardown

    def cleanup(self) -> None:
        """Remove every trace of the node. Safe to repeat."""
        for proc in reversed(self._processes):
            proc.signal(signal.SIGCONT)
            proc.stop(_STOP_TIMEOUT)
        with contextlib.suppress(FileNotFoundError):
            self.containerd.cleanup()
        self.namespace.stop()
        _wait(lambda: not self.namespace.processes(), _STOP_TIMEOUT)
        for pid in self.namespace.processes():  # ours: nothing else enters the namespace
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait(lambda: not [p for p in self.namespace.processes() if _pid_alive(p)], 5.0)
        _wait(self.namespace.release, 5.0)
        self._remove_cgroups()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _cgroup_dirs(self) -> list[Path]:
        relative = self.cgroup_root.lstrip("/")
        found: list[Path] = []
        for hierarchy in _CGROUP_FS.iterdir():
            top = hierarchy / relative
            if top.is_dir():
                found += [Path(d) for d, _, _ in os.walk(top)]
        return sorted(found, key=lambda p: len(p.parts), reverse=True)

    def _remove_cgroups(self) -> None:
        for cgroup in self._cgroup_dirs():
            with contextlib.suppress(OSError):
                cgroup.rmdir()

    def leftovers(self) -> list[str]:
        found = [f"{p.name} pid {p.pid}" for p in self._processes if p.running]
        found += [f"process {pid} in the namespace" for pid in self.namespace.processes()]
        found += self.containerd.leftovers()
        found += [f"cgroup {path}" for path in self._cgroup_dirs()]
        if self.directory.exists():
            found.append(f"directory {self.directory}")
        return found


def _freeze(proc: ChildProcess) -> None:
    pid = proc.pid
    if pid is None:
        raise NodeError(f"{proc.name} is not running")
    proc.signal(signal.SIGSTOP)
    if not _wait(lambda: _all_threads_stopped(pid), _STOP_TIMEOUT):
        raise NodeError(f"{proc.name} (pid {pid}) did not stop on SIGSTOP")


def _wait(condition: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
