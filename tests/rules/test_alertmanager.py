"""The example Alertmanager configuration: amtool accepts it and routes every nodesync alert as
documented, and a real Alertmanager running it calls a webhook the way the rollback hook
expects (grouping, truncation, bearer token, inhibition, resolved notifications)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.rules.rulefiles import (
    ALERTMANAGER_CONFIG,
    Rule,
    alerts,
    binary,
    explain,
    load,
    run,
)
from tests.support.wait import until_async

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]

HOOK_URL = "http://nodesync-controller.nodesync.svc:9618/alerts"
TOKEN_FILE = "/etc/alertmanager/nodesync/token"
WAIT_SECONDS = 15.0  # for one notification; they arrive within a few seconds
# Labels an alert of each action carries besides its rule's labels (from the rules' tests).
TARGET_LABELS = {
    "rollback_node": {"node": "ip-10-0-1-7"},
    "evict_pod": {"node": "ip-10-0-1-7", "namespace": "team-a", "pod": "web-1"},
    "cleanup_orphans": {"node": "ip-10-0-1-7", "kind": "orphan_sandbox"},
    "none": {},
}


def routes_test(labels: dict[str, str]) -> str:
    args = [f"{key}={value}" for key, value in sorted(labels.items())]
    result = run(
        [
            binary("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={ALERTMANAGER_CONFIG}",
            *args,
        ]
    )
    assert result.returncode == 0, explain(result)
    return result.stdout.strip()


@pytest.mark.prometheus
def test_amtool_accepts_the_configuration() -> None:
    result = run([binary("amtool"), "check-config", str(ALERTMANAGER_CONFIG)])
    assert result.returncode == 0, explain(result)
    assert "SUCCESS" in result.stdout, explain(result)


@pytest.mark.prometheus
@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a.name)
def test_every_nodesync_alert_is_routed_by_its_action(alert: Rule) -> None:
    labels = {"alertname": alert.name, **alert.data["labels"]}
    labels.update(TARGET_LABELS[labels["nodesync_action"]])
    expected = "default" if labels["nodesync_action"] == "none" else "nodesync-hook,default"
    assert routes_test(labels) == expected


@pytest.mark.prometheus
@pytest.mark.parametrize(
    "labels",
    [
        {"alertname": "KubeNodeNotReady", "node": "ip-10-0-1-7", "severity": "warning"},
        # A mistyped or unknown action never reaches the hook.
        {"alertname": "NodesyncNewNodeNotReady", "nodesync_action": "rollback", "node": "n1"},
        {"alertname": "NodesyncNewNodeNotReady", "nodesync_action": "", "node": "n1"},
    ],
    ids=["foreign-alert", "mistyped-action", "empty-action"],
)
def test_other_alerts_reach_only_the_default_receiver(labels: dict[str, str]) -> None:
    assert routes_test(labels) == "default"


def _hook_settings() -> dict[str, Any]:
    config = load(ALERTMANAGER_CONFIG)
    (hook,) = (r for r in config["receivers"] if r["name"] == "nodesync-hook")
    (webhook,) = hook["webhook_configs"]
    return webhook  # type: ignore[no-any-return]


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"expected exactly one {old!r} in the configuration"
    return text.replace(old, new)


class Hook:
    """A webhook receiver that records every notification and lets a test wait for one."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._changed = asyncio.Condition()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        async with self._changed:
            self.calls.append((request.headers.get("Authorization", ""), body))
            self._changed.notify_all()
        return web.Response(status=200)

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first notification matching ``predicate``, waiting for it if needed."""
        async with asyncio.timeout(WAIT_SECONDS), self._changed:
            while True:
                for _, body in self.calls:
                    if predicate(body):
                        return body
                await self._changed.wait()


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@contextlib.asynccontextmanager
async def alertmanager(config: Path, data: Path, port: int, log: Path) -> AsyncIterator[str]:
    """A real Alertmanager on loopback, clustering off; yields its base URL once ready."""
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            binary("prometheus-alertmanager"),
            f"--config.file={config}",
            f"--storage.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            stdout=out,
            stderr=out,
        )
        try:
            async with aiohttp.ClientSession() as session:

                async def ready() -> bool:
                    if process.returncode is not None:
                        pytest.fail(f"alertmanager exited:\n{_read(log)}")
                    with contextlib.suppress(aiohttp.ClientError):
                        async with session.get(f"{url}/-/ready") as response:
                            return response.status == 200
                    return False

                await until_async(
                    ready, timeout=10, what="alertmanager to be ready", detail=lambda: _read(log)
                )
            yield url
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), 10)
                except TimeoutError:
                    process.kill()
                    await process.wait()


def _alert(labels: dict[str, str], *, starts: datetime, ends: datetime) -> dict[str, Any]:
    return {
        "labels": labels,
        "annotations": {"summary": "test"},
        "startsAt": starts.isoformat(),
        "endsAt": ends.isoformat(),
        "generatorURL": "http://prometheus.example/graph",
    }


async def _post(url: str, batch: list[dict[str, Any]]) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/api/v2/alerts", json=batch) as response,
    ):
        assert response.status == 200, await response.text()


#: The guard's alert, as the rules raise it when old nodes fail together.
SUSPECTED = {
    "alertname": "NodesyncControlPlaneSuspected",
    "severity": "warning",
    "nodesync_action": "none",
    "reason": "old_nodes_failing",
}


async def _inhibited_by_name(url: str) -> dict[str, set[bool]]:
    """alertname -> whether its alerts are inhibited (a set: all, none, or some)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/api/v2/alerts") as response,
    ):
        assert response.status == 200, await response.text()
        result: dict[str, set[bool]] = {}
        for alert in await response.json():
            name = alert["labels"]["alertname"]
            result.setdefault(name, set()).add(bool(alert["status"]["inhibitedBy"]))
        return result


async def _until_inhibited(url: str, expected: dict[str, set[bool]]) -> None:
    """Poll Alertmanager's API until the alerts are inhibited as expected (the inhibitor
    learns about new source alerts asynchronously)."""
    await until_async(
        lambda: _inhibited_by_name(url),
        accept=lambda seen: seen == expected,
        timeout=WAIT_SECONDS,
        what=f"inhibition to become {expected}",
    )


@pytest.mark.prometheus
async def test_a_real_alertmanager_calls_the_hook_once_per_group(
    aiohttp_server: ServerFactory, unused_tcp_port: int, tmp_path: Path
) -> None:
    """150 new nodes fail at once: one call for the whole group, truncated to max_alerts; their
    pods' evictions are inhibited by the node rollbacks; report-only alerts stay away; the token
    comes from the credentials file; a resolved alert is sent too."""
    hook = Hook()
    app = web.Application()
    app.router.add_post("/alerts", hook.handle)
    server = await aiohttp_server(app)
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")

    config = ALERTMANAGER_CONFIG.read_text(encoding="utf-8")
    config = _replace_once(config, HOOK_URL, str(server.make_url("/alerts")))
    config = _replace_once(config, TOKEN_FILE, str(token))
    # Shorter timers than production, so the test does not wait for half a minute.
    config = _replace_once(config, "group_wait: 30s", "group_wait: 1s")
    config = _replace_once(config, "group_interval: 1m", "group_interval: 1s")
    config_path = tmp_path / "alertmanager.yml"
    config_path.write_text(config)
    max_alerts = int(_hook_settings()["max_alerts"])
    nodes = [f"ip-10-0-{i // 100}-{i % 100}" for i in range(max_alerts + 50)]
    async with alertmanager(
        config_path, tmp_path / "data", unused_tcp_port, tmp_path / "am.log"
    ) as url:
        # Alerts start now, once Alertmanager is up, as Prometheus sends newly firing ones:
        # Alertmanager flushes a new group at once, without group_wait, when its first alert
        # started longer than group_wait ago. A start taken before Alertmanager's own start (over
        # a second on a busy machine) made that flush race the insertion of the rest of the
        # batch: a call with the first alert, then one with the others.
        now = datetime.now(UTC)
        later = now + timedelta(hours=1)
        batch = [
            _alert(
                {
                    "alertname": "NodesyncNewNodeNotReady",
                    "severity": "warning",
                    "nodesync_action": "rollback_node",
                    "node": node,
                },
                starts=now,
                ends=later,
            )
            for node in nodes
        ]
        batch += [
            _alert(
                {
                    "alertname": "NodesyncNewNodePodPending",
                    "severity": "warning",
                    "nodesync_action": "evict_pod",
                    "node": node,
                    "namespace": "team-a",
                    "pod": f"web-{node}",
                },
                starts=now,
                ends=later,
            )
            for node in nodes
        ]
        batch.append(
            _alert(
                {
                    "alertname": "NodesyncNewNodeHostPressure",
                    "severity": "warning",
                    "nodesync_action": "none",
                    "node": nodes[0],
                    "resource": "memory",
                },
                starts=now,
                ends=later,
            )
        )
        await _post(url, batch)
        rollbacks = await hook.wait_for(
            lambda b: b["groupLabels"].get("alertname") == "NodesyncNewNodeNotReady"
        )

        # A barrier: a group started after the first call flushes after every earlier group.
        sentinel = {
            "alertname": "NodesyncNewNodeDrift",
            "severity": "warning",
            "nodesync_action": "cleanup_orphans",
            "node": "ip-10-0-9-9",
            "kind": "orphan_sandbox",
        }
        await _post(url, [_alert(sentinel, starts=now, ends=later)])
        await hook.wait_for(lambda b: b["groupLabels"].get("alertname") == sentinel["alertname"])
        await _post(url, [_alert(sentinel, starts=now, ends=datetime.now(UTC))])
        resolved = await hook.wait_for(lambda b: b["status"] == "resolved")
        # Pod evictions are inhibited on nodes being rolled back; report-only alerts never are.
        # (The resolved sentinel is no longer listed.)
        await _until_inhibited(
            url,
            {
                "NodesyncNewNodeNotReady": {False},
                "NodesyncNewNodePodPending": {True},
                "NodesyncNewNodeHostPressure": {False},
            },
        )

        # While the control plane is suspected, every action alert is held back, including
        # those that fired before.
        await _post(url, [_alert(SUSPECTED, starts=datetime.now(UTC), ends=later)])
        await _until_inhibited(
            url,
            {
                "NodesyncNewNodeNotReady": {True},
                "NodesyncNewNodePodPending": {True},
                "NodesyncNewNodeHostPressure": {False},
                "NodesyncControlPlaneSuspected": {False},
            },
        )

    log = _read(tmp_path / "am.log")
    assert all(auth == "Bearer s3cret-token" for auth, _ in hook.calls), log
    groups = [body["groupLabels"] for _, body in hook.calls]
    assert (
        groups.count({"alertname": "NodesyncNewNodeNotReady", "nodesync_action": "rollback_node"})
        == 1
    ), [(len(b["alerts"]), b["truncatedAlerts"], b["status"]) for _, b in hook.calls]
    assert {g["alertname"] for g in groups} == {"NodesyncNewNodeNotReady", "NodesyncNewNodeDrift"}

    assert rollbacks["version"] == "4"
    assert rollbacks["receiver"] == "nodesync-hook"
    assert rollbacks["status"] == "firing"
    assert len(rollbacks["alerts"]) == max_alerts
    assert rollbacks["truncatedAlerts"] == len(nodes) - max_alerts
    assert {a["labels"]["node"] for a in rollbacks["alerts"]} < set(nodes)
    assert all(a["fingerprint"] and a["startsAt"] for a in rollbacks["alerts"])

    assert resolved["groupLabels"]["alertname"] == "NodesyncNewNodeDrift"
    assert [a["status"] for a in resolved["alerts"]] == ["resolved"]


async def _inhibited_by_cluster(url: str) -> dict[tuple[str, str], bool]:
    """(alertname, cluster) -> whether that alert is inhibited (one alert each here)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/api/v2/alerts") as response,
    ):
        assert response.status == 200, await response.text()
        return {
            (a["labels"]["alertname"], a["labels"]["cluster"]): bool(a["status"]["inhibitedBy"])
            for a in await response.json()
        }


async def _until_inhibited_by_cluster(url: str, expected: dict[tuple[str, str], bool]) -> None:
    await until_async(
        lambda: _inhibited_by_cluster(url),
        accept=lambda seen: seen == expected,
        timeout=WAIT_SECONDS,
        what=f"inhibition by cluster to become {expected}",
    )


@pytest.mark.prometheus
async def test_inhibitions_stay_inside_a_cluster(unused_tcp_port: int, tmp_path: Path) -> None:
    """One Alertmanager for two clusters with a node of the same name: a rollback in east
    inhibits east's eviction on that node, not west's; east's suspected control plane holds
    back east's actions only."""
    config = ALERTMANAGER_CONFIG.read_text(encoding="utf-8")
    config = _replace_once(config, TOKEN_FILE, str(tmp_path / "token"))
    (tmp_path / "token").write_text("unused\n")
    config_path = tmp_path / "alertmanager.yml"
    config_path.write_text(config)
    now = datetime.now(UTC)
    later = now + timedelta(hours=1)

    def action(alertname: str, action: str, cluster: str) -> dict[str, Any]:
        labels = {"alertname": alertname, "severity": "warning", "nodesync_action": action}
        labels |= {"cluster": cluster, "node": "ip-10-0-1-7"}
        if action == "evict_pod":
            labels |= {"namespace": "team-a", "pod": "web-1"}
        return _alert(labels, starts=now, ends=later)

    async with alertmanager(
        config_path, tmp_path / "data", unused_tcp_port, tmp_path / "am.log"
    ) as url:
        await _post(
            url,
            [
                action("NodesyncNewNodeNotReady", "rollback_node", "east"),
                action("NodesyncNewNodePodPending", "evict_pod", "east"),
                action("NodesyncNewNodePodPending", "evict_pod", "west"),
                action("NodesyncNewNodeDrift", "cleanup_orphans", "west"),
            ],
        )
        await _until_inhibited_by_cluster(
            url,
            {
                ("NodesyncNewNodeNotReady", "east"): False,
                ("NodesyncNewNodePodPending", "east"): True,
                ("NodesyncNewNodePodPending", "west"): False,
                ("NodesyncNewNodeDrift", "west"): False,
            },
        )
        suspected = {**SUSPECTED, "cluster": "east"}
        await _post(url, [_alert(suspected, starts=datetime.now(UTC), ends=later)])
        await _until_inhibited_by_cluster(
            url,
            {
                ("NodesyncNewNodeNotReady", "east"): True,
                ("NodesyncNewNodePodPending", "east"): True,
                ("NodesyncNewNodePodPending", "west"): False,
                ("NodesyncNewNodeDrift", "west"): False,
                ("NodesyncControlPlaneSuspected", "east"): False,
            },
        )
