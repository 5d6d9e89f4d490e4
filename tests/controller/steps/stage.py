"""What the tests of the steps stage: the test API server with one node, a StepRunner on it,
and NodeRollbacks built in memory (the steps read and write Nodes, Pods and Evictions, never
the NodeRollback itself: the executor records their outcomes)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from exporter.controller.coordination import Pause
from exporter.controller.settings import ExecutorSettings
from exporter.controller.steps import (
    StepRunner,
)
from exporter.model.rfc3339 import format_time
from exporter.model.rollback import (
    CLEANUP_STATUS_ANNOTATION,
    Action,
    NodeRollback,
    PodTarget,
    RollbackSpec,
    StepKind,
    StepState,
    Trigger,
    Verdicts,
)
from exporter.model.rollback_state import (
    initial_status,
    start_step,
)
from exporter.settings.declare import changed
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.store import Store

NODE = "worker-1"
SETTINGS = changed(
    ExecutorSettings(), eviction_timeout=60.0, cleanup_ack_timeout=30.0, cleanup_timeout=300.0
)


@dataclasses.dataclass
class Env:
    server: APIServer
    runner: StepRunner
    leases: dict[str, float]
    paused: Pause

    @property
    def store(self) -> Store:
        return self.server.store

    def node(self) -> dict[str, Any] | None:
        return self.store.try_get("nodes", NODE)

    def uid(self) -> str:
        return str(self.store.get("nodes", NODE)["metadata"]["uid"])

    def annotations(self) -> dict[str, str]:
        return dict((self.node() or {}).get("metadata", {}).get("annotations") or {})

    def answer(
        self, request: str, state: str, error: str = "", remaining: dict[str, Any] | None = None
    ) -> None:
        """The node's agent writes its cleanup status (``remaining`` only when given: an agent
        that does not report it leaves the key out)."""
        status: dict[str, Any] = {
            "id": request,
            "state": state,
            "removedSandboxes": 1,
            "removedContainers": 2,
            "skipped": 0,
            "finishedAt": format_time(time.time()),
            "error": error,
        }
        if remaining is not None:
            status["remaining"] = remaining
        patch = {"metadata": {"annotations": {CLEANUP_STATUS_ANNOTATION: json.dumps(status)}}}
        self.store.patch("nodes", NODE, patch)


def rollback(
    env: Env,
    action: Action = Action.ROLLBACK_NODE,
    *,
    delete_node: bool = False,
    paused: bool = False,
    pod: PodTarget | None = None,
) -> NodeRollback:
    spec = RollbackSpec(
        node=NODE,
        node_uid=env.uid(),
        action=action,
        trigger=Trigger("NodesyncNewNodeNotReady", "fp", 1000.0),
        decision=Verdicts(decided_at=time.time()),
        delete_node=delete_node,
        pod=pod,
        paused=paused,
    )
    return NodeRollback("nr-1", spec, initial_status(spec), uid="3b1c9a4e-uid")


def at(r: NodeRollback, kind: StepKind) -> int:
    return next(i for i, s in enumerate(r.status.steps) if s.kind is kind)


def started(
    r: NodeRollback,
    kind: StepKind,
    observed: dict[str, str] | None = None,
    *,
    ago: float = 0.0,
    done_before: StepState = StepState.DONE,
    reason: str = "",
) -> NodeRollback:
    """``r`` with the steps before ``kind`` finished and ``kind`` running since ``ago`` s."""
    index = at(r, kind)
    steps = tuple(
        dataclasses.replace(s, state=done_before, reason=reason) if i < index else s
        for i, s in enumerate(r.status.steps)
    )
    status = dataclasses.replace(r.status, steps=steps)
    status = start_step(status, index, time.time() - ago, observed)
    return dataclasses.replace(r, status=status)
