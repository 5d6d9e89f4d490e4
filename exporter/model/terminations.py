"""Container terminations as the agent observes them, and OOM / crash loops derived from them.

The runtime lists each container attempt kubelet created (``attempt`` is kubelet's restart count
for that container in that sandbox). Between two polls a container may restart, and kubelet's
garbage collection may remove old exited attempts, so terminations are counted by attempt number:
every attempt below the highest one seen has terminated, with the reason of its exited record if
the agent saw it, else with reason ``unknown``. An exited record that is not ``settled`` yet (its
reason may still become OOMKilled) is counted once it is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from exporter.model.runtime import (
    OOM_KILLED,
    Container,
    ContainerState,
)

REASON_OOM_KILLED: Final = OOM_KILLED
REASON_ERROR: Final = "Error"
REASON_COMPLETED: Final = "Completed"
REASON_OTHER: Final = "other"
REASON_UNKNOWN: Final = "unknown"

#: The bounded set of reason label values, in a stable order.
REASONS: Final = (REASON_OOM_KILLED, REASON_ERROR, REASON_COMPLETED, REASON_OTHER, REASON_UNKNOWN)

LoopKind = Literal["oom_loop", "crash_loop"]


def bucket_reason(reason: str, exit_code: int | None) -> str:
    """Map a runtime's termination reason to one of :data:`REASONS`.

    containerd reports OOMKilled, Error (non-zero exit) or Completed (exit 0). An empty reason is
    derived from the exit code; any other reason string is ``other``; no reason and no exit
    code is ``unknown``.
    """
    if reason in (REASON_OOM_KILLED, REASON_ERROR, REASON_COMPLETED):
        return reason
    if reason:
        return REASON_OTHER
    if exit_code is None:
        return REASON_UNKNOWN
    return REASON_COMPLETED if exit_code == 0 else REASON_ERROR


@dataclass(frozen=True, slots=True)
class LoopState:
    namespace: str
    pod: str
    container: str
    kind: LoopKind
    terminations: int
    last_termination_at: float


@dataclass(frozen=True, slots=True)
class _Termination:
    at: float
    oom: bool
    non_zero: bool


@dataclass(slots=True)
class _Progress:
    """Attempts of one container name in one sandbox: all attempts <= done_through are counted."""

    done_through: int = -1
    last_seen: float = 0.0


@dataclass(slots=True)
class _History:
    namespace: str
    pod: str
    container: str
    progress: dict[str, _Progress] = field(default_factory=dict)
    recent: deque[_Termination] = field(default_factory=deque)


def _pod_uid(c: Container) -> str:
    return c.pod_uid or c.pod_sandbox_id


def _name(c: Container) -> str:
    return c.name


class TerminationTracker:
    """Counts container terminations by reason and finds containers in OOM or crash loops.

    Pure: no I/O, the caller passes the time. Keyed by (pod uid, container name); within a key,
    each sandbox's attempts are tracked separately because a recreated sandbox restarts attempts
    at 0. The same (pod uid, container name, sandbox, attempt) is never counted twice.
    """

    def __init__(
        self,
        *,
        oom_loop_threshold: int = 2,
        crash_loop_threshold: int = 3,
        loop_window_seconds: float = 600.0,
    ) -> None:
        if oom_loop_threshold < 1 or crash_loop_threshold < 1 or loop_window_seconds <= 0:
            raise ValueError("loop thresholds must be >= 1 and the window > 0")
        self.oom_loop_threshold = oom_loop_threshold
        self.crash_loop_threshold = crash_loop_threshold
        self.loop_window_seconds = loop_window_seconds
        self._totals: dict[str, int] = dict.fromkeys(REASONS, 0)
        self._histories: dict[tuple[str, str], _History] = {}
        self._present_pods: set[str] = set()
        # The last listing observed (a tuple) and what it was grouped into. While the same
        # tuple comes again, its sandboxes are seen at ``_listing_seen`` (written into their
        # progress when the listing changes), and only what time can change is visited: the
        # histories with terminations or more than one sandbox (``_watched``), those of pods
        # no longer listed (``_absent``), and for the loops those with terminations
        # (``_with_recent``). A listing brings the only new terminations, so these stay
        # supersets of what they name until the next one.
        self._listing: tuple[Container, ...] | None = None
        self._listed: list[tuple[_History, _Progress]] = []
        self._listing_seen = 0.0
        self._watched: list[tuple[_History, _Progress]] = []
        self._absent: list[tuple[str, str]] = []
        self._with_recent: list[tuple[str, str]] = []

    def observe(self, containers: Sequence[Container], now: float) -> None:
        """Count the terminations visible in one full listing of the runtime's containers.

        The previous listing again (the same tuple: nothing changed, as the agent's reader
        hands it back) holds no new attempt: only the time moves on, what ages out of the
        window is pruned, and nothing is grouped or counted again."""
        if isinstance(containers, tuple) and containers is self._listing:
            self._listing_seen = now
            for history, progress in self._watched:
                progress.last_seen = now
                self._prune(history, now)
            if self._absent:
                self._forget(self._present_pods, now, self._absent)
                self._absent = [k for k in self._absent if k in self._histories]
            return
        for _, progress in self._listed:  # seen until now, as the listing came again
            progress.last_seen = max(progress.last_seen, self._listing_seen)
        groups: dict[tuple[str, str, str], list[Container]] = {}
        for c in containers:
            groups.setdefault((_pod_uid(c), _name(c), c.pod_sandbox_id), []).append(c)
        listed: list[tuple[_History, _Progress]] = []
        for (uid, name, sandbox_id), attempts in groups.items():
            history = self._history(uid, name, attempts)
            progress = history.progress.setdefault(sandbox_id, _Progress())
            progress.last_seen = now
            self._count(history, progress, attempts, now)
            listed.append((history, progress))
        self._present_pods = {uid for uid, _, _ in groups}
        self._forget(self._present_pods, now, list(self._histories))
        self._listing = containers if isinstance(containers, tuple) else None
        self._listed = listed
        self._listing_seen = now
        self._watched = [(h, p) for h, p in listed if h.recent or len(h.progress) > 1]
        self._absent = [k for k in self._histories if k[0] not in self._present_pods]
        self._with_recent = [
            k for k, h in self._histories.items() if h.recent and k[0] in self._present_pods
        ]

    def totals(self) -> Mapping[str, int]:
        """Terminations counted since the tracker was created, per reason (all reasons present)."""
        return dict(self._totals)

    def loops(self, now: float) -> list[LoopState]:
        """Containers currently in an OOM loop or a crash loop, sorted by identity and kind.

        Only pods the runtime still holds: once a pod is gone (evicted, deleted), its loop is
        over, even though its terminations stay in the window for the counts."""
        result: list[LoopState] = []
        since = now - self.loop_window_seconds
        for key in self._with_recent:
            history = self._histories[key]
            if not history.recent:
                continue
            window = [t for t in history.recent if since < t.at <= now]
            checks: tuple[tuple[LoopKind, list[float], int], ...] = (
                ("oom_loop", [t.at for t in window if t.oom], self.oom_loop_threshold),
                ("crash_loop", [t.at for t in window if t.non_zero], self.crash_loop_threshold),
            )
            for kind, times, threshold in checks:
                if len(times) >= threshold:
                    result.append(
                        LoopState(
                            namespace=history.namespace,
                            pod=history.pod,
                            container=history.container,
                            kind=kind,
                            terminations=len(times),
                            last_termination_at=max(times),
                        )
                    )
        result.sort(key=lambda s: (s.namespace, s.pod, s.container, s.kind))
        return result

    def tracked_containers(self) -> int:
        """How many (pod uid, container name) keys are remembered (for bounded-memory checks)."""
        return len(self._histories)

    def _history(self, uid: str, name: str, attempts: Iterable[Container]) -> _History:
        newest = max(attempts, key=lambda c: (c.attempt, c.created_at))
        namespace = newest.pod_namespace
        pod = newest.pod_name
        history = self._histories.get((uid, name))
        if history is None:
            history = _History(namespace=namespace, pod=pod, container=name)
            self._histories[(uid, name)] = history
        else:
            history.namespace = namespace or history.namespace
            history.pod = pod or history.pod
        return history

    def _count(
        self,
        history: _History,
        progress: _Progress,
        attempts: Sequence[Container],
        now: float,
    ) -> None:
        exited = {c.attempt: c for c in attempts if c.state is ContainerState.EXITED}
        highest = max(c.attempt for c in attempts)
        done_through = highest if highest in exited else highest - 1
        unsettled = [attempt for attempt, c in exited.items() if not c.settled]
        if unsettled:
            # Its record may still change (OOMKilled on its way): counted once it is final,
            # and so is every later attempt, to keep "all attempts <= done_through counted".
            done_through = min(done_through, min(unsettled) - 1)
        for attempt in range(progress.done_through + 1, done_through + 1):
            record = exited.get(attempt)
            if record is None:
                # Superseded by a later attempt, but its exited record was never seen.
                self._totals[REASON_UNKNOWN] += 1
                continue
            reason = bucket_reason(record.reason, record.exit_code)
            self._totals[reason] += 1
            non_zero = reason in (REASON_OOM_KILLED, REASON_ERROR) or (
                record.exit_code is not None and record.exit_code != 0
            )
            at = record.finished_at if record.finished_at is not None else now
            history.recent.append(
                _Termination(at=at, oom=reason == REASON_OOM_KILLED, non_zero=non_zero)
            )
        progress.done_through = max(progress.done_through, done_through)
        self._prune(history, now)

    def _prune(self, history: _History, now: float) -> None:
        since = now - self.loop_window_seconds
        kept = sorted((t for t in history.recent if t.at > since), key=lambda t: t.at)
        history.recent = deque(kept)
        # A sandbox not listed for a whole window is gone for good (sandbox ids are never reused).
        for sandbox_id in [s for s, p in history.progress.items() if p.last_seen <= since]:
            del history.progress[sandbox_id]

    def _forget(self, present_pods: set[str], now: float, keys: Iterable[tuple[str, str]]) -> None:
        """Forget, of the histories ``keys`` names, those of pods not listed whose terminations
        all left the window."""
        since = now - self.loop_window_seconds
        for key in [
            k
            for k in keys
            if k[0] not in present_pods and all(t.at <= since for t in self._histories[k].recent)
        ]:
            del self._histories[key]
