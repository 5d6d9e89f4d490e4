"""Helpers shared by the test API server tests."""

from __future__ import annotations

import json
from typing import Any

import urllib3
from kubernetes import client

from nodesync_sim.fake.apiserver import ThreadedAPIServer


def node(name: str, labels: dict[str, str] | None = None) -> client.V1Node:
    return client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=labels))


def pod_body(name: str, node_name: str | None = None, labels: dict[str, str] | None = None) -> Any:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            node_name=node_name, containers=[client.V1Container(name="c", image="busybox")]
        ),
    )


def running_ready_pod(
    server: ThreadedAPIServer, name: str, labels: dict[str, str], namespace: str = "default"
) -> dict[str, Any]:
    """A scheduled pod that is Running and Ready, created through the store backdoor."""
    return server.store.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )


def call(
    server: ThreadedAPIServer,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    *,
    token: str | None = None,
) -> tuple[int, Any]:
    """(HTTP status, decoded JSON answer) of one request sent as given: the typed client
    rewrites bodies (e.g. times without fractions lose them), this does not."""
    headers = {"Authorization": f"Bearer {token or server.token}", "Content-Type": content_type}
    data = None if body is None else json.dumps(body).encode()
    resp = urllib3.request(method, server.url + path, body=data, headers=headers, timeout=10.0)
    return resp.status, json.loads(resp.data) if resp.data else None
