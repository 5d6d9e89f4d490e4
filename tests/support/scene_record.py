"""What the cluster and the audit log say about an acceptance test's scene
(tests/support/controllers.py): :class:`SceneRecord`, the writes it reads (:class:`Write`)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from nodesync_sim.real.kube_apiserver import LocalKubeAPIServer
from tests.support.acceptance import CLEANUP_REQUEST, DEADLINE, NODEROLLBACKS, POLL, ROLLBACK_TAINT
from tests.support.wait import until


@dataclass(frozen=True)
class Write:
    """A write the API server's audit log recorded."""

    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    body: Any

    @classmethod
    def of(cls, event: dict[str, Any]) -> Write:
        ref = event.get("objectRef") or {}
        return cls(
            user=(event.get("user") or {}).get("username", ""),
            verb=event.get("verb", ""),
            resource=ref.get("resource", ""),
            subresource=ref.get("subresource", ""),
            namespace=ref.get("namespace", ""),
            name=ref.get("name", ""),
            code=int((event.get("responseStatus") or {}).get("code") or 0),
            body=event.get("requestObject"),
        )

    @property
    def effect(self) -> str:
        """What a controller's write on a Node or Pod did: cordon, uncordon, taint, untaint,
        cleanup_request, eviction, delete_node ("" for anything else)."""
        body: dict[str, Any] = self.body if isinstance(self.body, dict) else {}
        spec: dict[str, Any] = body["spec"] if isinstance(body.get("spec"), dict) else {}
        if self.resource == "nodes" and self.verb == "delete":
            return "delete_node"
        if self.resource == "pods" and self.subresource == "eviction" and self.verb == "create":
            return "eviction"
        if self.resource != "nodes" or self.verb != "patch":
            return ""
        if "unschedulable" in spec:
            return "cordon" if spec["unschedulable"] is True else "uncordon"
        if "taints" in spec:
            keys = {t.get("key") for t in spec["taints"] or ()}
            return "taint" if ROLLBACK_TAINT in keys else "untaint"
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        if CLEANUP_REQUEST in annotations:
            return "cleanup_request"
        return "patch"


#: The steps an effect belongs to (its intent must be recorded first).
EFFECT_STEPS = {
    "cordon": {"cordon"},
    "taint": {"taint"},
    "eviction": {"drain", "evict_pod"},
    "cleanup_request": {"cleanup_runtime"},
    "delete_node": {"delete_node"},
}


class SceneRecord:
    """What the cluster says about a :class:`~tests.support.scene.Scene`: its NodeRollbacks,
    Events, and the controllers' writes as the audit log recorded them."""

    server: LocalKubeAPIServer
    namespace: str
    nodes: list[str]
    _audit_start: int

    @property
    def controller_user(self) -> str:
        raise NotImplementedError

    def rollbacks(self) -> list[dict[str, Any]]:
        """This scene's NodeRollbacks, oldest first."""
        items = self.server.ok("GET", NODEROLLBACKS)["items"]
        mine = [r for r in items if r.get("spec", {}).get("nodeName") in self.nodes]
        return sorted(
            mine, key=lambda r: (r["metadata"]["creationTimestamp"], r["metadata"]["name"])
        )

    def phases(self) -> list[str]:
        """The phase of each of this scene's NodeRollbacks, oldest first ("" before the
        first status)."""
        return [str(r.get("status", {}).get("phase", "")) for r in self.rollbacks()]

    def events(self, node: str) -> list[dict[str, Any]]:
        """The Events about ``node`` (and about this scene's pods on it)."""
        selector = f"involvedObject.name={node}"
        found: list[dict[str, Any]] = self.server.ok(
            "GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}"
        )["items"]
        return found

    def pod_events(self, pod: str) -> list[dict[str, Any]]:
        selector = f"involvedObject.name={pod}"
        found: list[dict[str, Any]] = self.server.ok(
            "GET", f"/api/v1/namespaces/{self.namespace}/events?fieldSelector={selector}"
        )["items"]
        return found

    def event_reasons(self, node: str) -> Counter[str]:
        return Counter(e["reason"] for e in self.events(node))

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log since the scene began (complete lines only)."""
        with self.server.audit_log.open("rb") as log:
            log.seek(self._audit_start)
            text = log.read().decode()
        return [json.loads(line) for line in text.split("\n")[:-1] if line]

    def writes(self) -> list[Write]:
        """The controllers' writes so far (the audit log since the scene began)."""
        events = self.audit_events()
        return [
            w
            for w in map(Write.of, events)
            if w.user == self.controller_user and w.verb in ("create", "update", "patch", "delete")
        ]

    def effects(self) -> Counter[tuple[str, str]]:
        """(effect, object name) of the controllers' writes on this scene's Nodes and pods
        that the API server carried out (2xx), counted: the effects that happened."""
        found: Counter[tuple[str, str]] = Counter()
        for w in self.writes():
            mine = w.name in self.nodes if w.resource == "nodes" else w.namespace == self.namespace
            if w.effect and mine and 200 <= w.code < 300:
                found[(w.effect, w.name)] += 1
        return found

    def check_the_record_came_first(self) -> None:
        """Intent before effect, as the audit log orders the writes: every effect on a Node or
        pod came after a status write (carrying the resourceVersion it read) that recorded its
        step running; every status write carried a resourceVersion."""
        running: set[str] = set()
        for w in self.writes():
            if w.resource == "noderollbacks" and w.subresource == "status":
                body = w.body if isinstance(w.body, dict) else {}
                assert (body.get("metadata") or {}).get("resourceVersion"), w
                steps = (body.get("status") or {}).get("steps") or ()
                running |= {s["name"] for s in steps if s.get("state") != "pending"}
                continue
            step = EFFECT_STEPS.get(w.effect)
            mine = w.name in self.nodes if w.resource == "nodes" else w.namespace == self.namespace
            if step is not None and mine:
                assert running & step, f"{w.effect} {w.name} before its step was recorded"

    def wait_audited(self, effect: str, name: str) -> None:
        """Until the audit log shows the effect (it is written right after the answer)."""
        until(
            lambda: self.effects()[(effect, name)] >= 1,
            timeout=DEADLINE,
            what=f"the audit log to show {effect} {name}",
            interval=POLL,
        )
