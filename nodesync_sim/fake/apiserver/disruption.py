"""The Eviction subresource and a simplified disruption controller behind it.

The real server checks an eviction against the PodDisruptionBudget's status, which the
disruption controller keeps up to date. Here the budget is computed from the current pods at
eviction time (under the store lock, so two evictions cannot both take the last disruption):

- the PDBs in the pod's namespace whose selector matches the pod's labels ({} matches all,
  null none); more than one is a 500, as on a real server;
- expectedPods = the matching pods; currentHealthy = those Running, with condition Ready=True,
  and not being deleted;
- desiredHealthy = minAvailable (a number, or a percentage of expectedPods rounded up), or
  expectedPods - maxUnavailable (a percentage rounded up); disruptionsAllowed =
  currentHealthy - desiredHealthy.
Scale from controllers (Deployments, StatefulSets) is not modelled: expectedPods is always the
number of matching pods. Unhealthy pods follow spec.unhealthyPodEvictionPolicy (IfHealthyBudget by
default, AlwaysAllow). Pods that are Pending, Succeeded, Failed or already being deleted are
evicted without consulting any PDB. An allowed eviction deletes the pod gracefully (with the
eviction's deleteOptions) and answers 201 with a Success Status; a blocked one answers 429
TooManyRequests with details.causes[0].reason "DisruptionBudget". An eviction a budget allowed
writes that budget's status as the real server does: one disruption taken (disruptionsAllowed),
the pod in disruptedPods; nothing else keeps the status up to date.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from exporter.model.rfc3339 import format_time
from nodesync_sim.fake.apiserver import errors
from nodesync_sim.fake.apiserver.deletion import DeleteOptions
from nodesync_sim.fake.apiserver.objects import JSONObject, StoredObject
from nodesync_sim.fake.apiserver.patch import MERGE_PATCH
from nodesync_sim.fake.apiserver.resources import PODDISRUPTIONBUDGETS, PODS
from nodesync_sim.fake.apiserver.selectors import label_selector_from_object
from nodesync_sim.fake.apiserver.store import Store

EVICTION_VERSIONS = frozenset({"policy/v1", "policy/v1beta1"})


@dataclass(frozen=True, slots=True)
class Budget:
    name: str
    expected: int
    desired: int
    healthy: int

    @property
    def allowed(self) -> int:
        return max(0, self.healthy - self.desired)


def is_healthy(pod: JSONObject) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def compute_budget(pdb: JSONObject, pods: list[StoredObject]) -> Budget:
    spec = pdb.get("spec") or {}
    selector = label_selector_from_object(spec.get("selector"))
    matching = [] if selector is None else [p for p in pods if selector.matches_object(p.obj)]
    expected = len(matching)
    healthy = sum(1 for p in matching if is_healthy(p.obj))
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    elif spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    else:
        desired = expected
    return Budget(pdb["metadata"]["name"], expected, desired, healthy)


def _delete_options(body: JSONObject) -> DeleteOptions:
    opts = body.get("deleteOptions") or {}
    pre = opts.get("preconditions") or {}
    grace = opts.get("gracePeriodSeconds")
    return DeleteOptions(
        grace_period_seconds=int(grace) if grace is not None else None,
        precondition_uid=pre.get("uid"),
        precondition_resource_version=pre.get("resourceVersion"),
        propagation_policy=opts.get("propagationPolicy"),
    )


def evict(store: Store, namespace: str, name: str, body: Any, *, dry_run: bool = False) -> None:
    """Evict pod `namespace/name`; raises APIError (404, 400, 429, 500) when it may not."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be a JSON object")
    if body.get("apiVersion") not in EVICTION_VERSIONS or body.get("kind") != "Eviction":
        raise errors.bad_request(
            f"the body must be a policy/v1 Eviction, got {body.get('apiVersion')}/"
            f"{body.get('kind')}"
        )
    body_name = (body.get("metadata") or {}).get("name")
    if body_name != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = _delete_options(body)
    with store.lock:
        pod = store.get_object(PODS, namespace, name)
        phase = (pod.obj.get("status") or {}).get("phase")
        ignore_pdb = phase in ("Pending", "Succeeded", "Failed") or bool(
            pod.metadata.get("deletionTimestamp")
        )
        taken = None if ignore_pdb else _check_budgets(store, namespace, pod)
        store.delete_object(PODS, namespace, name, options, dry_run=dry_run)
        if taken is not None and not dry_run:
            _take_disruption(store, namespace, name, *taken)


def _take_disruption(
    store: Store, namespace: str, pod: str, pdb: StoredObject, budget: Budget
) -> None:
    """Write the budget's status as a real server's eviction does after allowing one: the
    disruption taken, and the pod among disruptedPods until the controller sees it go."""
    status = pdb.obj.get("status") or {}
    status = {
        **status,
        "observedGeneration": pdb.metadata.get("generation", 1),
        "disruptionsAllowed": max(0, budget.allowed - 1),
        "currentHealthy": budget.healthy,
        "desiredHealthy": budget.desired,
        "expectedPods": budget.expected,
        "disruptedPods": {**(status.get("disruptedPods") or {}), pod: format_time(store.clock())},
    }
    store.patch_object(
        PODDISRUPTIONBUDGETS, namespace, pdb.name, MERGE_PATCH, {"status": status},
        subresource="status",
    )  # fmt: skip


def _check_budgets(
    store: Store, namespace: str, pod: StoredObject
) -> tuple[StoredObject, Budget] | None:
    """The budget that allows evicting ``pod`` (None: no budget applies); raises 429 when the
    budget does not allow it."""
    pdbs = [
        p
        for p in store.list_objects(PODDISRUPTIONBUDGETS, namespace).items
        if (sel := label_selector_from_object((p.obj.get("spec") or {}).get("selector")))
        is not None
        and sel.matches_object(pod.obj)
    ]
    if not pdbs:
        return None
    if len(pdbs) > 1:
        raise errors.internal(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support."
        )
    pdb = pdbs[0].obj
    pods = store.list_objects(PODS, namespace).items
    budget = compute_budget(pdb, pods)
    if not is_healthy(pod.obj):
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if policy == "AlwaysAllow" or budget.healthy >= budget.desired:
            return None  # an unhealthy pod takes no disruption from the budget
    elif budget.allowed > 0:
        return pdbs[0], budget
    raise errors.too_many_requests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        None,
        [
            {
                "reason": "DisruptionBudget",
                "message": f"The disruption budget {budget.name} needs {budget.desired} healthy "
                f"pods and has {budget.healthy} currently",
            }
        ],
    )
