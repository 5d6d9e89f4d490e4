"""The checks every built kustomization must pass, as functions that return what is wrong.

1. Each object of a kind the ``kubernetes`` client knows loads into its model (pydantic, strict
   types) and serialises back to exactly what kustomize wrote: a misspelt or misplaced field
   (which the model would silently drop) or a wrong type is a difference.
2. nodesync's own rules for what it ships: names and namespaces explicit, images pinned by
   tag, resources set, both probes, a locked-down securityContext, read-only host mounts, the
   Services, ServiceMonitors and RBAC bindings pointing at things that exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import kubernetes.client

from exporter import __version__
from tests.deploy.manifests import NAMESPACE, Obj, workloads

MODELS = {
    "Namespace": "V1Namespace",
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
    "Service": "V1Service",
    "PersistentVolumeClaim": "V1PersistentVolumeClaim",
    "Deployment": "V1Deployment",
    "DaemonSet": "V1DaemonSet",
    "StatefulSet": "V1StatefulSet",
    "PodDisruptionBudget": "V1PodDisruptionBudget",
    "CustomResourceDefinition": "V1CustomResourceDefinition",
}
#: The Prometheus Operator's kinds: not in the client, checked by their own tests.
CUSTOM = {
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
    "AlertmanagerConfig": "monitoring.coreos.com/v1alpha1",
}
CLUSTER_SCOPED = frozenset(
    {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
)
#: The node Leases live there: the Roles that read them must too.
OTHER_NAMESPACES = {("Role", "kube-node-lease"), ("RoleBinding", "kube-node-lease")}
IMAGE = "nodesync"
#: Service accounts bound but not shipped: kube-prometheus' Prometheus (the monitoring
#: component lets it discover nodesync's targets).
EXTERNAL_ACCOUNTS = {("monitoring", "prometheus-k8s")}


def model_problems(objects: Iterable[Obj]) -> list[str]:
    problems: list[str] = []
    with kubernetes.client.ApiClient() as api:
        for obj in objects:
            kind = obj.get("kind", "")
            ref = f"{kind} {obj.get('metadata', {}).get('name')}"
            if kind in CUSTOM:
                if obj.get("apiVersion") != CUSTOM[kind]:
                    problems.append(f"{ref}: apiVersion {obj.get('apiVersion')!r}")
                continue
            if kind not in MODELS:
                problems.append(f"{ref}: a kind this check does not know")
                continue
            try:
                model = getattr(kubernetes.client, MODELS[kind]).from_dict(obj)
            except Exception as exc:  # pydantic's ValidationError: wrong or missing fields
                problems.append(f"{ref}: does not load into {MODELS[kind]}: {exc}")
                continue
            back = api.sanitize_for_serialization(model)
            if back != obj:
                problems.append(f"{ref}: {_first_difference(obj, back)}")
    return problems


def _first_difference(written: Any, loaded: Any, path: str = "") -> str:
    if isinstance(written, dict) and isinstance(loaded, dict):
        for key in written:
            if key not in loaded:
                return f"{path}.{key} is not a field of the model (misspelt or misplaced?)"
            diff = _first_difference(written[key], loaded[key], f"{path}.{key}")
            if diff:
                return diff
        return ""
    if isinstance(written, list) and isinstance(loaded, list):
        for i, (a, b) in enumerate(zip(written, loaded, strict=False)):
            diff = _first_difference(a, b, f"{path}[{i}]")
            if diff:
                return diff
        return "" if len(written) == len(loaded) else f"{path}: list length differs"
    return "" if written == loaded else f"{path}: {written!r} loads as {loaded!r}"


# ---------------------------------------------------------------- nodesync's own rules


def metadata_problems(objects: Iterable[Obj]) -> list[str]:
    problems: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for obj in objects:
        meta = obj.get("metadata") or {}
        kind, name = obj.get("kind", ""), meta.get("name", "")
        ref = f"{kind} {name}"
        if not name:
            problems.append(f"{kind}: no metadata.name")
        namespace = meta.get("namespace", "")
        if kind in CLUSTER_SCOPED:
            if namespace:
                problems.append(f"{ref}: cluster-scoped, yet namespace {namespace!r}")
        elif namespace != NAMESPACE and (kind, namespace) not in OTHER_NAMESPACES:
            problems.append(f"{ref}: namespace {namespace!r}, not {NAMESPACE!r}")
        if (meta.get("labels") or {}).get("app.kubernetes.io/name") != "nodesync":
            problems.append(f"{ref}: no label app.kubernetes.io/name=nodesync")
        key = (kind, namespace, name)
        if key in seen:
            problems.append(f"{ref}: twice")
        seen.add(key)
    return problems


def _image_problems(ref: str, image: str) -> list[str]:
    name, _, digest = image.partition("@")
    repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    problems = []
    if not tag and not digest:
        problems.append(f"{ref}: image {image!r} is not pinned by a tag")
    if tag == "latest":
        problems.append(f"{ref}: image {image!r} uses the tag latest")
    if repository.rsplit("/", 1)[-1] == IMAGE and tag and tag != __version__:
        problems.append(f"{ref}: image tag {tag!r} is not the package version {__version__!r}")
    return problems


def _quantity(text: str) -> float:
    """A CPU or memory quantity in base units (enough of the notation for comparisons)."""
    units = {
        "m": 1e-3,
        "": 1.0,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "Ki": 2.0**10,
        "Mi": 2.0**20,
        "Gi": 2.0**30,
    }
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(text))
    if match is None or match.group(2) not in units:
        raise ValueError(f"not a quantity: {text!r}")
    return float(match.group(1)) * units[match.group(2)]


def _resource_problems(ref: str, resources: Obj) -> list[str]:
    problems = []
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for what in ("cpu", "memory"):
        if what not in requests:
            problems.append(f"{ref}: no {what} request")
        if what not in limits:
            problems.append(f"{ref}: no {what} limit")
        if (
            what in requests
            and what in limits
            and _quantity(requests[what]) > _quantity(limits[what])
        ):
            problems.append(f"{ref}: {what} request above its limit")
    return problems


def _probe_problems(ref: str, spec: Obj) -> list[str]:
    problems = []
    ports = {p.get("name") for p in spec.get("ports") or []}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (spec.get(probe) or {}).get("httpGet") or {}
        if get.get("path") != path:
            problems.append(f"{ref}: {probe} is not an HTTP GET of {path}")
        elif get.get("port") not in ports:
            problems.append(f"{ref}: {probe} port {get.get('port')!r} is not a container port")
    return problems


def _security_problems(ref: str, pod: Obj, spec: Obj) -> list[str]:
    problems = []
    pod_sc, sc = pod.get("securityContext") or {}, spec.get("securityContext") or {}

    def setting(key: str) -> Any:
        return sc.get(key, pod_sc.get(key))

    if setting("runAsNonRoot") is not True:
        problems.append(f"{ref}: runAsNonRoot is not true")
    if setting("runAsUser") in (None, 0):
        problems.append(f"{ref}: no non-root runAsUser (the image's USER is not checked here)")
    if (setting("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problems.append(f"{ref}: seccompProfile is not RuntimeDefault")
    if sc.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{ref}: allowPrivilegeEscalation is not false")
    if sc.get("readOnlyRootFilesystem") is not True:
        problems.append(f"{ref}: readOnlyRootFilesystem is not true")
    if sc.get("privileged"):
        problems.append(f"{ref}: privileged")
    capabilities = sc.get("capabilities") or {}
    if capabilities.get("drop") != ["ALL"]:
        problems.append(f"{ref}: capabilities are not dropped (drop: [ALL])")
    if capabilities.get("add"):
        problems.append(f"{ref}: adds capabilities {capabilities['add']}")
    return problems


def _volume_problems(ref: str, workload: Obj, spec: Obj) -> list[str]:
    pod = workload["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    claims = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates") or []}
    problems = []
    for mount in spec.get("volumeMounts") or []:
        name = mount["name"]
        if name not in volumes and name not in claims:
            problems.append(f"{ref}: volumeMount {name} has no volume")
        elif name in volumes and "hostPath" in volumes[name] and mount.get("readOnly") is not True:
            problems.append(f"{ref}: host path {volumes[name]['hostPath']['path']} is writable")
    mounted = {m["name"] for m in spec.get("volumeMounts") or []}
    problems += [
        f"{ref}: volume {name} is never mounted" for name in volumes if name not in mounted
    ]
    return problems


def workload_problems(objects: list[Obj]) -> list[str]:
    problems: list[str] = []
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    for workload in workloads(objects):
        ref = f"{workload['kind']} {workload['metadata']['name']}"
        template = workload["spec"]["template"]
        pod = template["spec"]
        selector = workload["spec"]["selector"].get("matchLabels") or {}
        labels = template["metadata"].get("labels") or {}
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            problems.append(f"{ref}: the selector does not select the pod template")
        if pod.get("serviceAccountName") not in accounts:
            problems.append(f"{ref}: service account {pod.get('serviceAccountName')!r} missing")
        if pod.get("hostPID") or pod.get("hostIPC"):
            problems.append(f"{ref}: shares the host's PID or IPC namespace")
        for spec in [*pod.get("initContainers", []), *pod["containers"]]:
            cref = f"{ref} container {spec['name']}"
            problems += _image_problems(cref, spec.get("image", ""))
            problems += _resource_problems(cref, spec.get("resources") or {})
            problems += _probe_problems(cref, spec)
            problems += _security_problems(cref, pod, spec)
            problems += _volume_problems(cref, workload, spec)
    return problems


def _selects(selector: Obj, labels: Obj) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def service_problems(objects: list[Obj]) -> list[str]:
    problems: list[str] = []
    pods = [w["spec"]["template"] for w in workloads(objects)]
    for service in (o for o in objects if o["kind"] == "Service"):
        ref = f"Service {service['metadata']['name']}"
        selector = service["spec"].get("selector") or {}
        chosen = [p for p in pods if _selects(selector, p["metadata"].get("labels") or {})]
        if not chosen:
            problems.append(f"{ref}: selects no workload")
            continue
        container_ports = {
            port.get("name")
            for pod in chosen
            for c in pod["spec"]["containers"]
            for port in c.get("ports") or []
        }
        for port in service["spec"].get("ports") or []:
            if port.get("targetPort") not in container_ports:
                problems.append(f"{ref}: targetPort {port.get('targetPort')!r} is no pod port")
    return problems


def servicemonitor_problems(objects: list[Obj]) -> list[str]:
    problems: list[str] = []
    services = [o for o in objects if o["kind"] == "Service"]
    for monitor in (o for o in objects if o["kind"] == "ServiceMonitor"):
        ref = f"ServiceMonitor {monitor['metadata']['name']}"
        spec = monitor["spec"]
        names = (spec.get("namespaceSelector") or {}).get("matchNames") or []
        chosen = [
            s
            for s in services
            if s["metadata"]["namespace"] in names
            and _selects(spec["selector"].get("matchLabels") or {}, s["metadata"]["labels"])
        ]
        if len(chosen) != 1:
            problems.append(f"{ref}: selects {len(chosen)} Services, not one")
            continue
        ports = {p.get("name") for p in chosen[0]["spec"]["ports"]}
        for endpoint in spec.get("endpoints") or []:
            if endpoint.get("port") not in ports:
                problems.append(f"{ref}: port {endpoint.get('port')!r} is not a Service port")
    return problems


def rbac_problems(objects: list[Obj]) -> list[str]:
    problems: list[str] = []
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    accounts = {
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in objects
        if o["kind"] == "ServiceAccount"
    }
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = f"{binding['kind']} {binding['metadata']['name']}"
        role = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "") if role["kind"] == "Role" else ""
        if (role["kind"], namespace, role["name"]) not in roles:
            problems.append(f"{ref}: {role['kind']} {role['name']} is not shipped")
        for subject in binding.get("subjects") or []:
            if subject.get("kind") != "ServiceAccount":
                problems.append(f"{ref}: binds a {subject.get('kind')}, not a service account")
            elif (subject.get("namespace"), subject.get("name")) not in (
                accounts | EXTERNAL_ACCOUNTS
            ):
                problems.append(f"{ref}: service account {subject.get('name')} is not shipped")
    for role in (o for o in objects if o["kind"] in ("Role", "ClusterRole")):
        for rule in role.get("rules") or []:
            if "*" in rule.get("verbs", []) + rule.get("resources", []) + rule.get("apiGroups", []):
                problems.append(f"{role['kind']} {role['metadata']['name']}: a wildcard rule")
    return problems


def all_problems(objects: list[Obj]) -> list[str]:
    return [
        *model_problems(objects),
        *metadata_problems(objects),
        *workload_problems(objects),
        *service_problems(objects),
        *servicemonitor_problems(objects),
        *rbac_problems(objects),
    ]
