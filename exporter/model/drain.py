"""Which pods a drain evicts and which it leaves on the node, and why (pure): the rollback's
drain step (exporter.controller.steps.drain) and ``nodesync plan`` judge each pod with
:func:`disposition`, by the same :class:`DrainPolicy`.

As ``kubectl drain``: static pods' mirrors are never evicted (kubelet runs them whatever the API
says), DaemonSet pods neither (their controller ignores the cordon and would put them back:
``--ignore-daemonsets``), nor pods that finished or are terminating already. Unlike kubectl's
defaults, pods no controller owns (``--drain.force``) and pods with ``emptyDir`` volumes
(``--drain.delete-emptydir-data``) are evicted by default: a rollback drains a *failing* node
(NotReady, or its Lease stale), from which the node lifecycle controller would evict every pod
anyway (the ``node.kubernetes.io/unreachable`` and ``not-ready`` NoExecute taints, after their
300 s toleration), bare and emptyDir pods alike, and whose emptyDir data is lost with the node.
kubectl's defaults guard a healthy node an operator drains for maintenance; refusing here would
leave the failing node's workload where it cannot run. ``--no-drain.force`` and
``--no-drain.delete-emptydir-data`` leave such pods on the node (the drain says how many).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.model.kube import PodInfo

#: Why a pod is left on the node (bounded: the drain's message and ``plan`` print them).
MIRROR = "mirror pod"
DAEMONSET = "DaemonSet-managed"
FINISHED = "finished"
TERMINATING = "already terminating"
BARE = "not managed by a controller (--drain.force)"
EMPTYDIR = "uses emptyDir (--drain.delete-emptydir-data)"
SKIP_REASONS = (MIRROR, DAEMONSET, FINISHED, TERMINATING, BARE, EMPTYDIR)


@dataclass(frozen=True, slots=True)
class DrainPolicy:
    """What a drain evicts beyond kubectl's defaults (shared by the controller and ``plan``; the
    flags that set it are declared in exporter.settings.policy)."""

    force: bool  # also pods no controller owns (kubectl drain --force)
    delete_emptydir_data: bool  # also pods with emptyDir volumes (--delete-emptydir-data)


def disposition(pod: PodInfo, policy: DrainPolicy) -> str | None:
    """None: the drain evicts ``pod``; else why it leaves it on the node (a SKIP_REASONS)."""
    if pod.mirror:
        return MIRROR
    if pod.owner_kind == "DaemonSet":
        return DAEMONSET
    if pod.terminal:
        return FINISHED
    if pod.deletion_timestamp is not None:
        return TERMINATING
    if not pod.owner_kind and not policy.force:
        return BARE
    if pod.empty_dir and not policy.delete_emptydir_data:
        return EMPTYDIR
    return None
