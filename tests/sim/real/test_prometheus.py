"""LocalPrometheus and LocalAlertmanager: real binaries on free loopback ports that scrape,
evaluate rules, deliver alerts, refuse bad queries, and leave nothing behind."""

from __future__ import annotations

import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

import nodesync_sim.real.prometheus as launcher
from nodesync_sim.real.process import RESERVED_PORTS
from nodesync_sim.real.prometheus import (
    LocalAlertmanager,
    LocalPrometheus,
    LocalServiceError,
    QueryError,
    alertmanager_pair,
)
from tests.support.prometheus import AlertmanagerFactory, PrometheusFactory
from tests.support.wait import until, until_async

pytestmark = pytest.mark.prometheus

AiohttpServer = Callable[[web.Application], Awaitable[TestServer]]

ALERTMANAGER_CONFIG = json.dumps(
    {
        "route": {
            "receiver": "blackhole",
            "group_by": ["alertname"],
            "group_wait": "0s",
            "group_interval": "1s",
        },
        "receivers": [{"name": "blackhole"}],
    }
)


def _tiny_app(value: list[float]) -> web.Application:
    """A scrape target with one gauge whose value the test controls."""

    async def metrics(request: web.Request) -> web.Response:
        body = f"# TYPE tiny_value gauge\ntiny_value {value[0]}\n"
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


def _rule_file(path: Path) -> Path:
    rules = {
        "groups": [
            {
                "name": "tiny",
                "rules": [
                    {"record": "job:tiny_value:max", "expr": "max by (job) (tiny_value)"},
                    {"alert": "TinyHigh", "expr": "job:tiny_value:max > 1"},
                ],
            }
        ]
    }
    path.write_text(json.dumps(rules))
    return path


def _scrape_config(server: TestServer) -> dict[str, Any]:
    return {
        "job_name": "tiny",
        "static_configs": [{"targets": [f"127.0.0.1:{server.port}"], "labels": {"node": "n1"}}],
    }


def _process_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.timeout(90)
async def test_scrapes_records_alerts_and_delivers_to_alertmanager(
    aiohttp_server: AiohttpServer,
    prometheus_factory: PrometheusFactory,
    alertmanager_factory: AlertmanagerFactory,
    tmp_path: Path,
) -> None:
    value = [0.0]
    server = await aiohttp_server(_tiny_app(value))
    alertmanager = alertmanager_factory(ALERTMANAGER_CONFIG)
    prometheus = prometheus_factory(
        [_scrape_config(server)],
        [_rule_file(tmp_path / "tiny.json")],
        alertmanager_url=alertmanager.url,
    )
    for instance in (prometheus, alertmanager):
        assert instance.port not in RESERVED_PORTS
        assert instance.url == f"http://127.0.0.1:{instance.port}"

    up = await prometheus.wait_for_targets_async()
    assert [sample["metric"]["node"] for sample in up] == ["n1"]
    assert (await prometheus.query_async("tiny_value"))[0]["value"][1] == "0"
    recorded = await prometheus.wait_for_async("job:tiny_value:max")
    assert recorded[0]["metric"] == {"__name__": "job:tiny_value:max", "job": "tiny"}
    assert "tiny_value" in await prometheus.metric_names_async()
    assert await prometheus.alerts_async() == []

    value[0] = 5.0
    await prometheus.wait_for_async("ALERTS{alertname='TinyHigh', alertstate='firing'}")
    [alert] = await prometheus.alerts_async()
    assert alert["labels"] == {"alertname": "TinyHigh", "job": "tiny"}
    assert alert["state"] == "firing"

    async def delivered() -> list[dict[str, Any]]:
        return await alertmanager.alerts_async()

    got = await until_async(
        delivered,
        accept=lambda alerts: len(alerts) == 1,
        timeout=20.0,
        what="Alertmanager to hold the alert",
        interval=0.1,
    )
    assert got[0]["labels"]["alertname"] == "TinyHigh"

    groups = prometheus.rules()
    assert [rule["health"] for group in groups for rule in group["rules"]] == ["ok", "ok"]
    assert [target["health"] for target in prometheus.targets()] == ["up"]


def test_bad_promql_raises_with_prometheus_error(prometheus_factory: PrometheusFactory) -> None:
    prometheus = prometheus_factory([])
    with pytest.raises(QueryError) as caught:
        prometheus.query("sum(rate(x[5m])")
    assert caught.value.error_type == "bad_data"
    assert "parse error" in caught.value.message
    assert prometheus.query("vector(1) + 1")[0]["value"][1] == "2"
    assert prometheus.query("42")[0]["value"][1] == "42"  # scalars come back as one sample


def test_stop_and_cleanup_leave_nothing_behind() -> None:
    prometheus = LocalPrometheus([])
    with prometheus:
        pid = prometheus.pid
        directory = prometheus.directory
        assert pid is not None
        assert (directory / "prometheus.json").is_file()
        config = json.loads((directory / "prometheus.json").read_text())
        assert config["global"] == {
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "evaluation_interval": "1s",
        }
    assert _process_gone(pid)
    assert not directory.exists()
    assert prometheus.pid is None
    assert prometheus.leftovers() == []
    prometheus.cleanup()  # a second cleanup is harmless


def test_reload_applies_a_changed_configuration(prometheus_factory: PrometheusFactory) -> None:
    prometheus = prometheus_factory([])
    prometheus.config["scrape_configs"] = [
        {"job_name": "itself", "static_configs": [{"targets": [prometheus.address]}]}
    ]
    assert "job_name: itself" not in prometheus.loaded_config()
    prometheus.reload()
    assert "job_name: itself" in prometheus.loaded_config()


def test_a_taken_port_is_retried_with_another(
    prometheus_factory: PrometheusFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        real_free_port = launcher.free_port
        offered: list[int] = []

        def first_busy_then_free() -> int:
            port = busy if not offered else real_free_port()
            offered.append(port)
            return port

        monkeypatch.setattr(launcher, "free_port", first_busy_then_free)
        prometheus = prometheus_factory([])
    assert offered[0] == busy
    assert prometheus.port == offered[-1] != busy
    assert "address already in use" in prometheus.log_path.read_text()


def test_an_invalid_configuration_fails_with_the_log_and_cleans_up() -> None:
    prometheus = LocalPrometheus([{"job_name": "broken", "scrape_interval": "not-a-duration"}])
    with pytest.raises(LocalServiceError, match="not-a-duration"):
        prometheus.start()
    assert prometheus.leftovers() == []


def test_a_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    prometheus = LocalPrometheus([])
    prometheus.binary = str(tmp_path / "no-such-prometheus")
    with pytest.raises(LocalServiceError, match="is not installed"):
        prometheus.start()
    assert prometheus.leftovers() == []


def test_alertmanager_holds_posted_alerts_until_stopped(
    alertmanager_factory: AlertmanagerFactory,
) -> None:
    alertmanager = alertmanager_factory(ALERTMANAGER_CONFIG)
    assert alertmanager.port not in RESERVED_PORTS
    alertmanager.post_alerts([{"labels": {"alertname": "Posted", "node": "n1"}}])
    [alert] = alertmanager.alerts()
    assert alert["labels"] == {"alertname": "Posted", "node": "n1"}
    assert alertmanager.alerts(active="false") == []
    pid = alertmanager.pid
    assert pid is not None
    assert "--cluster.listen-address=" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(
        errors="replace"
    ).replace("\0", " ")
    assert alertmanager.cluster_status()["status"] == "disabled"
    alertmanager.cleanup()
    assert _process_gone(pid)
    assert alertmanager.leftovers() == []


def test_an_alertmanager_pair_clusters_on_loopback_and_stops_by_pid() -> None:
    pair = alertmanager_pair(ALERTMANAGER_CONFIG)
    pids: list[int | None] = []
    try:
        for alertmanager in pair:
            alertmanager.start()
        until(
            lambda: all(len(am.cluster_status().get("peers") or []) == 2 for am in pair),
            timeout=30,
            what="both Alertmanagers to see two peers",
            interval=0.1,
            detail=lambda: repr([am.cluster_status() for am in pair]),
        )
        addresses = {peer["address"] for peer in pair[0].cluster_status()["peers"]}
        assert addresses == {am.cluster_address for am in pair}
        pids = [am.pid for am in pair]
    finally:
        for alertmanager in pair:
            alertmanager.cleanup()
    for pid in pids:
        assert pid is not None
        assert _process_gone(pid)
    assert [am.leftovers() for am in pair] == [[], []]


def test_start_twice_is_refused(prometheus_factory: PrometheusFactory) -> None:
    prometheus = prometheus_factory([])
    with pytest.raises(LocalServiceError, match="already running"):
        prometheus.start()


def test_an_unstarted_instance_has_no_url() -> None:
    alertmanager = LocalAlertmanager(ALERTMANAGER_CONFIG)
    with pytest.raises(LocalServiceError, match="not been started"):
        _ = alertmanager.url
