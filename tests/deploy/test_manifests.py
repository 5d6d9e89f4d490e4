"""The base and every overlay build with kustomize, load into the ``kubernetes`` client's models,
and pass nodesync's own checks; the agent and the controller get what the docs say they get."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.controller.settings import TOKEN_ENV
from tests.deploy.commandline import parse_container
from tests.deploy.manifests import (
    BASE,
    OVERLAYS,
    ROOT,
    Obj,
    build,
    container,
    controller_workload,
    env,
    find,
    kustomizations,
    one,
)
from tests.deploy.schema import all_problems

AGENT_PORT = 9617
CONTROLLER_PORT = 9618


@pytest.mark.parametrize("path", kustomizations(), ids=lambda p: p.name)
def test_every_kustomization_builds_and_passes_the_checks(path: Path) -> None:
    objects = build(path)
    assert objects, f"{path} builds nothing"
    assert all_problems(objects) == []


def _agent(objects: list[Obj]) -> Obj:
    return one(objects, "DaemonSet", "nodesync-agent")


def _mutate_agent_container(change: Callable[[Obj], None]) -> Callable[[list[Obj]], None]:
    def mutate(objects: list[Obj]) -> None:
        change(container(_agent(objects), "agent"))

    return mutate


def _walk(obj: Any, path: str) -> tuple[Any, str | int]:
    """The parent of ``path`` ("a.b.0.c": numbers index lists) and the last key."""
    keys: list[str | int] = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        obj = obj[key]
    return obj, keys[-1]


def _pop(path: str) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        parent, key = _walk(obj, path)
        del parent[key]

    return change


def _set(path: str, value: object) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        parent, key = _walk(obj, path)
        parent[key] = value

    return change


def _bind_missing_role(objects: list[Obj]) -> None:
    one(objects, "ClusterRoleBinding", "nodesync-agent")["roleRef"]["name"] = "nodesync-other"


def _break_service(objects: list[Obj]) -> None:
    one(objects, "Service", "nodesync-agent")["spec"]["ports"][0]["targetPort"] = "web"


def _wildcard(objects: list[Obj]) -> None:
    one(objects, "ClusterRole", "nodesync-controller")["rules"][0]["verbs"] = ["*"]


def _no_namespace(objects: list[Obj]) -> None:
    del one(objects, "Service", "nodesync-controller")["metadata"]["namespace"]


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (_mutate_agent_container(_set("imagePullPolicyy", "Always")), "not a field of the model"),
        (_mutate_agent_container(_set("ports", [{"containerPort": "9617"}])), "does not load"),
        (_mutate_agent_container(_set("image", "nodesync:latest")), "uses the tag latest"),
        (_mutate_agent_container(_set("image", "nodesync")), "not pinned by a tag"),
        (_mutate_agent_container(_set("image", "nodesync:0.0.1")), "not the package version"),
        (_mutate_agent_container(_pop("resources.limits.memory")), "no memory limit"),
        (_mutate_agent_container(_set("resources.requests.cpu", "2")), "cpu request above"),
        (_mutate_agent_container(_pop("readinessProbe")), "readinessProbe is not"),
        (_mutate_agent_container(_set("livenessProbe.httpGet.port", "web")), "not a container"),
        (_mutate_agent_container(_pop("securityContext.allowPrivilegeEscalation")), "Escalation"),
        (_mutate_agent_container(_set("securityContext.capabilities.add", ["SYS_ADMIN"])), "adds"),
        (_mutate_agent_container(_set("volumeMounts.0.readOnly", False)), "is writable"),
        (_bind_missing_role, "is not shipped"),
        (_break_service, "is no pod port"),
        (_wildcard, "a wildcard rule"),
        (_no_namespace, "namespace ''"),
    ],
)
def test_the_checks_catch_what_they_are_for(
    mutate: Callable[[list[Obj]], None], problem: str
) -> None:
    objects = build(BASE)
    mutate(objects)
    problems = all_problems(objects)
    assert any(problem in p for p in problems), problems


# ---------------------------------------------------------------- the CLI takes the manifests


@pytest.mark.parametrize("path", kustomizations(), ids=lambda p: p.name)
def test_nodesync_accepts_every_command_line_and_variable(path: Path) -> None:
    objects = build(path)
    agent, unknown = parse_container(container(_agent(objects), "agent"))
    assert unknown == set()
    assert agent.command == "agent"
    assert agent.node_name == "node-a"
    assert agent.web_listen_address[1] == AGENT_PORT
    controller, unknown = parse_container(container(controller_workload(objects), "controller"))
    assert unknown == set()
    assert controller.command == "controller"
    assert controller.web_listen_address[1] == CONTROLLER_PORT


# ---------------------------------------------------------------- the agent


def test_the_agent_runs_on_every_node_with_its_node_name() -> None:
    agent = _agent(build(BASE))
    pod = agent["spec"]["template"]["spec"]
    # Every taint tolerated: new, NotReady, unreachable, tainted, and nodesync's own
    # nodesync.io/rollback (the agent answers the cleanup request of a node being rolled back).
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["hostNetwork"] is True  # kubelet's healthz is on the node's loopback
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    spec = container(agent, "agent")
    assert env(spec)["NODE_NAME"] == {
        "name": "NODE_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
    }
    # Its own pod, which a cleanup spares (docs/cleanup.md).
    assert env(spec)["POD_UID"] == {
        "name": "POD_UID",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}},
    }
    assert spec["ports"] == [{"name": "metrics", "containerPort": AGENT_PORT, "protocol": "TCP"}]


def test_the_agent_is_cluster_critical_and_runs_on_linux_nodes_only() -> None:
    # The standard overlay, as installed: what the scheduler sees.
    pod = _agent(build(OVERLAYS / "standard"))["spec"]["template"]["spec"]
    # A full new node makes room for it (preemption), and kubelet does not evict it under
    # node pressure (priority 2000000000 and above is critical to kubelet).
    assert pod["priorityClassName"] == "system-cluster-critical"
    # It tolerates every taint, so only the selector keeps it off Windows nodes.
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    docs = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    assert f"`priorityClassName: {pod['priorityClassName']}`" in docs
    # The quota that admits the class where a cluster limits it names the same class.
    assert f"values: [{pod['priorityClassName']}]" in docs


def test_the_agent_mounts_exactly_what_it_reads_read_only() -> None:
    agent = _agent(build(BASE))
    pod = agent["spec"]["template"]["spec"]
    spec = container(agent, "agent")
    host = {v["name"]: v["hostPath"] for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in spec["volumeMounts"]}
    assert {h["path"] for h in host.values()} == {
        "/run/containerd",
        "/var/lib/kubelet",
        "/var/lib/containerd",
    }
    assert all(h["type"] == "Directory" for h in host.values())
    for path, mount in mounts.items():
        assert host[mount["name"]]["path"] == path  # the same path inside as on the host
        assert mount["readOnly"] is True
    args, _ = parse_container(spec)
    socket = args.cri_endpoint.removeprefix("unix://")
    assert Path(socket).parent == Path("/run/containerd")
    assert args.kubelet_root_dir in mounts
    assert args.containerd_root in mounts
    # Not root; root's group for the root-owned socket (0660) and kubelet's directories (0750).
    security = pod["securityContext"]
    assert security["runAsUser"] != 0
    assert security["supplementalGroups"] == [0]


def _documented_peak_rss_mib(who: str) -> float:
    """The highest peak RSS docs/performance.md reports for ``who`` (agent or controller): the
    bold figures of its "RSS" rows, the upper end of a range."""
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    peaks = [
        float(high or low)
        for row in re.findall(rf"^\|\s*{who} RSS[^|]*\|([^|]*)\|", text, re.M)
        for low, high in re.findall(r"\*\*([0-9.]+)(?:[\u2013-]([0-9.]+))?\s*MiB\*\*", row)
    ]
    assert peaks, f"docs/performance.md reports no {who} RSS: update this test"
    return max(peaks)


def _mebibytes(quantity: str) -> float:
    assert quantity.endswith("Mi"), quantity
    return float(quantity[:-2])


@pytest.mark.parametrize(
    ("kind", "name", "who"),
    [("DaemonSet", "nodesync-agent", "agent"), ("Deployment", "nodesync-controller", "controller")],
)
def test_memory_follows_the_benchmarks(kind: str, name: str, who: str) -> None:
    workload = one(build(BASE), kind, name)
    resources = workload["spec"]["template"]["spec"]["containers"][0]["resources"]
    peak = _documented_peak_rss_mib(who)
    assert _mebibytes(resources["requests"]["memory"]) >= peak, "the request holds the peak"
    assert _mebibytes(resources["limits"]["memory"]) >= 2 * peak, "room above the peak"


def test_the_namespace_admits_the_agents_privileges() -> None:
    namespace = one(build(BASE), "Namespace", "nodesync")
    # hostPath volumes and the host network are allowed by the privileged level only.
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


# ---------------------------------------------------------------- the controller


def test_the_controller_takes_its_token_from_the_secret_and_keeps_its_journal() -> None:
    objects = build(BASE)
    deployment = one(objects, "Deployment", "nodesync-controller")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = container(deployment, "controller")
    assert env(spec)[TOKEN_ENV]["valueFrom"] == {
        "secretKeyRef": {"name": "nodesync-webhook-token", "key": "token"}
    }
    assert spec["ports"] == [{"name": "http", "containerPort": CONTROLLER_PORT, "protocol": "TCP"}]
    args, _ = parse_container(spec)
    assert args.rollback_dry_run is False
    assert args.leader_election_enabled is False
    # Deleting Nodes is opt-in: deploy/components/delete-nodes.
    assert args.rollback_delete_nodes is False
    # The journal's directory is the claim's volume.
    mount = next(m for m in spec["volumeMounts"] if args.journal_path.startswith(m["mountPath"]))
    pod = deployment["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    claim = one(objects, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


def test_only_ready_controllers_get_webhooks_and_every_controller_is_scraped() -> None:
    objects = build(OVERLAYS / "standard")
    webhook = one(objects, "Service", "nodesync-controller")
    metrics = one(objects, "Service", "nodesync-controller-metrics")
    assert webhook["spec"].get("publishNotReadyAddresses") is not True
    assert metrics["spec"]["publishNotReadyAddresses"] is True
    monitor = one(objects, "ServiceMonitor", "nodesync-controller")
    labels = monitor["spec"]["selector"]["matchLabels"]
    assert all(metrics["metadata"]["labels"].get(k) == v for k, v in labels.items())
    assert not all(webhook["metadata"]["labels"].get(k) == v for k, v in labels.items())


def test_no_kustomization_ships_a_secret() -> None:
    for path in kustomizations():
        assert find(build(path), "Secret") == [], f"{path} ships a Secret (the token is yours)"
