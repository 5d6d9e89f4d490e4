"""What happened in the test API server, for checking who wrote what: a write audit by user (the
server's authorization hook) and the history of the Node objects (a store listener).

Each component of the local chain talks to the API server with its own token, so the audit
tells the controller's writes from the simulated kubelets' and the agent's.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from nodesync_sim.fake.apiserver.objects import Change

WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: float
    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str

    @property
    def target(self) -> str:
        """``nodes/<name>``, ``pods/<name>/eviction``, ``events`` (a create has no name)."""
        parts = [self.resource, self.name, self.subresource]
        return "/".join(p for p in parts if p)


class WriteAudit:
    """An authorizer (nodesync_sim.fake.apiserver.auth.Authorizer) that allows everything and
    records every write request, before it is served (refused writes are attempts too)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.entries: list[AuditEntry] = []

    def __call__(
        self, user: str, verb: str, resource: str, subresource: str, namespace: str, name: str
    ) -> bool:
        if verb in WRITE_VERBS:
            self.entries.append(
                AuditEntry(self._clock(), user, verb, resource, subresource, namespace, name)
            )
        return True

    def by(self, user: str) -> list[AuditEntry]:
        return [e for e in self.entries if e.user == user]


class ObjectHistory:
    """Every state a kind's objects went through, by name (a store listener: it only copies)."""

    def __init__(self, plural: str, clock: Callable[[], float] = time.time) -> None:
        self.plural = plural
        self._clock = clock
        self.states: dict[str, list[tuple[float, str, dict[str, Any]]]] = {}

    def __call__(self, change: Change) -> None:
        if change.rt.plural != self.plural:
            return
        obj = change.obj.obj
        name = str(obj.get("metadata", {}).get("name", change.key))
        self.states.setdefault(name, []).append((self._clock(), change.type, copy.deepcopy(obj)))

    def last_before_deletion(self, name: str) -> dict[str, Any] | None:
        """The object as it was when it was deleted (None if it was not)."""
        for _, kind, obj in reversed(self.states.get(name, [])):
            if kind == "DELETED":
                last: dict[str, Any] = obj
                return last
        return None
