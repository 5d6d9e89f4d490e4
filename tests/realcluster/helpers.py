"""What the real-cluster tests share: pods on a node, Prometheus readings, the audit log."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from nodesync_sim.real.containerd import IMAGE_REF
from nodesync_sim.real.kube_apiserver import AGENT, CONTROLLER, LocalKubeAPIServer
from nodesync_sim.real.node import RealNode
from tests.support.kubeapi import create_namespace, delete_namespace
from tests.support.realcluster import RealChain
from tests.support.wait import until

SLEEP = ["/bin/sleep", "inf"]


def pod(
    name: str,
    node: RealNode,
    command: Sequence[str] = SLEEP,
    *,
    host_network: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    """A pod the scheduler places on ``node`` (its hostname label), from the local image."""
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "hostNetwork": host_network,
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE_REF,
                    "imagePullPolicy": "Never",
                    "command": list(command),
                }
            ],
            **spec,
        },
    }


@contextmanager
def namespace(api: LocalKubeAPIServer) -> Iterator[str]:
    """A fresh namespace, deleted with its contents afterwards (the real namespace controller
    finishes it: pods on a live kubelet go when the kubelet confirms)."""
    name = create_namespace(api, f"rc-{secrets.token_hex(2)}-")
    try:
        yield name
    finally:
        delete_namespace(api, name)


def create_pod(api: LocalKubeAPIServer, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = api.ok("POST", f"/api/v1/namespaces/{ns}/pods", body)
    return created


def get_pod(api: LocalKubeAPIServer, ns: str, name: str) -> dict[str, Any] | None:
    answer = api.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return answer.body if answer.status == 200 else None


def wait_phase(api: LocalKubeAPIServer, ns: str, name: str, phase: str, timeout: float = 60) -> Any:
    def reached() -> Any:
        found = get_pod(api, ns, name)
        return found if found and found.get("status", {}).get("phase") == phase else None

    return until(reached, timeout=timeout, what=f"pod {ns}/{name} to be {phase}")


def value(chain: RealChain, promql: str) -> float | None:
    """The single value of an instant query (None: no series)."""
    result = chain.prom.query(promql)
    if not result:
        return None
    assert len(result) == 1, (promql, result)
    return float(result[0]["value"][1])


def wait_value(chain: RealChain, promql: str, want: float, timeout: float = 60) -> None:
    until(lambda: value(chain, promql) == want, timeout=timeout, what=f"{promql} == {want}")


def product_events(api: LocalKubeAPIServer, since: int) -> list[dict[str, Any]]:
    """The audit events of the agent and controller accounts after byte ``since`` of the log."""
    users = {api.identities[AGENT].user, api.identities[CONTROLLER].user}
    with api.audit_log.open("rb") as log:
        log.seek(since)
        text = log.read().decode()
    import json

    events = [json.loads(line) for line in text.split("\n")[:-1] if line]
    return [
        e for e in events if e.get("stage") == "ResponseComplete" and e["user"]["username"] in users
    ]


def audit_mark(api: LocalKubeAPIServer) -> int:
    """Where the audit log ends now (complete lines)."""
    return api.audit_log.read_bytes().rfind(b"\n") + 1


def refused(events: list[dict[str, Any]]) -> list[str]:
    return [
        f"{e['user']['username']} {e['verb']} {e['requestURI']}"
        for e in events
        if e["responseStatus"]["code"] == 403
    ]
