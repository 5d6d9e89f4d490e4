"""A failing cohort for ``bench.controller_sync --failing N``: the controller's executor series
measured at scale.

Without it the benchmark runs the controller alone (no webhook, no executor), which exports
none of the executor's series. With it:

- the last N nodes of the wave are registered NotReady (kubelet's ``KubeletNotReady``) and
  built from an OS image of their own, so they are a cohort of their own (``os_image``) and
  fail in the cohorts they share with the healthy nodes (kubelet, runtime, kernel, instance
  type, zone);
- the controller runs with the webhook and the executor: a fresh journal,
  ``--rollback.dry-run`` (nothing is written to the API server) and ``--cohort.failing-for 1s``
  (the nodes count as failing a second after they were registered, not after 5 minutes);
- once the cohort series show, one delivery of ``NodesyncNewNodeNotReady`` about each failing
  node (or the first ``--held`` of them; none with ``--held 0``) is sent, and the benchmark
  waits until each of them is held back (``nodesync_alert_held``, one series per node).

So the measured exposition holds ``nodesync_cohort_*``, ``nodesync_alert_held`` and
``nodesync_alert_episodes_total`` (its 7 series once the alert name was decided) besides the
node series. ``nodesync_rollback_step_deadline_timestamp_seconds`` needs a rollback running a
step, which a dry run never has: it is not exercised (at most 7 series, none per node).
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from bench.harness.apiserver import JSONObject
from bench.harness.exposition import samples
from bench.harness.webhook import Hook, alert, delivery

FAILING_OS_IMAGE = "Debian GNU/Linux 12 (bookworm) build 2026-12-05"
HELD = "nodesync_alert_held"
COHORT_NODES = "nodesync_cohort_nodes"


def fail(node: JSONObject) -> JSONObject:
    """``node`` (a registered Node's body) NotReady since its registration, of its own image."""
    for condition in node["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(
                status="False",
                reason="KubeletNotReady",
                message="container runtime network not ready: NetworkReady=false",
            )
    node["status"]["nodeInfo"]["osImage"] = FAILING_OS_IMAGE
    return node


def token() -> str:
    return secrets.token_hex(16)


def controller_args(workdir: Path) -> tuple[str, ...]:
    """The controller's flags for the webhook and the executor (with the token in its env)."""
    return (
        "--journal.path",
        str(workdir / "journal.db"),
        "--rollback.dry-run",
        "--cohort.failing-for",
        "1s",
    )


async def _scrape(http: aiohttp.ClientSession, url: str) -> bytes:
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as response:
        return await response.read()


async def hold(
    http: aiohttp.ClientSession, base: str, secret: str, names: Sequence[str], within: float = 120
) -> dict[str, object]:
    """Wait for the failing nodes' cohorts, deliver an alert about each of ``names`` (if any),
    and wait until every one is held; what /metrics shows then."""
    deadline = time.monotonic() + within
    while not samples(body := await _scrape(http, f"{base}/metrics"), COHORT_NODES):
        if time.monotonic() > deadline:
            raise AssertionError("no cohort series: the failing nodes were not judged")
        await asyncio.sleep(0.2)
    if not names:
        return {"held_series": 0, "cohort_series": _cohort_series(body)}
    hook = Hook(f"{base}/alerts", secret)
    try:
        status, seconds = await hook.post(delivery([alert(n, time.time() - 60) for n in names]))
    finally:
        await hook.close()
    assert status == 200, status
    while sum((held := samples(body, HELD)).values()) < len(names):
        if time.monotonic() > deadline:
            raise AssertionError(f"{sum(held.values()):g} of {len(names)} alerts held")
        await asyncio.sleep(0.2)
        body = await _scrape(http, f"{base}/metrics")
    reasons = collections.Counter(dict(labels)["reason"] for labels in held)
    return {
        "delivery_answered_s": seconds,
        "held_series": len(held),
        "held_by_reason": dict(reasons),
        "cohort_series": _cohort_series(body),
    }


def _cohort_series(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line.startswith(b"nodesync_cohort_"))
