"""DRAIN and EVICT_POD: evict the pods bound to the node now that the drain policy evicts.

The drain policy (exporter.model.drain) leaves mirrors, DaemonSet pods, finished or
terminating ones; bare and emptyDir pods go as ``--drain.force`` and
``--drain.delete-emptydir-data`` say. Each pod is evicted once per attempt through the
Eviction API; a PodDisruptionBudget's refusal makes the step wait and try again with backoff
until ``--drain.eviction-timeout`` after its first attempt, then it fails (``pdb_blocked``):
nothing is forced.
"""

from __future__ import annotations

from collections import Counter

from exporter.controller.audit import ObjectRef
from exporter.controller.steps.context import StepContext
from exporter.controller.steps.outcome import PDB_BLOCKED, StepError, Wait
from exporter.kube.errors import KubeError
from exporter.kube.writer import EvictionResult
from exporter.model.drain import disposition
from exporter.model.kube import NodeInfo
from exporter.model.rollback import NodeRollback, Phase, PodTarget, StepState
from exporter.model.rollback_state import StepResult

#: How long a PodDisruptionBudget's refusal waits before the next eviction attempt, at most.
PDB_RETRY_MAX = 60.0


def _eviction_wait(
    ctx: StepContext, rollback: NodeRollback, index: int, blocked: list[str], total: int
) -> StepResult | Wait:
    timeout = ctx.settings.eviction_timeout
    started = ctx.started(rollback, index)
    what = f"{len(blocked)} of {total} pods ({', '.join(sorted(blocked)[:10])})"
    if ctx.clock() - started >= timeout:
        return StepResult(
            StepState.FAILED,
            f"a PodDisruptionBudget refused the eviction of {what} for {timeout:g} s; "
            "nothing was forced",
            reason=PDB_BLOCKED,
            stop=Phase.FAILED,
            action_required=f"node {rollback.spec.node} is cordoned, {what} could not be "
            "evicted: review the PodDisruptionBudgets, then drain or uncordon the node",
        )
    # Back off as the refusal lasts: every poll at first, at most every PDB_RETRY_MAX.
    retry = min(PDB_RETRY_MAX, max(ctx.poll, (ctx.clock() - started) / 4))
    return Wait(PDB_BLOCKED, f"a PodDisruptionBudget refuses the eviction of {what}", retry)


async def drain(
    ctx: StepContext, rollback: NodeRollback, index: int, node: NodeInfo
) -> StepResult | Wait:
    pods = await ctx.writer.reads.list_pods_on_node(node.name)
    policy = ctx.settings.policy.drain
    skipped = Counter(r for p in pods if (r := disposition(p, policy)) is not None)
    targets = [p for p in pods if disposition(p, policy) is None]
    results: list[EvictionResult] = []
    for pod in targets:
        results.append(
            await ctx.writer.evictions.evict(pod.namespace, pod.name, pod.uid, timeout=0)
        )
    blocked = [
        f"{p.namespace}/{p.name}"
        for p, r in zip(targets, results, strict=True)
        if r.outcome == "blocked"
    ]
    if blocked:
        return _eviction_wait(ctx, rollback, index, blocked, len(targets))
    evicted = sum(1 for r in results if r.outcome == "evicted")
    left = ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
    return StepResult(
        StepState.DONE,
        f"evicted {evicted} pods; {len(pods) - len(targets)} left alone"
        f"{f' ({left})' if left else ''}; {len(targets) - evicted} already gone",
    )


async def evict_pod(ctx: StepContext, rollback: NodeRollback, index: int) -> StepResult | Wait:
    """Evict the one pod of the spec (no re-read of the Node: the pod is looked up on it)."""
    target = rollback.spec.pod
    assert target is not None
    ref = ObjectRef("Pod", target.namespace, target.name, target.uid)
    try:
        pods = await ctx.writer.reads.list_pods_on_node(rollback.spec.node)
        pod = next(
            (p for p in pods if (p.namespace, p.name) == (target.namespace, target.name)),
            None,
        )
        if pod is None:
            return StepResult(
                StepState.DONE,
                f"pod {target.namespace}/{target.name} is no longer on node {rollback.spec.node}",
            )
        ref = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
        result = await ctx.writer.evictions.evict(
            pod.namespace, pod.name, target.uid or pod.uid, timeout=0
        )
    except KubeError as exc:
        raise StepError(exc, ref) from exc  # the Event goes on the pod, with its uid
    if result.outcome == "blocked":
        return _eviction_wait(ctx, rollback, index, [f"{pod.namespace}/{pod.name}"], 1)
    about = PodTarget(pod.namespace, pod.name, pod.uid)
    if result.outcome == "skipped":
        return StepResult(StepState.SKIPPED, result.detail, pod=about)
    return StepResult(StepState.DONE, result.detail, pod=about)
