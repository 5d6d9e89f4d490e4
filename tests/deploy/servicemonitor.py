"""A ServiceMonitor as the Prometheus Operator turns it into a Prometheus scrape configuration.

The operator (v0.66 and later, role ``endpoints``) makes one job per endpoint of the monitor:
Kubernetes service discovery of the Endpoints of the selected namespaces, kept when the Service
has the selector's labels and the endpoint port is the named one; the target labelled with its
namespace, service, pod, container, the endpoint's node or pod, ``job`` from the Service's name
and ``endpoint`` from the port; then the monitor's own relabelings. Only what the shipped
monitors use is derived (``matchLabels``, ``matchNames``, named ports, ``relabelings`` of the
actions replace, labeldrop); anything else fails loudly, so the two cannot drift apart silently.
"""

from __future__ import annotations

import re
from typing import Any

Obj = dict[str, Any]

_KNOWN_ENDPOINT_KEYS = {"port", "path", "interval", "scrapeTimeout", "relabelings"}
_KNOWN_RELABEL_KEYS = {"action", "sourceLabels", "targetLabel", "regex", "replacement", "separator"}


def _label(name: str) -> str:
    """A Kubernetes label key as Prometheus' service discovery names it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _relabeling(item: Obj) -> Obj:
    unknown = set(item) - _KNOWN_RELABEL_KEYS
    assert not unknown, f"relabeling fields the derivation does not know: {unknown}"
    assert item.get("action", "replace") in ("replace", "labeldrop"), item
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(key, key): value for key, value in item.items()}


def scrape_configs(monitor: Obj, sd: Obj, *, interval: str | None = None) -> list[Obj]:
    """The jobs of ``monitor``; ``sd``: the ``kubernetes_sd_configs`` entry's connection
    (``api_server``, ``tls_config``, ``authorization``). ``interval`` replaces the monitor's
    scrape interval and timeout (a test's shorter timers)."""
    spec = monitor["spec"]
    assert set(spec) <= {"selector", "namespaceSelector", "endpoints"}, set(spec)
    assert set(spec["selector"]) == {"matchLabels"}, spec["selector"]
    namespace = monitor["metadata"]["namespace"]
    names = spec.get("namespaceSelector", {}).get("matchNames", [namespace])
    jobs = []
    for index, endpoint in enumerate(spec["endpoints"]):
        unknown = set(endpoint) - _KNOWN_ENDPOINT_KEYS
        assert not unknown, f"endpoint fields the derivation does not know: {unknown}"
        port = endpoint["port"]
        relabel: list[Obj] = [
            {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
            *(
                {
                    "action": "keep",
                    "source_labels": [
                        f"__meta_kubernetes_service_label_{_label(key)}",
                        f"__meta_kubernetes_service_labelpresent_{_label(key)}",
                    ],
                    "regex": f"({value});true",
                }
                for key, value in sorted(spec["selector"]["matchLabels"].items())
            ),
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_endpoint_port_name"],
                "regex": port,
            },
            *(
                {
                    "source_labels": [
                        "__meta_kubernetes_endpoint_address_target_kind",
                        "__meta_kubernetes_endpoint_address_target_name",
                    ],
                    "separator": ";",
                    "regex": f"{kind};(.*)",
                    "replacement": "${1}",
                    "target_label": kind.lower(),
                }
                for kind in ("Node", "Pod")
            ),
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {
                "source_labels": ["__meta_kubernetes_pod_container_name"],
                "target_label": "container",
            },
            {
                "action": "drop",
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "(Failed|Succeeded)",
            },
            {
                "source_labels": ["__meta_kubernetes_service_name"],
                "target_label": "job",
                "replacement": "${1}",
            },
            {"target_label": "endpoint", "replacement": port},
            *(_relabeling(item) for item in endpoint.get("relabelings", ())),
        ]
        jobs.append(
            {
                "job_name": f"serviceMonitor/{namespace}/{monitor['metadata']['name']}/{index}",
                "honor_labels": False,
                "kubernetes_sd_configs": [
                    {"role": "endpoints", "namespaces": {"names": names}, **sd}
                ],
                "scrape_interval": interval or endpoint.get("interval", "30s"),
                "scrape_timeout": interval or endpoint.get("scrapeTimeout", "10s"),
                "metrics_path": endpoint.get("path", "/metrics"),
                "relabel_configs": relabel,
            }
        )
    return jobs
