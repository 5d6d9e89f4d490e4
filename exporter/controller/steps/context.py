"""What every step kind works with: the writer, the executor's settings, the node's Lease as
the controller's cache holds it, the correlated-failure guard, the clock; and the type of a
step kind's handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from exporter.controller.audit import node_ref
from exporter.controller.coordination import Pause
from exporter.controller.settings import ExecutorSettings
from exporter.controller.steps.outcome import StepError, Wait
from exporter.kube.errors import KubeError
from exporter.kube.writer import KubeWriter
from exporter.model.kube import NodeInfo
from exporter.model.rollback import NodeRollback
from exporter.model.rollback_state import StepResult


@dataclass(frozen=True, slots=True)
class StepContext:
    """``lease(node)`` reads the node's Lease renew time from the controller's cache (the Node
    itself is read live before every step); ``pause`` tells whether the correlated-failure
    guard pauses rollbacks now."""

    writer: KubeWriter
    settings: ExecutorSettings
    lease: Callable[[str], float | None]
    pause: Pause
    clock: Callable[[], float]
    poll: float

    async def node(self, rollback: NodeRollback) -> NodeInfo | None:
        """The rollback's Node, read live (None: gone); a failed read raises StepError."""
        try:
            return await self.writer.reads.get_node(rollback.spec.node)
        except KubeError as exc:
            raise StepError(exc, node_ref(rollback)) from exc

    def started(self, rollback: NodeRollback, index: int) -> float:
        """When step ``index`` was first attempted (recorded in the status; now, if never):
        timeouts count from there, across retries and restarts of the controller."""
        started = rollback.status.steps[index].started_at
        return started if started is not None else self.clock()

    def unreachable(self, node: NodeInfo) -> bool:
        """No Lease, or one older than the grace period: the node (and its agent) is dark."""
        renewed = self.lease(node.name)
        grace = self.settings.policy.node_monitor_grace_period
        return renewed is None or self.clock() - renewed > grace


#: A step kind's action, given the rollback, the step's index and the Node read just before.
NodeHandler = Callable[[StepContext, NodeRollback, int, NodeInfo], Awaitable[StepResult | Wait]]
#: A step kind's action that reads what it needs itself.
Handler = Callable[[StepContext, NodeRollback, int], Awaitable[StepResult | Wait]]
