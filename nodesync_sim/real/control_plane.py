"""A real control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler.

The API server is :class:`~nodesync_sim.real.kube_apiserver.LocalKubeAPIServer` with the Node and
RBAC authorizers, the NodeRestriction admission plugin, a client CA made with openssl (kubelets
join with certificates it signs) and a certificate of its own for talking to kubelets
(``kubectl logs/exec``). The controller-manager runs every default controller, each under its own
service account (``--use-service-account-credentials``: with shared credentials RBAC refuses the
node-lifecycle controller its Node updates, and nothing is ever scheduled); its node monitor's
timers come from :class:`ControlPlaneTimers` and reach it only as flags.

    plane = ControlPlane(Binaries.in_directory(path), etcd="/usr/bin/etcd")
    plane.start()       # ~8 s
    ...
    plane.cleanup()     # every process stopped by PID, every file removed
"""

from __future__ import annotations

import functools
import ssl
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from nodesync_sim.real.kube_apiserver import ADMIN, APIServerOptions, LocalKubeAPIServer
from nodesync_sim.real.pki import ClientCA
from nodesync_sim.real.process import ChildProcess, free_port
from nodesync_sim.real.removal import remove_tree

START_TIMEOUT = 90.0
_POLL = 0.1


class ControlPlaneError(RuntimeError):
    """A control-plane process did not start or did not become healthy in time."""


@dataclass(frozen=True)
class Binaries:
    """Paths of the Kubernetes binaries (built by scripts/setup-kube-apiserver)."""

    apiserver: str
    controller_manager: str
    scheduler: str
    kubelet: str
    kube_proxy: str

    @classmethod
    def in_directory(cls, directory: Path) -> Binaries:
        found = cls(
            apiserver=str(directory / "kube-apiserver"),
            controller_manager=str(directory / "kube-controller-manager"),
            scheduler=str(directory / "kube-scheduler"),
            kubelet=str(directory / "kubelet"),
            kube_proxy=str(directory / "kube-proxy"),
        )
        missing = [p for p in vars(found).values() if not Path(p).is_file()]
        if missing:
            raise ControlPlaneError(f"missing Kubernetes binaries: {', '.join(missing)}")
        return found


@dataclass(frozen=True)
class ControlPlaneTimers:
    """The node monitor's timers (kube-controller-manager flags)."""

    node_monitor_period: str = "2s"
    node_monitor_grace_period: str = "20s"
    """40 s by default in 1.20; a kubelet renews its Lease every 10 s, so 20 s still lets one
    renewal be late on two busy cores without a healthy node turning Unknown."""


class ControlPlane:
    """See the module docstring."""

    def __init__(
        self,
        binaries: Binaries,
        etcd: str,
        timers: ControlPlaneTimers | None = None,
        base_dir: str | None = None,
        *,
        service_accounts: bool = False,
    ) -> None:
        """``service_accounts``: pods get their service account's token, as in any cluster
        (the controller-manager's token controller writes them); off, a pod can be created the
        moment its namespace is, before its ``default`` service account exists."""
        self.binaries = binaries
        self.timers = timers or ControlPlaneTimers()
        self.dir = Path(tempfile.mkdtemp(prefix="nodesync-cluster-", dir=base_dir))
        self.ca = ClientCA(self.dir / "pki")
        self.apiserver = LocalKubeAPIServer(
            binaries.apiserver,
            etcd,
            APIServerOptions(
                authorization_modes=("Node", "RBAC"),
                admission_plugins=("NodeRestriction",),
                client_ca_file=self.ca.cert,
                kubelet_client_cert=(
                    self.ca.directory / "apiserver-kubelet-client.crt",
                    self.ca.directory / "apiserver-kubelet-client.key",
                ),
                allow_privileged=True,
                service_accounts=service_accounts,
            ),
            directory=self.dir / "apiserver",
        )
        self.controller_manager: ChildProcess | None = None
        self.scheduler: ChildProcess | None = None
        self._ports: dict[str, int] = {}
        self.last_start_seconds = 0.0

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (group system:masters), for kubectl and the control plane."""
        return self.apiserver.kubeconfig(ADMIN)

    def start(self) -> None:
        """Certificates, etcd and kube-apiserver, then the controller-manager and scheduler;
        waits until both answer /healthz. On a failure everything started is stopped."""
        started = time.monotonic()
        try:
            self.ca.create()
            self.ca.issue(
                "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"
            )
            self.apiserver.dir.mkdir()
            self.apiserver.start()
            self.controller_manager = self._spawn(
                "kube-controller-manager", self._controller_manager_argv()
            )
            self.scheduler = self._spawn("kube-scheduler", self._scheduler_argv())
            for proc in (self.controller_manager, self.scheduler):
                proc.wait_until(
                    functools.partial(_healthz, self._ports[proc.name]),
                    timeout=START_TIMEOUT,
                    what="healthy",
                )
        except BaseException:
            self.cleanup()
            raise
        self.last_start_seconds = time.monotonic() - started

    def _spawn(self, name: str, argv: list[str]) -> ChildProcess:
        proc = ChildProcess(argv, log_path=self.dir / f"{name}.log", name=name)
        proc.start()
        return proc

    def _common_argv(self, name: str) -> list[str]:
        port = self._ports[name] = free_port()
        cert_dir = self.dir / f"{name}-certs"
        cert_dir.mkdir(exist_ok=True)
        return [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--port=0",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={cert_dir}",  # never the default /var/run/kubernetes
            "--profiling=false",
        ]

    @property
    def flexvolume_dir(self) -> Path:
        return self.dir / "flexvolume"

    def _controller_manager_argv(self) -> list[str]:
        return [
            self.binaries.controller_manager,
            *self._common_argv("kube-controller-manager"),
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.apiserver.service_account_key}",
            f"--root-ca-file={self.apiserver.ca_file}",
            f"--node-monitor-period={self.timers.node_monitor_period}",
            f"--node-monitor-grace-period={self.timers.node_monitor_grace_period}",
            # Its FlexVolume prober makes this directory: never the machine's default,
            # /usr/libexec/kubernetes/kubelet-plugins/volume/exec.
            f"--flex-volume-plugin-dir={self.flexvolume_dir}",
        ]

    def _scheduler_argv(self) -> list[str]:
        return [self.binaries.scheduler, *self._common_argv("kube-scheduler")]

    def cleanup(self) -> None:
        """Stop the processes by PID (scheduler, controller-manager, API server, etcd) and
        remove the directory. Safe to repeat."""
        for proc in (self.scheduler, self.controller_manager):
            if proc is not None:
                proc.stop()
        self.apiserver.cleanup()
        remove_tree(self.dir)

    def leftovers(self) -> list[str]:
        found = self.apiserver.leftovers()
        found += [
            f"{proc.name} pid {proc.pid}"
            for proc in (self.scheduler, self.controller_manager)
            if proc is not None and proc.running
        ]
        if self.dir.exists():
            found.append(str(self.dir))
        return found


def _healthz(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a self-signed serving certificate, on loopback
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(f"https://127.0.0.1:{port}/healthz", timeout=2.0) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
