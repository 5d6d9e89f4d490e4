"""The deployed controller at work, whichever way it was installed: Prometheus and Alertmanager
find the release as its ServiceMonitors and rules say, a new node fails, the controller rolls it
back, and the doc's upgrade to the next release runs while that rollback waits at its cleanup
step; the new controller finishes it. The audit log shows each effect once and nothing refused.

How long the controller waits for a stopped agent decides how the rollback ends: the kustomize
release waits longer than the upgrade takes (its overlay's patch), so the agent resumes under
the new controller and answers; the Helm chart has no value for it, so its controller waits the
shipped minute and then goes on without the agent (``agent_unreachable``, docs/cleanup.md).
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.demo.chain import SHIPPED_ALERTMANAGER
from nodesync_sim.fake.scaleout.overrides import alertmanager_config, rewrite_rules
from nodesync_sim.real.node import RealNode
from nodesync_sim.real.prometheus import LocalAlertmanager, LocalPrometheus
from tests.deploy.incluster import NAMESPACE, Installer
from tests.deploy.lifecycle import NEXT_TAG
from tests.deploy.manifests import ROOT
from tests.deploy.servicemonitor import scrape_configs
from tests.support.realcluster import ALERTMANAGER, RULES
from tests.support.wait import until

#: The upgrade block's bound: it returns when the rollback it waits for has deleted the Node.
UPGRADE_TIMEOUT = 600.0
MONITORING = "monitoring"
PROMETHEUS_ACCOUNT = "prometheus-k8s"
CONTROLLER_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:nodesync-controller"
AGENT_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:nodesync-agent"


@dataclass(frozen=True)
class Upgrade:
    """The doc's block that rolls the release out on the next image, as written, run in
    ``cwd``; ``ack_held``: the controller waits for a stopped agent longer than the upgrade
    takes (else the shipped minute)."""

    block: str
    cwd: Path
    ack_held: bool


def pods(
    installer: Installer, component: str, *, terminating: bool = False
) -> list[dict[str, Any]]:
    """The component's pods; those being deleted only with ``terminating``."""
    selector = f"app.kubernetes.io/component={component}"
    items: list[dict[str, Any]] = installer.get("-n", NAMESPACE, "pods", "-l", selector)["items"]
    return [p for p in items if terminating or not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True"


def container_pid(node: RealNode, pod: dict[str, Any]) -> int:
    """The pid of the pod's (one) container's process, as its node's containerd runs it."""
    (status,) = pod["status"]["containerStatuses"]
    container = status["containerID"].removeprefix("containerd://")
    socket = node.cri_endpoint.removeprefix("unix://")
    out = subprocess.run(
        ["ctr", "-a", socket, "-n", "k8s.io", "tasks", "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    pids = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:] if line.strip()}
    return int(pids[container])


def monitor_and_roll_back(
    installer: Installer, nodes: list[RealNode], controller: dict[str, Any], upgrade: Upgrade
) -> None:
    """On the cluster's two live ``nodes``: the monitoring stack runs on the acting
    ``controller``'s node (host network), the other node fails; ``upgrade`` runs mid-rollback."""
    cluster, workdir = installer.cluster, Path(tempfile.mkdtemp(dir=installer.workdir))
    by_name = {node.name: node for node in nodes}
    monitoring_node = by_name[controller["spec"]["nodeName"]]
    (failing,) = [node for node in nodes if node is not monitoring_node]

    api = cluster.api
    sd = {
        "api_server": api.url,  # the node's loopback carries it to the API server
        "tls_config": {"ca_file": str(api.ca_file)},
        "authorization": {"credentials_file": str(_prometheus_token(installer, workdir / "sa"))},
    }
    monitors = installer.get("-n", NAMESPACE, "servicemonitors")["items"]
    assert {m["metadata"]["name"] for m in monitors} == {"nodesync-agent", "nodesync-controller"}
    jobs = [job for m in monitors for job in scrape_configs(m, sd, interval="1s")]

    hook_token = workdir / "hook-token"
    hook_token.write_text(secret_value(installer, NAMESPACE, "nodesync-webhook-token", "token"))
    service = installer.get("-n", NAMESPACE, "service", "nodesync-controller")["spec"]
    # No cluster DNS runs here: the Service's name is resolved to its address, as DNS would.
    hook_url = f"http://{service['clusterIP']}:9618/alerts"
    config = alertmanager_config(
        SHIPPED_ALERTMANAGER, ALERTMANAGER, hook_url=hook_url, token_file=hook_token
    )
    with contextlib.ExitStack() as stack:
        am = LocalAlertmanager(config, base_dir=workdir, placement=monitoring_node)
        stack.callback(am.cleanup)
        am.start()
        prom = LocalPrometheus(
            jobs,
            _shipped_rule_files(installer, workdir / "rules"),
            alertmanager_urls=[f"http://{am.address}"],
            base_dir=workdir,
            placement=monitoring_node,
            binary=_prometheus_with_kubernetes_sd(),
        )
        stack.callback(prom.cleanup)
        prom.start()

        # Every agent with its node's name, the controller without one, all up.
        def targets() -> dict[tuple[str, str], str] | None:
            found = {
                (t["labels"]["job"], t["labels"].get("node", "")): t["health"]
                for t in prom.targets()
            }
            return found if set(found.values()) == {"up"} and len(found) == 3 else None

        found = until(
            targets, timeout=60, what="every target up", detail=lambda: str(prom.targets())
        )
        assert set(found) == {
            *(("nodesync-agent", name) for name in by_name),
            ("nodesync-controller-metrics", ""),
        }
        groups = prom.rules()
        assert groups
        assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups

        # The failure: a kubelet goes silent, its containerd lives on; its agent is stopped, so
        # that the rollback waits at its cleanup step while the release is upgraded.
        mark = api.audit_log.read_bytes().rfind(b"\n") + 1
        (agent,) = [p for p in pods(installer, "agent") if p["spec"]["nodeName"] == failing.name]
        agent_pid = container_pid(failing, agent)
        os.kill(agent_pid, signal.SIGSTOP)

        def resume() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent_pid, signal.SIGCONT)

        stack.callback(resume)
        frozen = time.monotonic()
        failing.freeze_kubelet()
        until(
            lambda: any(
                a["labels"].get("alertname") == "NodesyncNewNodeNotReady"
                and a["labels"].get("node") == failing.name
                and a["state"] == "firing"
                for a in prom.alerts()
            ),
            timeout=120,
            what=f"NodesyncNewNodeNotReady firing for {failing.name}",
        )
        firing = time.monotonic() - frozen

        # The next release, by the doc's block, while the rollback waits for the agent; the
        # block returns once the new controller finished the rollback and deleted the Node.
        _upgrade_mid_rollback(installer, monitoring_node, failing, upgrade, resume)
        rollback = until(
            lambda: _ended_rollback(installer, failing.name),
            timeout=180,
            what=f"the deployed controller's rollback of {failing.name}",
            detail=lambda: installer.kubectl(
                "-n", NAMESPACE, "logs", "deployment/nodesync-controller"
            ),
        )
        assert rollback["status"]["phase"] == "Succeeded", rollback["status"]
        # Without the agent's answer within the shipped minute, the cleanup is skipped.
        skipped = "agent_unreachable" in json.dumps(rollback["status"])
        assert skipped != upgrade.ack_held, rollback["status"]
        ended = time.monotonic() - frozen
        print(
            f"\n[deploy] {failing.name}: kubelet frozen; alert firing at +{firing:.1f} s, "
            f"rollback by the deployed controller ended at +{ended:.1f} s"
        )
        assert cluster.node_object(failing.name) is None
        _assert_audited(api.audit_log, mark, failing.name, rollback["metadata"]["name"])


def _assert_audited(log: Path, mark: int, node: str, rollback: str) -> None:
    """Each effect once, by the controller's account (the upgraded one repeats none), and
    nothing refused."""
    events = _audit_events(log, mark)
    assert not [e for e in events if e["responseStatus"]["code"] == 403]
    writes = Counter(
        (e["verb"], e["objectRef"].get("resource"), e["objectRef"].get("name"))
        for e in events
        if e["user"]["username"] == CONTROLLER_ACCOUNT
        and e["verb"] in ("patch", "update", "delete", "create")
        and e["objectRef"].get("resource") == "nodes"
        and 200 <= e["responseStatus"]["code"] < 300
    )
    assert writes[("delete", "nodes", node)] == 1, writes
    assert set(writes) <= {("patch", "nodes", node), ("delete", "nodes", node)}
    created = [
        e["objectRef"].get("name")
        for e in events
        if e["user"]["username"] == CONTROLLER_ACCOUNT
        and e["verb"] == "create"
        and e["objectRef"].get("resource") == "noderollbacks"
        and 200 <= e["responseStatus"]["code"] < 300
    ]
    assert created == [rollback], created


def _upgrade_mid_rollback(
    installer: Installer,
    node: RealNode,
    failing: RealNode,
    upgrade: Upgrade,
    resume: Callable[[], None],
) -> None:
    """``upgrade``'s block while the rollback of ``failing`` waits at its cleanup step for the
    stopped agent: the old controller is gone with the rollback still under way; with the
    agent's answer awaited longer than that (``ack_held``), the agent resumes once the new
    controller is Ready. The block returns when the controller and every agent, on ``node``
    alone, run the new image, Ready."""

    def cleanup_requested() -> bool:
        found = installer.cluster.node_object(failing.name) or {}
        return "nodesync.io/cleanup-request" in found.get("metadata", {}).get("annotations", {})

    until(cleanup_requested, timeout=120, what=f"the cleanup of {failing.name} requested")
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        block = pool.submit(installer.shell, upgrade.block, upgrade.cwd, UPGRADE_TIMEOUT)

        def old_controller_gone() -> bool:
            found = pods(installer, "controller", terminating=True)
            return all(p["spec"]["containers"][0]["image"].endswith(f":{NEXT_TAG}")
                       for p in found)  # fmt: skip

        until(
            old_controller_gone,
            timeout=240,
            what="the old release's controller gone",
            detail=lambda: installer.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide"),
        )
        gone = time.monotonic() - started
        (running,) = [r for r in installer.get("noderollbacks")["items"]
                      if r["spec"].get("nodeName") == failing.name]  # fmt: skip
        # Not ended: its cleanup step waits for the stopped agent; the new controller ends it.
        assert running["status"]["phase"] not in ("Succeeded", "Failed"), running["status"]
        assert not block.done()  # the agents' rollout waits for the rollback (upgrade.md)
        if upgrade.ack_held:

            def upgraded_controller() -> bool:
                found = pods(installer, "controller")
                return len(found) == 1 and ready(found[0])

            until(
                upgraded_controller,
                timeout=240,
                what="the next release's controller Ready",
                detail=lambda: installer.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide"),
            )
            resume()
        block.result(timeout=UPGRADE_TIMEOUT)
    took = time.monotonic() - started
    for component in ("controller", "agent"):
        found = pods(installer, component)
        assert [p["spec"]["nodeName"] for p in found] == [node.name], found
        assert all(ready(p) for p in found), [p["status"] for p in found]
        images = {c["image"] for p in found for c in p["spec"]["containers"]}
        assert {i.rpartition(":")[2] for i in images} == {NEXT_TAG}, images
    print(
        f"\n[deploy] upgraded to {NEXT_TAG} mid-rollback by the doc's block in {took:.1f} s "
        f"(the old controller gone at +{gone:.1f} s)"
    )


def secret_value(installer: Installer, namespace: str, name: str, key: str) -> str:
    data = installer.get("-n", namespace, "secret", name)["data"]
    return base64.b64decode(data[key]).decode()


def _prometheus_token(installer: Installer, path: Path) -> Path:
    """The token of the service account the shipped monitoring Role is bound to (kube-prometheus'
    Prometheus), written to ``path``."""
    installer.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MONITORING}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": PROMETHEUS_ACCOUNT, "namespace": MONITORING},
        },
    )

    def token_secret() -> str | None:
        account = installer.get("-n", MONITORING, "serviceaccount", PROMETHEUS_ACCOUNT)
        secrets = account.get("secrets") or []
        return str(secrets[0]["name"]) if secrets else None

    secret = until(token_secret, timeout=60, what="the Prometheus account's token")
    path.write_text(secret_value(installer, MONITORING, secret, "token"))
    path.chmod(0o600)
    return path


def _shipped_rule_files(installer: Installer, directory: Path) -> list[Path]:
    """The PrometheusRule as installed, as rule files, with the test's shorter timers."""
    directory.mkdir()
    files = []
    for item in installer.get("-n", NAMESPACE, "prometheusrules")["items"]:
        path = directory / f"{item['metadata']['name']}.json"
        path.write_text(json.dumps({"groups": item["spec"]["groups"]}))
        files.append(path)
    assert files, "the monitoring component installed no PrometheusRule"
    return rewrite_rules(files, RULES, directory / "test")


def _prometheus_with_kubernetes_sd() -> str:
    """Debian 13's Prometheus, unpacked by scripts/setup-prometheus (Debian 12's has no
    Kubernetes service discovery)."""
    result = subprocess.run(
        [str(ROOT / "scripts" / "setup-prometheus"), "--print-dir", "--no-fetch"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(result.stderr.strip(), pytrace=False)
    return str(Path(result.stdout.strip()) / "usr" / "bin" / "prometheus")


def _ended_rollback(installer: Installer, node: str) -> dict[str, Any] | None:
    items = installer.get("noderollbacks")["items"]
    mine = [r for r in items if r["spec"].get("nodeName") == node]
    if not mine:
        return None
    assert len(mine) == 1, [r["spec"] for r in mine]
    phase = (mine[0].get("status") or {}).get("phase")
    return mine[0] if phase in ("Succeeded", "Failed") else None


def _audit_events(log: Path, since: int) -> list[dict[str, Any]]:
    """The nodesync accounts' completed requests after byte ``since`` of the audit log."""
    with log.open("rb") as stream:
        stream.seek(since)
        lines = stream.read().decode().split("\n")[:-1]
    events = [json.loads(line) for line in lines if line]
    return [
        e
        for e in events
        if e.get("stage") == "ResponseComplete"
        and e["user"]["username"] in (CONTROLLER_ACCOUNT, AGENT_ACCOUNT)
    ]
