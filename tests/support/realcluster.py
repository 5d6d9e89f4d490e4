"""pytest plugin: a real Kubernetes cluster (nodesync_sim.real) and the whole nodesync chain on it,
for the tests marked ``realcluster`` (tests/realcluster/).

Fixture ``realchain`` (session): one :class:`RealChain`, started once and reused by every test:

- the control plane (etcd, kube-apiserver with the Node and RBAC authorizers and NodeRestriction,
  kube-controller-manager with per-controller service accounts, kube-scheduler);
- the NodeRollback CRD and the shipped RBAC (deploy/base's agent and controller roles and the
  delete-nodes component), applied by admin; the agent and controller authenticate as their
  service accounts, with exactly those permissions;
- a ``nodesync controller`` process (python -m exporter controller);
- a real Alertmanager with the shipped route (deploy/alertmanager/alertmanager.yml) delivering to
  the controller's webhook, and a real Prometheus with the shipped rules (rules/), both copies
  changed only through the documented overrides (nodesync_sim.fake.scaleout.overrides: thresholds,
  ``for:`` and the route's timers);
- real nodes joining during a test (:meth:`RealChain.join`, a wave: each a kubelet with its own
  containerd in its own mount namespace, and a ``nodesync agent`` process in that namespace
  reading the node's containerd socket, kubelet root and healthz as the DaemonSet would), and
  leaving again (:meth:`RealChain.leave`). A test that does not break a node may leave it for the
  next one (:meth:`RealChain.healthy_node`); a broken node is removed. The kept node's agent
  judges drift after the shipped grace, and the controller must never write that node: the
  session fails at its end if it did.

Tests marked ``node_containerd_releases`` that take the ``containerd_release`` fixture run once
per containerd release a node of kubelet 1.20 can use: the machine's (1.6) and 1.7.x unpacked by
scripts/setup-containerd (:func:`node_releases`; 2.x no longer serves CRI v1alpha2, the only CRI
version kubelet 1.20 speaks). They pass ``containerd_bin_dir=containerd_release.bin_dir`` to
:meth:`RealChain.join`.

A failed test's report carries what the controller logged while it ran (section
``nodesync-controller log``): its decisions and steps are what a failure is read from.

A missing binary fails the test with one line naming scripts/setup-kube-apiserver (never skips
it). At the end of the session everything is stopped by PID and removed, and checked to be gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.demo.chain import SHIPPED_ALERTMANAGER, SHIPPED_RULES
from nodesync_sim.fake.scaleout.overrides import alertmanager_config, rewrite_rules
from nodesync_sim.fake.scaleout.scenario import AlertmanagerSpec, RuleOverrides
from nodesync_sim.real.cluster import RealCluster
from nodesync_sim.real.containerd import missing_binaries
from nodesync_sim.real.control_plane import Binaries
from nodesync_sim.real.kube_apiserver import AGENT, CONTROLLER, LocalKubeAPIServer
from nodesync_sim.real.node import RealNode
from nodesync_sim.real.node_containerd import CNI_BIN_DIR
from nodesync_sim.real.process import ChildProcess, free_port
from nodesync_sim.real.prometheus import LocalAlertmanager, LocalPrometheus
from nodesync_sim.real.removal import remove_tree
from tests.support.containerd import Release, releases
from tests.support.kubeapi import SETUP_SCRIPT, find_binaries, install_crd
from tests.support.realkube import (
    AGENT_RBAC,
    CONTROLLER_RBAC,
    DELETE_NODES_RBAC,
    apply_rbac,
    wait_allowed,
)

WAVE_LABEL = "nodesync.test/wave"
CONTROLLER_JOB = "nodesync-controller"
AGENT_JOB = "nodesync-agent"
NODE_MONITOR_GRACE_PERIOD = "20s"  # the controller-manager's, and the controller's guard
START_TIMEOUT = 60.0

#: Timers of the shipped rules and route, shortened for a test (docs/e2e.md says why each).
RULES = RuleOverrides(
    thresholds={
        # Above a real join's NotReady at registration (Ready 2-4 s later, both times in whole
        # seconds) with room for a busy machine; below the grace period, so a silent kubelet's
        # node is past it the moment the controller-manager marks it Unknown.
        "node_not_ready_threshold_seconds": 15,
        "lease_stale_threshold_seconds": 30,  # above the grace period
        "pod_pending_threshold_seconds": 20,
        "cri_down_threshold_seconds": 5,
        "drift_threshold_seconds": 10,
    },
    for_all=3.0,
    keep_firing_for_all=10.0,
)
ALERTMANAGER = AlertmanagerSpec(group_wait=1.0, group_interval=1.0, repeat_interval=5.0)
#: The agent's flags on a real node: it syncs every second, judges drift after 10 s.
AGENT_ARGS = (
    "--sync.period=1s",
    "--cri.timeout=1s",
    "--apiserver.initial-jitter=0s",
    "--drift.grace-period=10s",
    "--stats.period=0s",
    "--log.level=info",
)
#: The shipped drift grace: kubelet's garbage collection (every minute) gets its time to remove
#: a deleted pod's stopped sandbox before the agent calls it an orphan. A node whose pods are
#: deleted while it stays (the kept healthy node, a node whose pods are evicted) runs with it:
#: with the chain's 10 s, nodesync would clean those sandboxes up under the next test's feet.
SHIPPED_DRIFT_GRACE = "--drift.grace-period=60s"
CONTROLLER_ARGS = (
    f"--wave.label={WAVE_LABEL}",
    "--rollback.delete-nodes=true",
    "--guard.max-rollback-fraction=1",
    f"--guard.node-monitor-grace-period={NODE_MONITOR_GRACE_PERIOD}",
    "--apiserver.qps=100",
    "--apiserver.burst=100",
    "--log.level=info",
)


def node_releases() -> tuple[Release, ...]:
    """The containerd releases a real node runs on: every tested one but 2.x, which no longer
    serves CRI v1alpha2 (kubelet 1.20 speaks nothing else)."""
    return tuple(r for r in releases() if not r.name.startswith("2."))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "containerd_release" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "node_containerd_releases"
    ):
        found = node_releases()
        metafunc.parametrize("containerd_release", found, ids=[r.id for r in found], indirect=True)


def kube_binaries() -> Binaries:
    """The Kubernetes binaries; fails the running test when any is missing."""
    result = subprocess.run(
        [str(SETUP_SCRIPT), "--print-dir", "--no-build"],
        capture_output=True,
        text=True,
        check=False,
    )
    directory = result.stdout.strip()
    if result.returncode != 0 or not directory:
        reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.fail(f"no Kubernetes binaries: {reason}; run scripts/setup-kube-apiserver",
                    pytrace=False)  # fmt: skip
    try:
        return Binaries.in_directory(Path(directory))
    except RuntimeError as error:
        pytest.fail(f"{error}; run scripts/setup-kube-apiserver", pytrace=False)


def require_node_binaries() -> None:
    missing = missing_binaries()
    if not Path(CNI_BIN_DIR, "loopback").is_file():
        missing.append(f"{CNI_BIN_DIR}/loopback (Debian package containernetworking-plugins)")
    missing += [name for name in ("unshare", "nsenter", "openssl") if shutil.which(name) is None]
    if missing:
        pytest.fail("a real node needs: " + ", ".join(missing), pytrace=False)


def _http_status(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2.0) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


class Agent:
    """The ``nodesync agent`` process of one real node, in the node's namespace."""

    def __init__(self, node: RealNode, kubeconfig: Path, args: Sequence[str] = ()) -> None:
        self.node = node
        on_network = node.spec.addresses is not None
        replaced = {arg.split("=", 1)[0] for arg in args}
        self.port = free_port()
        # On a network of its own the agent listens there, the machine reaches it by the
        # node's name; else on the machine's loopback.
        self.host = node.name if on_network else "127.0.0.1"
        if on_network:
            node.expose(self.port)
        self.process = node.spawn(
            "nodesync-agent",
            [
                *(sys.executable, "-m", "exporter", "agent"),
                f"--node.name={node.name}",
                f"--kubeconfig={kubeconfig}",
                f"--kubelet.healthz-url={node.healthz_url}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *(arg for arg in AGENT_ARGS if arg.split("=", 1)[0] not in replaced),
                *args,
            ],
            env=dict(os.environ),
        )

    @property
    def address(self) -> str:
        """Where Prometheus and the tests reach the agent."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def wait_ready(self) -> None:
        self.process.wait_until(
            lambda: _http_status(self.url + "/metrics") == 200,
            timeout=START_TIMEOUT,
            what="serving /metrics",
        )

    def metrics(self) -> str:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url + "/metrics", timeout=5.0) as answer:
            return str(answer.read().decode())


class RealChain:
    """See the module docstring."""

    def __init__(self, binaries: Binaries, etcd: str) -> None:
        self.cluster = RealCluster(binaries, etcd)
        self.workdir = Path(tempfile.mkdtemp(prefix="nodesync-realchain-"))
        self.hook_token = os.urandom(16).hex()
        self.controller: ChildProcess | None = None
        self.controller_port = 0
        self.prometheus: LocalPrometheus | None = None
        self.alertmanager: LocalAlertmanager | None = None
        self.agents: dict[str, Agent] = {}
        self._healthy: list[RealNode] = []
        self._kept: set[str] = set()  # every node ever kept, by name
        self._waves = 0

    @property
    def api(self) -> LocalKubeAPIServer:
        return self.cluster.plane.apiserver

    @property
    def controller_url(self) -> str:
        return f"http://127.0.0.1:{self.controller_port}"

    # -- start

    def start(self) -> None:
        self.cluster.start()
        api = self.api
        install_crd(api)
        for manifest in (AGENT_RBAC, CONTROLLER_RBAC, DELETE_NODES_RBAC):
            apply_rbac(api, manifest)
        wait_allowed(api, CONTROLLER, "/apis/nodesync.io/v1alpha1/noderollbacks")
        wait_allowed(api, AGENT, "/api/v1/pods")
        self._start_controller()
        self._start_alerting()

    def _start_controller(self) -> None:
        token_file = self.workdir / "hook-token"
        token_file.write_text(self.hook_token)
        token_file.chmod(0o600)
        self.controller_port = free_port()
        self.controller = ChildProcess(
            [
                *(sys.executable, "-m", "exporter", "controller"),
                f"--kubeconfig={self.api.kubeconfig(CONTROLLER)}",
                f"--web.listen-address=127.0.0.1:{self.controller_port}",
                f"--journal.path={self.workdir / 'journal.db'}",
                f"--webhook.token-file={token_file}",
                *CONTROLLER_ARGS,
            ],
            log_path=self.workdir / "controller.log",
            name="nodesync-controller",
        )
        self.controller.start()
        self.controller.wait_until(
            lambda: _http_status(self.controller_url + "/readyz") == 200,
            timeout=START_TIMEOUT,
            what="ready",
        )

    def _start_alerting(self) -> None:
        config = alertmanager_config(
            SHIPPED_ALERTMANAGER,
            ALERTMANAGER,
            hook_url=f"{self.controller_url}/alerts",
            token_file=self.workdir / "hook-token",
        )
        self.alertmanager = LocalAlertmanager(config, base_dir=self.workdir)
        self.alertmanager.start()
        rule_files = rewrite_rules(
            sorted(SHIPPED_RULES.glob("*.yml")), RULES, self.workdir / "rules"
        )
        self.prometheus = LocalPrometheus(
            self._scrape_configs(),
            rule_files,
            alertmanager_urls=[self.alertmanager.url],
            base_dir=self.workdir,
        )
        self.prometheus.start()

    def _scrape_configs(self) -> list[dict[str, Any]]:
        configs: list[dict[str, Any]] = [
            {
                "job_name": CONTROLLER_JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{self.controller_port}"]}],
            }
        ]
        if self.agents:
            configs.append(
                {
                    "job_name": AGENT_JOB,
                    "static_configs": [
                        {"targets": [agent.address], "labels": {"node": name}}
                        for name, agent in sorted(self.agents.items())
                    ],
                }
            )
        return configs

    def _reload_targets(self) -> None:
        prometheus = self.prom
        prometheus.config["scrape_configs"] = self._scrape_configs()
        prometheus.reload()

    @property
    def prom(self) -> LocalPrometheus:
        assert self.prometheus is not None
        return self.prometheus

    @property
    def am(self) -> LocalAlertmanager:
        assert self.alertmanager is not None
        return self.alertmanager

    # -- nodes

    def join(
        self, *, wave: str | None = None, agent_args: Sequence[str] = (), **node_args: Any
    ) -> RealNode:
        """A node joins (a wave of its own unless ``wave``), with its agent (``agent_args``
        replace the same flags of AGENT_ARGS); returns once its Node is Ready and the agent
        serves its metrics (Prometheus scrapes it from now on)."""
        if wave is None:
            self._waves += 1
            wave = f"wave-{self._waves}"
        node = self.cluster.add_node({WAVE_LABEL: wave}, **node_args)
        agent = Agent(node, self.api.kubeconfig(AGENT), agent_args)
        self.agents[node.name] = agent
        agent.wait_ready()
        self._reload_targets()
        return node

    def leave(self, node: RealNode) -> None:
        """The node leaves: its agent, kubelet, containerd and every trace of it go."""
        self.agents.pop(node.name, None)
        if node in self._healthy:
            self._healthy.remove(node)
        self._reload_targets()
        self.cluster.remove_node(node)

    def keep(self, node: RealNode) -> None:
        """``node`` is healthy and stays for the next tests (:meth:`healthy_node`)."""
        if node not in self._healthy:
            self._healthy.append(node)
        self._kept.add(node.name)

    def healthy_node(self) -> RealNode:
        """A Ready node a test may use without breaking it (joins one the first time, its
        agent with the shipped drift grace: other tests' pods are deleted on it)."""
        if not self._healthy:
            self.keep(self.join(agent_args=[SHIPPED_DRIFT_GRACE]))
        return self._healthy[0]

    def kept_node_writes(self) -> list[str]:
        """The controller's successful writes to a node that was kept healthy, from the audit
        log of the whole session."""
        controller = self.api.identities[CONTROLLER].user
        return [
            f"{e['requestReceivedTimestamp']} {e['verb']} {e['requestURI']} "
            f"{e.get('requestObject')}"
            for e in self.api.audit_events()
            if e.get("stage") == "ResponseComplete"
            and e["user"]["username"] == controller
            and e["verb"] in ("create", "update", "patch", "delete")
            and e.get("objectRef", {}).get("resource") == "nodes"
            and e["objectRef"].get("name") in self._kept
            and 200 <= e["responseStatus"]["code"] < 300
        ]

    def controller_log_size(self) -> int:
        """How many bytes the controller has logged so far."""
        try:
            return (self.workdir / "controller.log").stat().st_size
        except FileNotFoundError:
            return 0

    def controller_log_since(self, offset: int) -> str:
        """What the controller logged from byte ``offset`` on."""
        try:
            with (self.workdir / "controller.log").open("rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    # -- end

    def cleanup(self) -> None:
        for service in (self.prometheus, self.alertmanager):
            if service is not None:
                service.cleanup()
        if self.controller is not None:
            self.controller.stop()
        self.cluster.cleanup()
        remove_tree(self.workdir)

    def leftovers(self) -> list[str]:
        found = self.cluster.leftovers()
        for service in (self.prometheus, self.alertmanager):
            if service is not None:
                found += service.leftovers()
        if self.controller is not None and self.controller.running:
            found.append(f"controller pid {self.controller.pid}")
        if self.workdir.exists():
            found.append(str(self.workdir))
        return found


CONTROLLER_LOG_AT = pytest.StashKey[int]()
#: At most this much of the controller's log goes into a failed test's report (its end).
CONTROLLER_LOG_SHOWN = 200_000


@pytest.fixture(autouse=True)
def _controller_log_at(request: pytest.FixtureRequest) -> None:
    """Where the controller's log stood when a test of the real chain began."""
    if "realchain" in request.fixturenames:
        chain: RealChain = request.getfixturevalue("realchain")
        request.node.stash[CONTROLLER_LOG_AT] = chain.controller_log_size()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test of the real chain: what the controller logged since it began."""
    report = yield
    chain = getattr(item, "funcargs", {}).get("realchain")
    if report.failed and isinstance(chain, RealChain) and CONTROLLER_LOG_AT in item.stash:
        text = chain.controller_log_since(item.stash[CONTROLLER_LOG_AT])
        report.sections.append(("nodesync-controller log", text[-CONTROLLER_LOG_SHOWN:]))
    return report


@pytest.fixture(scope="session")
def realchain() -> Iterator[RealChain]:
    """The session's real cluster with the nodesync chain (see the module docstring)."""
    binaries = kube_binaries()
    _, etcd = find_binaries()
    require_node_binaries()
    chain = RealChain(binaries, etcd)
    written: list[str] = []
    try:
        chain.start()
        yield chain
        written = chain.kept_node_writes()
    finally:
        chain.cleanup()
    leftovers = chain.leftovers()
    assert not leftovers, f"the real cluster left things behind: {leftovers}"
    assert not written, f"the controller wrote a node kept healthy: {written}"
