"""The agent's drift from one sync to the next: a pod the API server stops listing (an eviction
kubelet confirmed) leaves a stopped sandbox for kubelet's garbage collection, which gets the
drift grace period from then on, whatever the pod's age."""

from __future__ import annotations

from exporter.agent.drift_view import DriftView
from exporter.model.drift import DriftKind
from exporter.model.host import KubeletSnapshot
from exporter.model.kube import PodInfo
from exporter.model.runtime import RuntimeSnapshot, SandboxState
from tests.model.builders import sandbox

GRACE = 10.0
CREATED = 1_000.0
EVICTED = CREATED + 600  # ran for ten minutes


def _runtime(at: float, state: SandboxState) -> RuntimeSnapshot:
    held = sandbox("a", name="app", created_at=CREATED, state=state)
    return RuntimeSnapshot(at, None, (), (held,), ())


def _kubelet(at: float) -> KubeletSnapshot:
    return KubeletSnapshot(at, healthy=True, pod_uids=frozenset({"a"}), pod_dir_readable=True)


def test_an_evicted_pods_sandbox_is_drift_only_a_grace_period_after_its_pod_left_the_list() -> None:
    view = DriftView(GRACE, lambda: None)
    app = PodInfo(uid="a", namespace="default", name="app", phase="Running", node_name="n",
                  created_at=CREATED)  # fmt: skip
    listed = view.compute((app,), _runtime(EVICTED, SandboxState.READY), _kubelet(EVICTED), EVICTED)
    assert listed is not None
    assert listed.items == ()

    def drift_at(at: float) -> list[tuple[DriftKind, float]]:
        found = view.compute((), _runtime(at, SandboxState.NOTREADY), _kubelet(at), at)
        assert found is not None
        return [(i.kind, i.since) for i in found.items]

    assert drift_at(EVICTED + 1) == []
    assert drift_at(EVICTED + GRACE) == []
    assert drift_at(EVICTED + GRACE + 1) == [(DriftKind.ORPHAN_SANDBOX, EVICTED)]
