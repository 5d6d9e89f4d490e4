from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.drift import (
    Drift,
    DriftItem,
    DriftKind,
    compute_drift,
    desired_until,
    is_static,
    kubelet_gone,
    track_first_seen,
    track_last_listed,
)
from exporter.model.kube import NodeCondition, NodeInfo, PodInfo
from exporter.model.runtime import Container, PodSandbox, RuntimeSnapshot, SandboxState
from tests.model.builders import running, sandbox

NOW = 10_000.0
OLD = NOW - 300  # well past the default 60 s grace period
NEW = NOW - 30  # within it

OS, MS, OC, SS, KO = (
    DriftKind.ORPHAN_SANDBOX,
    DriftKind.MISSING_SANDBOX,
    DriftKind.ORPHAN_CONTAINER,
    DriftKind.STALE_SANDBOX,
    DriftKind.KUBELET_ONLY,
)
NOTREADY = SandboxState.NOTREADY


def pod(uid: str, *, name: str | None = None, phase: str = "Running", **kw: Any) -> PodInfo:
    fields: dict[str, Any] = {"node_name": "node-1", "created_at": OLD - 100} | kw
    return PodInfo(uid=uid, namespace="default", name=name or f"pod-{uid}", phase=phase, **fields)


def sb(uid: str, *, name: str | None = None, static: bool = False, **kw: Any) -> PodSandbox:
    s = sandbox(uid, name=name or f"pod-{uid}", **({"created_at": OLD} | kw))
    if static:
        s = dataclasses.replace(s, config_source="file")
    return s


def ctr(uid: str, *, sandbox_id: str | None = None, created_at: float = OLD) -> Container:
    return running(uid=uid, pod=f"pod-{uid}", sandbox_id=sandbox_id, created_at=created_at)


def snap(
    sandboxes: Sequence[PodSandbox] = (), containers: Sequence[Container] = ()
) -> RuntimeSnapshot:
    return RuntimeSnapshot(
        taken_at=NOW,
        version=None,
        conditions=(),
        sandboxes=tuple(sandboxes),
        containers=tuple(containers),
    )


def item(kind: DriftKind, uid: str, since: float, **kw: Any) -> DriftItem:
    fields: dict[str, Any] = {"namespace": "default", "name": f"pod-{uid}"} | kw
    return DriftItem(kind, uid, since=since, **fields)


CASES: list[Any] = [
    pytest.param([], snap(), (), {}, [], id="nothing-at-all"),
    pytest.param(
        [pod("a")],
        snap([sb("a")], [ctr("a")]),
        {"a"},
        {"a": OLD},
        [],
        id="in-sync",
    ),
    # orphan_sandbox
    pytest.param(
        [],
        snap([sb("x")]),
        (),
        {},
        [item(OS, "x", OLD, sandbox_id="sb-x-0")],
        id="orphan-ready-sandbox",
    ),
    pytest.param(
        [],
        snap([sb("x", state=NOTREADY)]),
        (),
        {},
        [item(OS, "x", OLD, sandbox_id="sb-x-0")],
        id="orphan-notready-sandbox",
    ),
    pytest.param([], snap([sb("x", created_at=NEW)]), (), {}, [], id="orphan-within-grace"),
    pytest.param(
        [], snap([sb("x", created_at=NOW - 60)]), (), {}, [], id="orphan-at-grace-boundary"
    ),
    pytest.param(
        [pod("a", deletion_timestamp=NOW - 10, deletion_grace_period_seconds=30)],
        snap([sb("a")]),
        (),
        {},
        [],
        id="deleting-pod-within-deletion-grace-is-desired",
    ),
    pytest.param(
        [pod("a", deletion_timestamp=NOW - 50, deletion_grace_period_seconds=0)],
        snap([sb("a")]),
        (),
        {},
        [],
        id="deleted-pod-orphan-grace-counts-from-deletion-end",
    ),
    pytest.param(
        [pod("a", deletion_timestamp=NOW - 200, deletion_grace_period_seconds=30)],
        snap([sb("a")]),
        (),
        {},
        [item(OS, "a", NOW - 170, sandbox_id="sb-a-0")],
        id="deleted-pod-past-both-graces",
    ),
    pytest.param(
        [],
        snap([sb("x", static=True)]),
        (),
        {},
        [],
        id="static-pod-sandbox-without-mirror-is-never-orphan",
    ),
    pytest.param(
        [pod("a", name="web")],
        snap([sb("b", name="web")]),
        (),
        {},
        [
            item(MS, "a", OLD - 100, name="web"),
            item(OS, "b", OLD, name="web", sandbox_id="sb-b-0"),
        ],
        id="recreated-pod-same-name-old-uid-orphan-new-uid-missing",
    ),
    # missing_sandbox
    pytest.param(
        [pod("a", scheduled_at=OLD)],
        snap(),
        (),
        {},
        [item(MS, "a", OLD)],
        id="missing-since-scheduled",
    ),
    pytest.param(
        [pod("a", phase="Pending", created_at=OLD)],
        snap(),
        (),
        {},
        [item(MS, "a", OLD)],
        id="missing-since-created",
    ),
    pytest.param(
        [pod("a", created_at=OLD, scheduled_at=NEW)],
        snap(),
        (),
        {},
        [],
        id="missing-within-grace-of-scheduling",
    ),
    pytest.param(
        [pod("a")],
        snap([sb("a", state=NOTREADY)]),
        (),
        {},
        [item(MS, "a", OLD - 100)],
        id="only-notready-sandbox-is-missing-not-stale",
    ),
    pytest.param([pod("a", phase="Succeeded")], snap(), (), {}, [], id="terminal-pod-not-missing"),
    pytest.param(
        [pod("a", phase="Failed")],
        snap([sb("a", state=NOTREADY)]),
        (),
        {},
        [],
        id="terminal-pod-keeps-its-notready-sandbox",
    ),
    pytest.param(
        [pod("a", deletion_timestamp=NOW + 10, deletion_grace_period_seconds=30)],
        snap(),
        (),
        {},
        [],
        id="deleting-pod-not-missing",
    ),
    pytest.param([pod("a", node_name="")], snap(), (), {}, [], id="unbound-pod-not-missing"),
    pytest.param(
        [pod("mirror-uid", name="kube-proxy-node-1", mirror=True)],
        snap([sb("static-uid", name="kube-proxy-node-1", static=True)]),
        (),
        {},
        [],
        id="mirror-pod-matched-by-name",
    ),
    pytest.param(
        [pod("mirror-uid", name="kube-proxy-node-1", mirror=True)],
        snap(),
        (),
        {},
        [item(MS, "mirror-uid", OLD - 100, name="kube-proxy-node-1")],
        id="mirror-pod-without-sandbox-is-missing",
    ),
    # stale_sandbox
    pytest.param(
        [pod("a")],
        snap([sb("a", state=NOTREADY, created_at=NOW - 900), sb("a", attempt=1)]),
        (),
        {},
        [item(SS, "a", OLD, sandbox_id="sb-a-0")],
        id="stale-superseded-by-ready",
    ),
    pytest.param(
        [pod("a")],
        snap(
            [
                sb("a", state=NOTREADY, created_at=NOW - 900),
                sb("a", attempt=1, state=NOTREADY, created_at=NOW - 600),
                sb("a", attempt=2),
            ]
        ),
        (),
        {},
        [
            item(SS, "a", NOW - 600, sandbox_id="sb-a-0"),
            item(SS, "a", OLD, sandbox_id="sb-a-1"),
        ],
        id="two-stale-each-since-its-successor",
    ),
    pytest.param(
        [pod("a")],
        snap([sb("a", state=NOTREADY, created_at=NOW - 900), sb("a", attempt=1, created_at=NEW)]),
        (),
        {},
        [],
        id="stale-within-grace-of-successor",
    ),
    pytest.param(
        [],
        snap([sb("x", state=NOTREADY, created_at=NOW - 900), sb("x", attempt=1)]),
        (),
        {},
        [
            item(OS, "x", NOW - 900, sandbox_id="sb-x-0"),
            item(OS, "x", OLD, sandbox_id="sb-x-1"),
        ],
        id="undesired-old-sandboxes-are-orphans-not-stale",
    ),
    # orphan_container
    pytest.param(
        [pod("a")],
        snap([sb("a")], [ctr("a"), ctr("a", sandbox_id="gone")]),
        (),
        {},
        [
            item(
                OC,
                "a",
                OLD,
                sandbox_id="gone",
                container_id="c-a-gone-app-0",
            )
        ],
        id="container-of-removed-sandbox",
    ),
    pytest.param(
        [],
        snap([], [ctr("x", sandbox_id="gone", created_at=NEW)]),
        (),
        {},
        [],
        id="orphan-container-within-grace",
    ),
    pytest.param(
        [],
        snap([sb("x")], [ctr("x")]),
        (),
        {},
        [item(OS, "x", OLD, sandbox_id="sb-x-0")],
        id="containers-of-orphan-sandbox-not-counted-twice",
    ),
    # kubelet_only
    pytest.param(
        [], snap(), {"k"}, {"k": OLD}, [item(KO, "k", OLD, namespace="", name="")], id="dir-only"
    ),
    pytest.param([], snap(), {"k"}, {"k": NEW}, [], id="dir-only-within-grace"),
    pytest.param([], snap(), {"k"}, {}, [], id="dir-never-seen-before-counts-as-new"),
    pytest.param([pod("a")], snap([sb("a")]), {"a"}, {"a": OLD}, [], id="dir-of-desired-pod"),
    pytest.param(
        [],
        snap([sb("x")]),
        {"x"},
        {"x": OLD},
        [item(OS, "x", OLD, sandbox_id="sb-x-0")],
        id="dir-of-runtime-pod-is-not-kubelet-only",
    ),
    pytest.param(
        [],
        snap([], [ctr("x", sandbox_id="gone")]),
        {"x"},
        {"x": OLD},
        [item(OC, "x", OLD, sandbox_id="gone", container_id="c-x-gone-app-0")],
        id="dir-of-pod-with-only-a-container",
    ),
    pytest.param(
        [pod("a", phase="Succeeded")], snap(), {"a"}, {"a": OLD}, [], id="dir-of-terminal-pod"
    ),
    pytest.param(
        [pod("a", deletion_timestamp=NOW - 100, deletion_grace_period_seconds=0)],
        snap(),
        {"a"},
        {"a": NOW - 900},
        [item(KO, "a", NOW - 100, namespace="", name="")],
        id="dir-of-deleted-pod-since-deletion-end",
    ),
]


@pytest.mark.parametrize(("desired", "runtime", "dirs", "first_seen", "expected"), CASES)
def test_compute_drift(
    desired: list[PodInfo],
    runtime: RuntimeSnapshot,
    dirs: set[str],
    first_seen: Mapping[str, float],
    expected: list[DriftItem],
) -> None:
    drift = compute_drift(desired, runtime, dirs, NOW, first_seen=first_seen)
    assert sorted(drift.items, key=repr) == sorted(expected, key=repr)


def test_grace_period_is_configurable() -> None:
    runtime = snap([sb("x", created_at=NEW)])
    assert compute_drift([], runtime, (), NOW).items == ()
    assert [i.kind for i in compute_drift([], runtime, (), NOW, grace_seconds=10).items] == [OS]


def test_items_are_sorted_by_kind_then_identity() -> None:
    drift = compute_drift(
        [pod("m")],
        snap([sb("b"), sb("a")], [ctr("c", sandbox_id="gone")]),
        {"k"},
        NOW,
        first_seen={"k": OLD},
    )
    assert [(i.kind, i.pod_uid) for i in drift.items] == [
        (OS, "a"),
        (OS, "b"),
        (MS, "m"),
        (OC, "c"),
        (KO, "k"),
    ]


def test_counts_have_every_kind_and_oldest_only_kinds_with_items() -> None:
    drift = Drift(
        computed_at=NOW,
        grace_seconds=60.0,
        items=(
            item(OS, "x", NOW - 500, sandbox_id="s1"),
            item(OS, "y", NOW - 900, sandbox_id="s2"),
            item(KO, "k", NOW - 100),
        ),
    )
    assert drift.counts() == {OS: 2, MS: 0, OC: 0, SS: 0, KO: 1}
    assert drift.oldest() == {OS: NOW - 900, KO: NOW - 100}
    assert drift.of(OS) == drift.items[:2]
    empty = Drift(computed_at=NOW, grace_seconds=60.0, items=())
    assert empty.counts() == dict.fromkeys(DriftKind, 0)
    assert empty.oldest() == {}


@pytest.mark.parametrize(
    ("previous", "uids", "expected"),
    [
        pytest.param({}, {"a"}, {"a": NOW}, id="new-dir"),
        pytest.param({"a": OLD}, {"a", "b"}, {"a": OLD, "b": NOW}, id="keeps-first-sighting"),
        pytest.param({"a": OLD, "gone": OLD}, {"a"}, {"a": OLD}, id="drops-removed-dirs"),
    ],
)
def test_track_first_seen(
    previous: dict[str, float], uids: set[str], expected: dict[str, float]
) -> None:
    assert track_first_seen(previous, uids, NOW) == expected


@pytest.mark.parametrize(
    ("previous", "listed", "held", "expected"),
    [
        pytest.param({}, {"a"}, {"a"}, {"a": NOW}, id="listed-now"),
        pytest.param({"a": OLD}, {"a"}, set(), {"a": NOW}, id="listed-again"),
        pytest.param({"a": NEW}, set(), {"a"}, {"a": NEW}, id="no-longer-listed-still-held"),
        pytest.param({"a": NEW}, set(), set(), {}, id="dropped-once-nothing-is-held"),
    ],
)
def test_track_last_listed(
    previous: dict[str, float], listed: set[str], held: set[str], expected: dict[str, float]
) -> None:
    assert track_last_listed(previous, listed, held, NOW) == expected


# A pod evicted (or deleted) after running for minutes: kubelet confirmed the deletion, the API
# server no longer lists it, and its stopped sandbox waits for kubelet's garbage collection.
JUST_GONE = NOW - 5  # last listed 5 s ago: within the 60 s grace
LONG_GONE = NOW - 61


@pytest.mark.parametrize(
    ("last_listed", "gone", "expected"),
    [
        pytest.param({"a": JUST_GONE}, False, [], id="kubelet-gets-its-grace"),
        pytest.param(
            {"a": LONG_GONE},
            False,
            [item(OS, "a", LONG_GONE, sandbox_id="sb-a-0")],
            id="drift-once-the-grace-is-over-since-last-listed",
        ),
        pytest.param({}, False, [item(OS, "a", OLD, sandbox_id="sb-a-0")], id="never-seen-listed"),
        pytest.param(
            {"a": JUST_GONE},
            True,
            [item(OS, "a", OLD, sandbox_id="sb-a-0")],
            id="no-kubelet-to-wait-for",
        ),
    ],
)
def test_a_sandbox_of_a_pod_no_longer_listed_drifts_from_its_last_listing(
    last_listed: dict[str, float], gone: bool, expected: list[DriftItem]
) -> None:
    stopped = snap([sb("a", state=NOTREADY)])
    drift = compute_drift([], stopped, (), NOW, last_listed=last_listed, kubelet_gone=gone)
    assert list(drift.items) == expected


def test_a_pod_dir_of_a_pod_no_longer_listed_drifts_from_its_last_listing() -> None:
    dirs = {"a"}
    drift = compute_drift([], snap(), dirs, NOW, first_seen={"a": OLD}, last_listed={"a": NEW})
    assert drift.items == ()
    later = compute_drift(
        [], snap(), dirs, NOW, first_seen={"a": OLD}, last_listed={"a": LONG_GONE}
    )
    assert list(later.items) == [DriftItem(KO, "a", "", "", LONG_GONE)]


def test_a_listed_pod_is_judged_by_its_own_deletion_not_its_last_listing() -> None:
    listed = pod("a", deletion_timestamp=OLD, deletion_grace_period_seconds=30)
    drift = compute_drift([listed], snap([sb("a")]), (), NOW, last_listed={"a": NOW})
    assert list(drift.items) == [item(OS, "a", OLD + 30, sandbox_id="sb-a-0")]


@pytest.mark.parametrize(
    ("deletion", "grace", "expected"),
    [
        pytest.param(None, None, None, id="not-deleting"),
        pytest.param(NOW, 30, NOW + 30, id="with-grace"),
        pytest.param(NOW, None, NOW, id="no-grace-set"),
    ],
)
def test_desired_until(deletion: float | None, grace: int | None, expected: float | None) -> None:
    p = pod("a", deletion_timestamp=deletion, deletion_grace_period_seconds=grace)
    assert desired_until(p) == expected


@pytest.mark.parametrize(
    ("deletion", "grace", "expected"),
    [
        pytest.param(None, None, None, id="not-deleting"),
        pytest.param(NOW, 30, NOW, id="the-deletion-timestamp-ends-the-grace-already"),
        pytest.param(NOW, None, NOW, id="no-grace-set"),
    ],
)
def test_desired_until_with_the_kubelet_gone(
    deletion: float | None, grace: int | None, expected: float | None
) -> None:
    p = pod("a", deletion_timestamp=deletion, deletion_grace_period_seconds=grace)
    assert desired_until(p, kubelet_gone=True) == expected


def node(ready: str | None) -> NodeInfo:
    conditions = () if ready is None else (NodeCondition("Ready", ready),)
    return NodeInfo(name="node-1", uid="n1", created_at=OLD, conditions=conditions)


@pytest.mark.parametrize(
    ("healthy", "ready", "gone"),
    [
        pytest.param(False, "Unknown", True, id="probe-fails-and-ready-unknown"),
        pytest.param(True, "Unknown", False, id="kubelet-answers:-a-partition-not-a-dead-kubelet"),
        pytest.param(None, "Unknown", False, id="not-probed"),
        pytest.param(False, "True", False, id="a-slow-probe-on-a-ready-node"),
        pytest.param(False, "False", False, id="ready-false-is-posted-by-a-live-kubelet"),
        pytest.param(False, None, False, id="no-ready-condition-yet"),
    ],
)
def test_kubelet_gone_needs_both_the_probe_and_the_node(
    healthy: bool | None, ready: str | None, gone: bool
) -> None:
    assert kubelet_gone(healthy, node(ready)) is gone


def test_kubelet_gone_without_the_node_is_not_gone() -> None:
    assert kubelet_gone(False, None) is False


DELETED_AT = NOW - 5  # deletionTimestamp: the end of the pod's grace, 5 s ago


def deleting(uid: str, deleted_at: float, grace: int = 30, **kw: Any) -> PodInfo:
    return pod(uid, deletion_timestamp=deleted_at, deletion_grace_period_seconds=grace, **kw)


GONE_CASES: list[Any] = [
    pytest.param(
        [deleting("a", DELETED_AT)],
        snap([sb("a")], [ctr("a", sandbox_id="sb-a-0")]),
        True,
        [item(OS, "a", DELETED_AT, sandbox_id="sb-a-0")],
        id="past-its-deletion-kubelet-gone:-orphan-at-once",
    ),
    pytest.param(
        [deleting("a", DELETED_AT)],
        snap([sb("a")], [ctr("a", sandbox_id="sb-a-0")]),
        False,
        [],
        id="past-its-deletion-kubelet-alive:-kubelets-to-stop",
    ),
    pytest.param(
        [deleting("a", NOW + 20)],
        snap([sb("a")]),
        True,
        [],
        id="deletion-not-due-kubelet-gone:-still-desired",
    ),
    pytest.param(
        [deleting("a", NOW)],
        snap([sb("a")]),
        True,
        [item(OS, "a", NOW, sandbox_id="sb-a-0")],
        id="deletion-due-right-now",
    ),
    pytest.param(
        [deleting("a", DELETED_AT), pod("b")],
        snap([sb("a"), sb("b"), sb("b", state=NOTREADY, attempt=1, created_at=OLD - 50)]),
        True,
        [item(OS, "a", DELETED_AT, sandbox_id="sb-a-0"), item(SS, "b", OLD, sandbox_id="sb-b-1")],
        id="a-running-pod-is-untouched-its-stale-sandbox-as-before",
    ),
    pytest.param(
        [pod("a", phase="Succeeded")],
        snap([sb("a", state=NOTREADY)]),
        True,
        [],
        id="a-finished-pod-not-being-deleted-is-desired",
    ),
    pytest.param(
        [deleting("a", DELETED_AT, created_at=NOW - 2)],
        snap([sb("a", created_at=NOW - 2)]),
        True,
        [item(OS, "a", NOW - 2, sandbox_id="sb-a-0")],
        id="a-young-sandbox-too:-no-drift-grace-without-a-kubelet",
    ),
    pytest.param(
        [deleting("a", DELETED_AT)],
        snap([sb("a", static=True)]),
        True,
        [],
        id="a-static-pods-sandbox-never",
    ),
    pytest.param(
        [deleting("a", DELETED_AT)],
        snap([], [ctr("a", sandbox_id="gone", created_at=NOW - 10)]),
        True,
        [],
        id="an-orphan-container-keeps-its-grace",
    ),
    pytest.param(
        [deleting("a", DELETED_AT)],
        snap(),
        True,
        [],
        id="a-kubelet-dir-keeps-its-grace",
    ),
]


@pytest.mark.parametrize(("desired", "runtime", "gone", "expected"), GONE_CASES)
def test_drift_of_pods_being_deleted_on_a_node_whose_kubelet_is_gone(
    desired: list[PodInfo], runtime: RuntimeSnapshot, gone: bool, expected: list[DriftItem]
) -> None:
    drift = compute_drift(desired, runtime, {"a"}, NOW, first_seen={"a": NOW}, kubelet_gone=gone)
    assert sorted(drift.items, key=repr) == sorted(expected, key=repr)


@pytest.mark.parametrize(
    ("config_source", "expected"),
    [
        pytest.param("", False, id="no-annotation"),
        pytest.param("api", False, id="api"),
        pytest.param("file", True, id="file"),
        pytest.param("http", True, id="http"),
    ],
)
def test_is_static(config_source: str, expected: bool) -> None:
    assert is_static(dataclasses.replace(sb("a"), config_source=config_source)) is expected


# Property: whatever the API server, runtime and kubelet hold, drift never names a desired pod's
# live sandbox for cleanup, never names one thing twice, and reports nothing within the grace.

UIDS = ("u0", "u1", "u2", "u3", "x0", "x1")
TIMES = st.floats(NOW - 1000, NOW, allow_nan=False)


@st.composite
def desired_pods(draw: st.DrawFn) -> list[PodInfo]:
    pods = []
    for uid in draw(st.lists(st.sampled_from(UIDS[:4]), unique=True)):
        deleting = draw(st.booleans())
        pods.append(
            pod(
                uid,
                phase=draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])),
                created_at=draw(TIMES),
                scheduled_at=draw(st.none() | TIMES),
                deletion_timestamp=draw(TIMES) if deleting else None,
                deletion_grace_period_seconds=draw(st.none() | st.integers(0, 300)),
            )
        )
    return pods


@st.composite
def runtimes(draw: st.DrawFn) -> RuntimeSnapshot:
    sandboxes = [
        sb(
            uid,
            attempt=attempt,
            state=draw(st.sampled_from(SandboxState)),
            created_at=draw(TIMES),
            static=draw(st.booleans()),
        )
        for uid in draw(st.lists(st.sampled_from(UIDS), unique=True))
        for attempt in range(draw(st.integers(1, 3)))
    ]
    sandbox_ids = [s.id for s in sandboxes] + ["gone-1", "gone-2"]
    containers = [
        dataclasses.replace(ctr(uid, created_at=draw(TIMES)), id=f"c{n}", pod_sandbox_id=sid)
        for n, (uid, sid) in enumerate(
            draw(st.lists(st.tuples(st.sampled_from(UIDS), st.sampled_from(sandbox_ids))))
        )
    ]
    return snap(sandboxes, containers)


@settings(max_examples=300, deadline=None, database=None)
@given(
    desired_pods(),
    runtimes(),
    st.sets(st.sampled_from(UIDS)),
    st.dictionaries(st.sampled_from(UIDS), TIMES),
    st.floats(0, 600, allow_nan=False),
    st.booleans(),
)
def test_drift_never_targets_a_desired_pods_sandbox(
    desired: list[PodInfo],
    runtime: RuntimeSnapshot,
    dirs: set[str],
    first_seen: dict[str, float],
    grace: float,
    gone: bool,
) -> None:
    drift = compute_drift(
        desired, runtime, dirs, NOW, grace_seconds=grace, first_seen=first_seen, kubelet_gone=gone
    )
    live = {
        p.uid
        for p in desired
        if (until := desired_until(p, kubelet_gone=gone)) is None or until > NOW
    }
    deleted = {p.uid for p in desired if p.deletion_timestamp is not None} - live
    sandboxes = {s.id: s for s in runtime.sandboxes}

    for i in drift.items:
        # Only an abandoned pod's sandbox skips the grace: a deleted pod, the kubelet gone.
        abandoned = gone and i.kind is OS and i.pod_uid in deleted
        assert abandoned or NOW - i.since > grace, i
        if i.kind is DriftKind.ORPHAN_SANDBOX:
            s = sandboxes[i.sandbox_id]
            assert s.uid not in live
            assert not is_static(s)
        elif i.kind is DriftKind.STALE_SANDBOX:
            s = sandboxes[i.sandbox_id]
            assert s.uid in live
            assert s.state is SandboxState.NOTREADY
            newest = max(
                (o for o in runtime.sandboxes if o.uid == s.uid),
                key=lambda o: (o.created_at, o.attempt),
            )
            assert newest.id != s.id
        elif i.kind is DriftKind.ORPHAN_CONTAINER:
            assert i.sandbox_id not in sandboxes
        elif i.kind is DriftKind.MISSING_SANDBOX:
            assert i.pod_uid in live
            assert not any(
                s.uid == i.pod_uid and s.state is SandboxState.READY for s in runtime.sandboxes
            )
        else:
            assert i.kind is DriftKind.KUBELET_ONLY
            assert i.pod_uid in dirs
            assert i.pod_uid not in live
            assert i.pod_uid not in {s.uid for s in runtime.sandboxes}

    targeted = [i.sandbox_id for i in drift.items if i.kind in (OS, SS)]
    assert len(targeted) == len(set(targeted))
    containers = [i.container_id for i in drift.of(OC)]
    assert len(containers) == len(set(containers))
    assert sum(drift.counts().values()) == len(drift.items)

    # Desiring more pods never adds an orphan.
    more = desired + [pod(uid) for uid in UIDS if uid not in live]
    again = compute_drift(
        more, runtime, dirs, NOW, grace_seconds=grace, first_seen=first_seen, kubelet_gone=gone
    )
    assert set(again.of(OS)) <= set(drift.of(OS))
    assert again.of(KO) == ()

    # The kubelet being gone changes only what concerns pods being deleted.
    if gone:
        alive = compute_drift(
            desired, runtime, dirs, NOW, grace_seconds=grace, first_seen=first_seen
        )
        keys = {(i.kind, i.pod_uid, i.sandbox_id, i.container_id) for i in alive.items}
        for i in drift.items:
            if (i.kind, i.pod_uid, i.sandbox_id, i.container_id) not in keys:
                assert i.kind in (OS, KO), i
                assert i.pod_uid in deleted, i
