"""Drift: the three-way comparison of the API server's desired pods, the runtime and kubelet's dirs.

Everything is matched by pod uid. The result names every item exactly (pod uid, namespace, name,
sandbox and container ids), so a later cleanup acts on exactly what was reported and nothing else.

Safety rules the comparison keeps (a cleanup must never touch a desired pod's sandbox):

- A pod the API server lists is *desired*, whatever its phase, until it has been deleted for
  longer than its deletion grace period: ``deletion_timestamp + deletion_grace_period_seconds``.
  The API server already sets ``deletion_timestamp`` to the end of the grace period, so this
  waits up to twice that long on purpose: a live kubelet is stopping the pod.
- On a node whose kubelet is gone (:func:`kubelet_gone`), nobody will stop a pod being deleted:
  it is desired only until ``deletion_timestamp`` (the end of its grace period, once), and its
  sandboxes are orphans from then on, without the drift grace period below (that grace waits for
  kubelet's own garbage collection, and there is no kubelet). A deletion cannot be undone and a
  new pod of the same name has a new uid, so such a pod is never desired again.
- A mirror pod (the API object of a static pod) has another uid than the static pod kubelet
  runs, so its sandboxes are matched by namespace and name (static pod names carry the node name).
- A sandbox kubelet created from a static pod manifest (annotation
  ``kubernetes.io/config.source`` of ``file`` or ``http``) is kubelet's own, desired or not: it is
  never an orphan, even when the API server has no mirror pod for it (as while a node joins).
- Nothing is reported before it is older than the grace period, measured from ``since``. A
  sandbox of a pod the API server listed until recently (a deletion kubelet just confirmed, an
  eviction) drifts from when the agent last saw the pod listed (:func:`track_last_listed`), not
  from the sandbox's creation: kubelet's garbage collection gets its grace for it too. With the
  kubelet gone nobody collects, and that listing is not waited for.

Without the API server's view there is nothing to compare against: the caller then computes no
drift and exports no drift metrics at all, rather than reporting every sandbox as an orphan.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from exporter.model.kube import NodeInfo, PodInfo
from exporter.model.runtime import Container, PodSandbox, RuntimeSnapshot, SandboxState

#: Default grace period: kubelet syncs every 10 s and collects garbage every minute.
DEFAULT_GRACE_SECONDS = 60.0

#: Sandbox annotation kubelet copies from the pod: where the pod came from (api, file, http).
STATIC_SOURCES = frozenset({"file", "http"})


class DriftKind(enum.Enum):
    ORPHAN_SANDBOX = "orphan_sandbox"
    MISSING_SANDBOX = "missing_sandbox"
    ORPHAN_CONTAINER = "orphan_container"
    STALE_SANDBOX = "stale_sandbox"
    KUBELET_ONLY = "kubelet_only"


@dataclass(frozen=True, slots=True)
class DriftItem:
    """One drifted thing. ``since`` is when it started to drift (see each kind); ids are empty
    where the kind has none (``missing_sandbox`` and ``kubelet_only`` have no sandbox)."""

    kind: DriftKind
    pod_uid: str
    namespace: str
    name: str
    since: float
    sandbox_id: str = ""
    container_id: str = ""


@dataclass(frozen=True, slots=True)
class Drift:
    computed_at: float
    grace_seconds: float
    items: tuple[DriftItem, ...]

    def of(self, kind: DriftKind) -> tuple[DriftItem, ...]:
        return tuple(i for i in self.items if i.kind is kind)

    def counts(self) -> dict[DriftKind, int]:
        """Items per kind; every kind is present (0 when none)."""
        counts = dict.fromkeys(DriftKind, 0)
        for item in self.items:
            counts[item.kind] += 1
        return counts

    def oldest(self) -> dict[DriftKind, float]:
        """The earliest ``since`` per kind; only kinds with at least one item."""
        oldest: dict[DriftKind, float] = {}
        for item in self.items:
            seen = oldest.get(item.kind)
            if seen is None or item.since < seen:
                oldest[item.kind] = item.since
        return oldest


def is_static(sandbox: PodSandbox) -> bool:
    """Whether kubelet created the sandbox from a static pod (manifest file or URL)."""
    return sandbox.config_source in STATIC_SOURCES


def kubelet_gone(kubelet_healthy: bool | None, node: NodeInfo | None) -> bool:
    """Whether the node's kubelet is gone, as the agent can tell: BOTH its healthz probe fails
    (``kubelet_healthy`` False: no answer, or not "ok"; None: not probed) AND the node's Ready
    condition is ``Unknown`` (the node lifecycle controller's verdict once kubelet has posted
    no status for the node monitor grace period). A failed probe alone may be a slow kubelet on
    a busy node; Ready Unknown alone may be a kubelet that runs but cannot reach the API server.
    Ready ``False`` is posted by a kubelet that runs: never gone."""
    if kubelet_healthy is None or kubelet_healthy or node is None:
        return False
    ready = node.condition("Ready")
    return ready is not None and ready.status == "Unknown"


def desired_until(pod: PodInfo, *, kubelet_gone: bool = False) -> float | None:
    """When a pod stops being desired: None while it is not being deleted. With the kubelet
    gone, at ``deletion_timestamp`` (the end of its grace period): nobody stops it later."""
    if pod.deletion_timestamp is None:
        return None
    if kubelet_gone:
        return pod.deletion_timestamp
    return pod.deletion_timestamp + (pod.deletion_grace_period_seconds or 0)


def track_first_seen(
    previous: Mapping[str, float], pod_uids: Collection[str], now: float
) -> dict[str, float]:
    """When the agent first saw each of kubelet's pod dirs: carry ``previous`` over for uids still
    present, ``now`` for new ones; uids whose dir is gone are dropped. Call once per sync."""
    return {uid: previous.get(uid, now) for uid in pod_uids}


def track_last_listed(
    previous: Mapping[str, float],
    listed_uids: Collection[str],
    held_uids: Collection[str],
    now: float,
) -> dict[str, float]:
    """When the agent last saw each pod uid in the API server's list: ``now`` for the uids
    listed now; carried over from ``previous`` for uids no longer listed that the node still
    holds (``held_uids``: a sandbox, a container or a pod dir of theirs); dropped once it holds
    nothing of them. Call once per sync with a complete pod list."""
    listed = set(listed_uids)
    kept = {uid: at for uid, at in previous.items() if uid not in listed and uid in held_uids}
    return kept | dict.fromkeys(listed, now)


class _Desired:
    """The desired pods as of ``now``, and how runtime objects map onto them."""

    def __init__(
        self,
        pods: Iterable[PodInfo],
        now: float,
        kubelet_gone: bool,
        last_listed: Mapping[str, float],
    ) -> None:
        self.live: dict[str, PodInfo] = {}
        ended: dict[str, float] = {}
        pods = tuple(pods)
        for pod in pods:
            until = desired_until(pod, kubelet_gone=kubelet_gone)
            if until is None or now < until:
                self.live[pod.uid] = pod
            else:
                ended[pod.uid] = max(until, ended.get(pod.uid, until))
        # uid -> when it stopped being desired (a uid listed twice stays desired if either is).
        self.ended = {uid: t for uid, t in ended.items() if uid not in self.live}
        # Uids listed until recently (no longer listed now): they stopped being desired then,
        # and kubelet, when there is one, collects what is left of them within its grace.
        if not kubelet_gone:
            listed = {p.uid for p in pods}
            self.ended |= {uid: t for uid, t in last_listed.items() if uid not in listed}
        # Deleted pods nobody will stop: their sandboxes are orphans without the drift grace.
        self.abandoned = frozenset(self.ended) if kubelet_gone else frozenset()
        self.mirrors = {(p.namespace, p.name): p for p in self.live.values() if p.mirror}

    def owner(self, uid: str, namespace: str, name: str) -> PodInfo | None:
        """The desired pod a runtime object with this identity belongs to, if any."""
        pod = self.live.get(uid)
        return pod if pod is not None else self.mirrors.get((namespace, name))

    def since(self, uid: str, created_at: float) -> float:
        """When an undesired runtime object started to drift: its creation, or the end of its
        pod's deletion grace period when that is later."""
        return max(created_at, self.ended.get(uid, created_at))


def compute_drift(
    desired: Iterable[PodInfo],
    runtime: RuntimeSnapshot,
    kubelet_pod_uids: Collection[str],
    now: float,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    first_seen: Mapping[str, float] | None = None,
    last_listed: Mapping[str, float] | None = None,
    kubelet_gone: bool = False,
) -> Drift:
    """Compare the pods the API server has bound to this node (``desired``) with the runtime's
    snapshot and the pod uids kubelet has a directory for.

    An item is reported once ``now - since > grace_seconds``. The kinds:

    - ``orphan_sandbox``: a sandbox (any state) whose pod is not desired. Since: the sandbox's
      creation, or the end of its pod's deletion grace period when later, or (a pod no longer
      listed, with a live kubelet) when ``last_listed`` last saw its uid listed. With
      ``kubelet_gone``, a sandbox of a pod being deleted is one from ``deletion_timestamp`` on,
      reported at once (no grace period: no kubelet will remove it).
    - ``missing_sandbox``: a desired pod, bound to a node, not terminal and not being deleted,
      with no READY sandbox. Since: the pod's scheduled time, else its creation.
    - ``orphan_container``: a container whose sandbox the runtime no longer lists. Since: the
      container's creation. Containers of a listed sandbox are not counted here: when their pod
      is not desired, that sandbox is an ``orphan_sandbox`` and removing it removes its
      containers, so nothing is counted twice.
    - ``stale_sandbox``: a NOTREADY sandbox of a desired pod that a newer sandbox of the same
      pod has superseded (kubelet's garbage collection keeps only a pod's newest sandbox). Since:
      the creation of the next newer sandbox. A pod's newest sandbox is never stale: when it is
      NOTREADY, the pod is ``missing_sandbox`` instead (or simply finished, if it is terminal).
    - ``kubelet_only``: a pod dir under kubelet's root whose uid is neither desired nor known to
      the runtime (no sandbox, no container). A directory has no timestamp: since is
      ``first_seen[uid]``, when the agent first saw it (see :func:`track_first_seen`); a dir
      missing from ``first_seen`` counts as first seen ``now``, so it is not reported yet.
    """
    want = _Desired(desired, now, kubelet_gone, last_listed or {})
    items: list[DriftItem] = []

    def past_grace(since: float) -> bool:
        return now - since > grace_seconds

    sandbox_ids = {s.id for s in runtime.sandboxes}
    by_owner: dict[str, list[PodSandbox]] = {}
    for s in runtime.sandboxes:
        pod = want.owner(s.uid, s.namespace, s.name)
        if pod is not None:
            by_owner.setdefault(pod.uid, []).append(s)
        elif not is_static(s):
            since = want.since(s.uid, s.created_at)
            if s.uid in want.abandoned or past_grace(since):
                items.append(_sandbox_item(DriftKind.ORPHAN_SANDBOX, s, since))

    for sandboxes in by_owner.values():
        items.extend(i for i in _stale(sandboxes) if past_grace(i.since))

    for pod in want.live.values():
        if pod.terminal or pod.deletion_timestamp is not None or not pod.node_name:
            continue
        ready = any(s.state is SandboxState.READY for s in by_owner.get(pod.uid, ()))
        since = pod.scheduled_at if pod.scheduled_at is not None else pod.created_at
        if not ready and past_grace(since):
            items.append(
                DriftItem(DriftKind.MISSING_SANDBOX, pod.uid, pod.namespace, pod.name, since)
            )

    for c in runtime.containers:
        if c.pod_sandbox_id not in sandbox_ids and past_grace(c.created_at):
            items.append(_container_item(c))

    seen = first_seen or {}
    in_runtime = {s.uid for s in runtime.sandboxes} | {c.pod_uid for c in runtime.containers}
    for uid in kubelet_pod_uids:
        if uid in want.live or uid in in_runtime:
            continue
        since = want.since(uid, seen.get(uid, now))
        if past_grace(since):
            items.append(DriftItem(DriftKind.KUBELET_ONLY, uid, "", "", since))

    order = list(DriftKind)
    items.sort(
        key=lambda i: (
            order.index(i.kind),
            i.namespace,
            i.name,
            i.pod_uid,
            i.sandbox_id,
            i.container_id,
        )
    )
    return Drift(computed_at=now, grace_seconds=grace_seconds, items=tuple(items))


def _stale(sandboxes: list[PodSandbox]) -> list[DriftItem]:
    """NOTREADY sandboxes of one desired pod superseded by a newer one (created later; the
    attempt breaks ties), with since = the creation of the next newer sandbox."""
    ordered = sorted(sandboxes, key=lambda s: (s.created_at, s.attempt))
    stale: list[DriftItem] = []
    for older, newer in itertools.pairwise(ordered):
        if older.state is SandboxState.NOTREADY:
            stale.append(_sandbox_item(DriftKind.STALE_SANDBOX, older, newer.created_at))
    return stale


def _sandbox_item(kind: DriftKind, s: PodSandbox, since: float) -> DriftItem:
    return DriftItem(kind, s.uid, s.namespace, s.name, since, sandbox_id=s.id)


def _container_item(c: Container) -> DriftItem:
    return DriftItem(
        DriftKind.ORPHAN_CONTAINER,
        c.pod_uid,
        c.pod_namespace,
        c.pod_name,
        c.created_at,
        sandbox_id=c.pod_sandbox_id,
        container_id=c.id,
    )
