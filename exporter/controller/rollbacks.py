"""The NodeRollbacks in the cluster, as a watch keeps them: the guards' record of what was
decided (every replica sees the same), and the executor's list of what to drive."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from exporter.kube.api import KubeAPI
from exporter.kube.informer import Informer
from exporter.kube.noderollbacks import NODEROLLBACKS, node_rollback
from exporter.model.guards import GuardState
from exporter.model.rollback import NodeRollback, Phase


class RollbackWatch:
    """A list+watch cache of every NodeRollback."""

    def __init__(self, api: KubeAPI) -> None:
        self.informer: Informer[NodeRollback] = Informer(
            api, NODEROLLBACKS, node_rollback, name="noderollbacks"
        )

    @property
    def synced(self) -> bool:
        return self.informer.synced

    async def wait_synced(self) -> None:
        await self.informer.wait_synced()

    async def run(self) -> None:
        await self.informer.run()

    def get(self, name: str) -> NodeRollback | None:
        return self.informer.store.get(name)

    def all(self) -> Iterator[NodeRollback]:
        return iter(list(self.informer.store.values()))

    def active(self) -> list[NodeRollback]:
        """The unfinished ones, oldest first (the order they are driven in)."""
        return sorted((r for r in self.all() if r.active), key=lambda r: (r.created_at, r.name))

    def guard_state(self) -> GuardState:
        return GuardState.of(self.all())

    def phases(self) -> dict[Phase, int]:
        counts = Counter(r.status.phase for r in self.all())
        return {phase: counts.get(phase, 0) for phase in Phase}

    def reasons(self) -> dict[tuple[Phase, str], int]:
        """Rollbacks waiting, failed or cancelled, by phase and reason (for the metrics)."""
        return dict(
            Counter(
                (r.status.phase, r.status.reason)
                for r in self.all()
                if r.status.reason and r.status.phase is not Phase.SUCCEEDED
            )
        )
