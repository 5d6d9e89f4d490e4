"""A node's health as the rollback guards judge it, and the correlated-failure guard's counts
kept current as nodes change and as time passes (pure; the time is passed in).

What the guards need of a node is three numbers (:class:`NodeHealth`): when it was created,
since when its Ready condition is not True (None while it is), and its Lease's last renewal.
From them, at a time ``now``:

- the Lease is *stale* when it was renewed longer than ``grace`` ago (a node without a renewal
  is judged by Ready alone);
- the node is *failing* when Ready is not True or its Lease is stale; it has been failing since
  the earlier of the two (the Ready transition, the last renewal);
- the node is *established* when it joined at least ``window`` ago and did not start failing
  inside its window (a failed join stays a failed join).

:class:`HealthIndex` counts the established nodes and those of them failing, as
:func:`counts` does over every node, without looking at every node for each answer: a node is
looked at again when it changes (``set``) and when one of its two deadlines passes (its window
ends, its Lease goes stale), which a heap keeps in order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.model.kube import NodeCondition

#: Deadlines are looked at this much early: the predicates below compare differences of floats,
#: which may flip a few units in the last place before ``created + window`` does. Looking early
#: is harmless (the node is looked at again when it is due).
_EARLY = 1e-3


@dataclass(frozen=True, slots=True)
class NodeHealth:
    created_at: float
    ready_since: float | None  # None while Ready is True; else its transition (or creation)
    lease_renew_time: float | None  # None when the node has no Lease or it was never renewed


def node_health(
    conditions: Iterable[NodeCondition], created_at: float, lease_renew_time: float | None
) -> NodeHealth:
    ready = next((c for c in conditions if c.type == "Ready"), None)
    if ready is not None and ready.status == "True":
        since = None
    elif ready is not None and ready.last_transition is not None:
        since = ready.last_transition
    else:
        since = created_at
    return NodeHealth(created_at, since, lease_renew_time)


def lease_stale(lease_renew_time: float | None, now: float, grace: float) -> bool:
    """The Lease was renewed, but longer than ``grace`` ago. A node without a Lease is judged by
    its Ready condition alone."""
    return lease_renew_time is not None and now - lease_renew_time > grace


def failing_since(health: NodeHealth, now: float, grace: float) -> float | None:
    """Since when the node has been failing (None while it is healthy): Ready's last transition
    when Ready is not True (creation when unknown), the last renewal when the Lease is stale;
    the earlier of the two."""
    since = health.ready_since
    renew = health.lease_renew_time
    if renew is not None and lease_stale(renew, now, grace):
        since = renew if since is None else min(since, renew)
    return since


def is_failing(health: NodeHealth, now: float, grace: float) -> bool:
    """Ready is not True (False, Unknown, not reported), or the Lease is stale."""
    return health.ready_since is not None or lease_stale(health.lease_renew_time, now, grace)


def is_recovered(
    conditions: Iterable[NodeCondition],
    lease_renew_time: float | None,
    now: float,
    grace: float,
    *,
    failing_when_decided: bool,
    alert_started_at: float,
) -> bool:
    """The node recovered from a failure the API server showed (of a Node read live: a rollback
    stops when its node recovered): Ready is True and the Lease was renewed within ``grace``,
    and the node was failing when the rollback was decided, or its Ready turned True after the
    alert started. A node the API server showed healthy all along was rolled back on other
    evidence (a frozen runtime: kubelet keeps the node Ready and the Lease fresh for minutes),
    about which Ready and the Lease say nothing."""
    ready = next((c for c in conditions if c.type == "Ready"), None)
    if (
        ready is None
        or ready.status != "True"
        or lease_renew_time is None
        or now - lease_renew_time > grace
    ):
        return False
    return failing_when_decided or (
        ready.last_transition is not None and ready.last_transition > alert_started_at
    )


def is_established(health: NodeHealth, now: float, window: float, grace: float) -> bool:
    """Joined at least ``window`` ago, and did not start failing inside its window."""
    if now - health.created_at < window:
        return False
    since = failing_since(health, now, grace)
    return since is None or since - health.created_at >= window


def judge(health: NodeHealth, now: float, window: float, grace: float) -> tuple[bool, bool]:
    """(established, established and failing) at ``now``."""
    established = is_established(health, now, window, grace)
    return established, established and is_failing(health, now, grace)


def counts(nodes: Iterable[NodeHealth], now: float, window: float, grace: float) -> tuple[int, int]:
    """Established nodes, and how many of them fail, at ``now``: every node looked at."""
    established = failing = 0
    for health in nodes:
        e, f = judge(health, now, window, grace)
        established += e
        failing += f
    return established, failing


def _next_change(health: NodeHealth, now: float, window: float, grace: float) -> float | None:
    """When the node's judgement may change next, nothing else changing (None: never)."""
    due: list[float] = []
    if now - health.created_at < window:
        due.append(health.created_at + window)
    renew = health.lease_renew_time
    if renew is not None and not lease_stale(renew, now, grace):
        due.append(renew + grace)
    if not due:
        return None
    at = min(due) - _EARLY
    return at if at > now else math.nextafter(now, math.inf)


class HealthIndex:
    """The counts of :func:`counts` for the nodes given with ``set`` (and not ``remove``\\ d),
    kept current: ``counts(now)`` looks only at the nodes that changed since the last answer and
    those a deadline of which passed. Asked about an earlier time than the last answer, it
    looks at every node again."""

    def __init__(self, window: float, grace: float) -> None:
        self.window = window
        self.grace = grace
        self._health: dict[str, NodeHealth] = {}
        self._judged: dict[str, tuple[bool, bool]] = {}
        self._changed: set[str] = set()
        self._due: list[tuple[float, str]] = []  # (deadline, key); stale entries skipped
        self._deadline: dict[str, float] = {}  # the valid deadline of each key in the heap
        self._at: float | None = None  # the time of the last answer
        self._established = 0
        self._failing = 0

    def __len__(self) -> int:
        return len(self._health)

    def set(self, key: str, health: NodeHealth) -> None:
        if self._health.get(key) == health:
            return
        self._health[key] = health
        self._changed.add(key)

    def remove(self, key: str) -> None:
        if self._health.pop(key, None) is None:
            return
        self._changed.discard(key)
        self._deadline.pop(key, None)
        e, f = self._judged.pop(key, (False, False))
        self._established -= e
        self._failing -= f

    def counts(self, now: float) -> tuple[int, int]:
        if self._at is None or now < self._at:
            self._changed = set(self._health)
            self._due.clear()
            self._deadline.clear()
        else:
            while self._due and self._due[0][0] <= now:
                at, key = heapq.heappop(self._due)
                if self._deadline.get(key) == at:
                    del self._deadline[key]
                    self._changed.add(key)
        for key in self._changed:
            self._judge(key, now)
        self._changed.clear()
        self._at = now
        if len(self._due) > 4 * len(self._deadline) + 64:  # drop the stale entries
            self._due = [(at, k) for at, k in self._due if self._deadline.get(k) == at]
            heapq.heapify(self._due)
        return self._established, self._failing

    def _judge(self, key: str, now: float) -> None:
        health = self._health[key]
        e, f = judge(health, now, self.window, self.grace)
        old_e, old_f = self._judged.get(key, (False, False))
        self._established += e - old_e
        self._failing += f - old_f
        self._judged[key] = (e, f)
        at = _next_change(health, now, self.window, self.grace)
        if at is None:
            self._deadline.pop(key, None)
        else:
            self._deadline[key] = at
            heapq.heappush(self._due, (at, key))
