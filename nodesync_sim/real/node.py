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
then shims and every process left in the cgroups), the namespace's holder; then the cgroups and,
once the namespace is gone, the directory, if the node made it
(:func:`~nodesync_sim.real.removal.remove_tree`). :meth:`RealNode.leftovers` lists what is
still there.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodesync_sim.real.containerd import IMAGE_REF, _all_threads_stopped, _pid_alive
from nodesync_sim.real.forward import start_relay
from nodesync_sim.real.namespace import MountNamespace
from nodesync_sim.real.network import ClusterNetwork, NodeAddresses, bridge_cni, kube_proxy_argv
from nodesync_sim.real.node_containerd import (
    CONTAINERD_SOCKET,
    LOOPBACK_CNI,
    NodeContainerd,
)
from nodesync_sim.real.pki import ClientCA, write_kubeconfig
from nodesync_sim.real.process import ChildProcess, free_port
from nodesync_sim.real.removal import remove_tree

KUBELET_ROOT = "/var/lib/kubelet"
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248

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
    addresses: NodeAddresses | None = None
    """Set: the node has a network namespace of its own on the cluster's network
    (nodesync_sim.real.network), its pods get addresses from the bridge CNI plugin, kubelet
    serves on the standard ports there, and relays make the API server reachable inside at the
    same URL and kubelet reachable outside at the node's name."""


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
        network: ClusterNetwork | None = None,
        kube_proxy: str | None = None,
    ) -> None:
        if (spec.addresses is None) != (network is None):
            raise NodeError("a node has addresses exactly when it is on a cluster network")
        self.spec = spec
        self.name = spec.name
        self.kubelet_binary = kubelet
        self.kube_proxy_binary = kube_proxy
        self.server_url = server_url
        self.server_ca = server_ca
        self.client_ca = client_ca
        self.directory = base_dir / f"node-{spec.name}"
        self.cgroup_root = f"/nodesync-node-{secrets.token_hex(4)}"
        self.network = network
        self.namespace = MountNamespace(self.directory / "ns", network=network is not None)
        cni = bridge_cni(spec.addresses) if spec.addresses is not None else LOOPBACK_CNI
        self.containerd = NodeContainerd(
            self.namespace, self.cgroup_root, self.directory, spec.containerd_bin_dir, cni
        )
        self.kubelet: ChildProcess | None = None
        self.kubelet_port = 0
        self.healthz_port = 0
        self._processes: list[ChildProcess] = []
        self._relays: list[ChildProcess] = []
        self._made_directory = False

    # -- paths, as the machine sees them

    @property
    def kubelet_root(self) -> Path:
        return self.directory / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.directory / "log" / "pods"

    @property
    def healthz_url(self) -> str:
        """kubelet's healthz as a process of the node reaches it."""
        host = "127.0.0.1" if self.spec.addresses is not None else self.name
        return f"http://{host}:{self.healthz_port}/healthz"

    @property
    def cri_endpoint(self) -> str:
        """The node's containerd as the machine reaches it."""
        return self.containerd.endpoint

    # -- lifecycle

    def start(self) -> None:
        """The namespace, cgroups and containerd, then kubelet. Returns once kubelet runs (the
        caller waits for the Node). On a failure everything is removed again."""
        try:
            self.directory.mkdir(parents=True)  # fresh: fails when it exists
            self._made_directory = True
            self._make_namespace()
            self._join_network()
            self._make_cgroups()
            self.containerd.start()
            self.start_kubelet()
            if self.spec.addresses is not None:
                self.start_kube_proxy()
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

    def _join_network(self) -> None:
        """On a cluster network: the veth and routes, then the relay that carries the API
        server's port into the node and kubelet's out to the node's name."""
        if self.network is None or self.spec.addresses is None:
            return
        self.network.attach(self.namespace.pid, self.spec.addresses)
        api_port = int(self.server_url.rsplit(":", 1)[1])
        self.kubelet_port, self.healthz_port = KUBELET_PORT, KUBELET_HEALTHZ_PORT
        self.expose(self.kubelet_port)
        self.relay(
            f"{self.namespace.netns},127.0.0.1:{api_port}=/proc/self/ns/net,127.0.0.1:{api_port}"
        )

    def expose(self, port: int) -> None:
        """A port the node listens on, reachable from the machine at ``<name>:<port>``."""
        self.relay(f"/proc/self/ns/net,{self.name}:{port}={self.namespace.netns},127.0.0.1:{port}")

    def command(self) -> list[str]:
        """The argv prefix that runs a program in the node's namespaces, as a host-network pod
        of the node (a monitoring stack, say) runs there."""
        return self.namespace.command()

    def publish(self, port: int) -> str:
        """:meth:`expose` ``port``; the address the machine reaches it at."""
        self.expose(port)
        return f"{self.name}:{port}"

    def relay(self, *relays: str) -> None:
        """Start a relay between the node's network and the machine's (forward.py's format);
        it is stopped by :meth:`cleanup`."""
        log = self.directory / f"relay-{len(self._relays)}.log"
        self._relays.append(start_relay(relays, log, name=f"relay@{self.name}"))

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
        kubeconfig = self._kubeconfig(
            files / "kubeconfig", f"kubelet-{self.name}", f"system:node:{self.name}", "system:nodes"
        )
        on_network = self.spec.addresses is not None
        if not on_network:
            self.kubelet_port = free_port(self.name)
            self.healthz_port = free_port(self.name)
        config = files / "config.json"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "address": "0.0.0.0" if on_network else self.name,
                    "port": self.kubelet_port,
                    "readOnlyPort": 0,
                    "healthzBindAddress": "127.0.0.1" if on_network else self.name,
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

    def _kubeconfig(self, path: Path, file_name: str, user: str, *groups: str) -> Path:
        cert, key = self.client_ca.issue(file_name, user, *groups)
        return write_kubeconfig(path, self.server_url, self.server_ca, cert, key)

    def start_kube_proxy(self) -> None:
        """kube-proxy on the node's own network: Services' addresses work there as on a real
        node (see :func:`kube_proxy_argv` for what it may write)."""
        if self.kube_proxy_binary is None or self.spec.addresses is None:
            raise NodeError(f"{self.name} has no network of its own or no kube-proxy binary")
        files = self.directory / "kubelet-files"
        kubeconfig = self._kubeconfig(
            files / "kube-proxy.kubeconfig", f"kube-proxy-{self.name}", "system:kube-proxy"
        )
        self.spawn("kube-proxy", kube_proxy_argv(self.kube_proxy_binary, kubeconfig, self.name))

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
        if self.spec.addresses is not None:
            argv.append(f"--node-ip={self.spec.addresses.address}")
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
        for proc in self._relays:
            proc.stop(_STOP_TIMEOUT)
        if self.network is not None and self.spec.addresses is not None:
            self.network.detach(self.spec.addresses)
        with contextlib.suppress(FileNotFoundError):
            self.containerd.cleanup()
        self.namespace.stop()
        _wait(lambda: not self.namespace.processes(), _STOP_TIMEOUT)
        for pid in self.namespace.processes():  # ours: nothing else enters the namespace
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait(lambda: not [p for p in self.namespace.processes() if _pid_alive(p)], 5.0)
        released = _wait(self.namespace.release, 5.0)
        self._remove_cgroups()
        # Only the directory this node made, and only once its namespace is gone: what is
        # mounted into it from inside the namespace (/var/lib/kubelet, /var/lib/containerd, the
        # overlays) cannot be seen from here. Otherwise leftovers() names it.
        if self._made_directory and released:
            remove_tree(self.directory)

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
        found = [f"{p.name} pid {p.pid}" for p in [*self._processes, *self._relays] if p.running]
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
