"""A private, real Prometheus and Alertmanager for tests and the demo.

``LocalPrometheus`` and ``LocalAlertmanager`` run the distribution's binaries
(``/usr/bin/prometheus``, ``/usr/bin/prometheus-alertmanager``; Debian packages ``prometheus``
and ``prometheus-alertmanager``) as background processes on 127.0.0.1, each on a free port
(never the defaults 9090/9093), with a fresh directory for the configuration, storage and log.
Configurations are written as JSON, which is valid YAML.

    with LocalPrometheus([{"job_name": "agent", "static_configs": [...]}], rule_files=[...]) as p:
        p.wait_for("up == 1", lambda result: len(result) == 1, timeout=20)
        p.query("nodesync_cri_up")

Prometheus answers ``/-/ready`` within a fraction of a second, but performs its first scrape
only ~5-6 s after it started (a fixed throttle of its target discovery): wait for ``up == 1``
(:meth:`LocalPrometheus.wait_for_targets`), not for readiness. Every wait polls with a
deadline. ``stop()`` ends the process by its PID (SIGTERM, then SIGKILL); ``cleanup()`` also
removes the directory. Both are safe to call more than once.

The HTTP helpers are blocking; each has an ``_async`` twin that runs it in a worker thread and
polls with ``asyncio.sleep``, for callers whose scrape targets are served by the same event
loop (a blocking wait there would starve the targets Prometheus is waiting for).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from nodesync_sim.real.process import ChildProcess, free_port, log_tail
from nodesync_sim.real.removal import remove_tree

PROMETHEUS_BINARY = "/usr/bin/prometheus"
ALERTMANAGER_BINARY = "/usr/bin/prometheus-alertmanager"
ALERTMANAGER_TEMPLATE = "/usr/share/prometheus/alertmanager/default.tmpl"
"""Debian's Alertmanager cannot start without its default notification template."""


_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0
_PORT_ATTEMPTS = 5
_POLL = 0.1
_HTTP_TIMEOUT = 10.0

Result = list[dict[str, Any]]


class LocalServiceError(RuntimeError):
    """A local Prometheus or Alertmanager could not be started, or is not running."""


class QueryError(RuntimeError):
    """Prometheus refused a query (bad PromQL, timeout); ``error_type`` is its errorType."""

    def __init__(self, promql: str, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message} (query: {promql})")
        self.promql = promql
        self.error_type = error_type
        self.message = message


def missing_binaries() -> list[str]:
    """Paths of the Prometheus and Alertmanager binaries (and files) that are not installed."""
    needed = (PROMETHEUS_BINARY, ALERTMANAGER_BINARY, ALERTMANAGER_TEMPLATE)
    return [path for path in needed if not Path(path).is_file()]


def _http(
    method: str, url: str, body: bytes | None = None, timeout: float = _HTTP_TIMEOUT
) -> tuple[int, bytes]:
    """One HTTP request; any status is returned, a connection failure raises OSError."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as err:
        with err:
            return int(err.code), bytes(err.read())


class Placement(Protocol):
    """Where a service runs when not on the machine's own network: a real node's namespaces
    (:class:`~nodesync_sim.real.node.RealNode`), as a monitoring stack on a node would."""

    def command(self) -> list[str]:
        """The argv prefix that runs a program there."""
        ...

    def publish(self, port: int) -> str:
        """``host:port`` where the machine reaches what listens on ``127.0.0.1:port`` there."""
        ...


class _LocalService:
    """One background server process with a fresh directory, a free port and a ready check."""

    name = "service"
    binary = ""
    log_name = "service.log"

    def __init__(
        self, base_dir: str | Path | None = None, placement: Placement | None = None
    ) -> None:
        self._placement = placement
        self._published: str | None = None
        self._base_parent = str(base_dir) if base_dir is not None else None
        self._dir: Path | None = None
        self._last_dir: Path | None = None
        self._proc: ChildProcess | None = None
        self._port: int | None = None

    # -- what a concrete service provides ----------------------------------------------------

    def _write_config(self, directory: Path) -> None:
        raise NotImplementedError

    def _command(self, directory: Path, port: int) -> list[str]:
        raise NotImplementedError

    # -- properties ----------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The instance's directory (config, storage, log); set by :meth:`start`."""
        if self._dir is None:
            raise LocalServiceError(f"the local {self.name} has not been started")
        return self._dir

    @property
    def port(self) -> int:
        if self._port is None:
            raise LocalServiceError(f"the local {self.name} has not been started")
        return self._port

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``, as a scrape or Alertmanager target (where it runs)."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (with a placement: where the machine reaches it),
        without a trailing slash."""
        return f"http://{self._published or self.address}"

    @property
    def pid(self) -> int | None:
        """The process id while it runs, else None."""
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.directory / self.log_name

    def log_tail(self, lines: int = 30) -> str:
        directory = self._dir or self._last_dir
        return log_tail(directory / self.log_name if directory is not None else None, lines)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = _START_TIMEOUT) -> None:
        """Create a fresh directory, start the process on a free port, wait for /-/ready.

        Retries with another port when the chosen one was taken in the meantime. On failure
        everything is cleaned up and :class:`LocalServiceError` carries the log's tail.
        """
        if not Path(self.binary).is_file():
            raise LocalServiceError(
                f"cannot run a local {self.name}: {self.binary} is not installed "
                "(install the Debian packages prometheus and prometheus-alertmanager)"
            )
        if self.pid is not None:
            raise LocalServiceError(f"the local {self.name} is already running")
        if self._dir is None:
            self._dir = Path(
                tempfile.mkdtemp(prefix=f"nodesync-{self.name}-", dir=self._base_parent)
            )
            self._last_dir = self._dir
        try:
            self._write_config(self._dir)
            for attempt in range(_PORT_ATTEMPTS):
                self._port = free_port()
                if self._placement is not None:
                    self._published = self._placement.publish(self._port)
                self._spawn()
                if self._wait_ready(timeout):
                    return
                if attempt + 1 < _PORT_ATTEMPTS and self._address_in_use():
                    continue
                raise LocalServiceError(
                    f"the local {self.name} did not become ready:\n{self.log_tail()}"
                )
            raise LocalServiceError(f"no free port for the local {self.name}:\n{self.log_tail()}")
        except BaseException:
            self.cleanup()
            raise

    def _spawn(self) -> None:
        directory = self.directory
        prefix = self._placement.command() if self._placement is not None else []
        self._proc = ChildProcess(
            [*prefix, *self._command(directory, self.port)],
            log_path=directory / self.log_name,
            cwd=directory,
            name=self.name,
        )
        self._proc.start()

    def _wait_ready(self, timeout: float) -> bool:
        """True once /-/ready answers 200; False if the process exited (it was stopped)."""
        deadline = time.monotonic() + timeout
        while True:
            if self._proc is None or not self._proc.running:
                self.stop()
                return False
            with contextlib.suppress(OSError):
                status, _ = _http("GET", f"{self.url}/-/ready", timeout=1.0)
                if status == 200:
                    return True
            if time.monotonic() >= deadline:
                self.stop()
                raise LocalServiceError(
                    f"the local {self.name} was not ready within {timeout} s:\n{self.log_tail()}"
                )
            time.sleep(_POLL)

    def _address_in_use(self) -> bool:
        return "address already in use" in self.log_tail(10).lower()

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Stop the process by its PID: SIGTERM, wait, then SIGKILL. Safe to repeat."""
        if self._proc is not None:
            self._proc.stop(timeout)
        self._proc = None

    def cleanup(self) -> None:
        """Stop the process and remove the directory. Safe to call more than once."""
        self.stop()
        if self._dir is not None:
            remove_tree(self._dir)
            self._dir = None

    def leftovers(self) -> list[str]:
        """What of the last instance still exists (process, directory); empty when clean."""
        found = []
        if self._proc is not None and self._proc.pid is not None:
            found.append(f"{self.name} pid {self._proc.pid}")
        if self._last_dir is not None and self._last_dir.exists():
            found.append(f"directory {self._last_dir}")
        return found

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    # -- HTTP ----------------------------------------------------------------------------------

    def _get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = _http("GET", f"{self.url}{path}{query}")
        if status != 200:
            raise LocalServiceError(f"GET {path} answered {status}: {body[:500]!r}")
        return json.loads(body)


def _as_prometheus_target(url: str) -> dict[str, Any]:
    """An ``alertmanagers`` entry for an Alertmanager at ``url`` (``http://host:port[/prefix]``)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"not an Alertmanager URL: {url!r}")
    entry: dict[str, Any] = {
        "scheme": parsed.scheme,
        "static_configs": [{"targets": [parsed.netloc]}],
        "timeout": "2s",
    }
    if parsed.path.strip("/"):
        entry["path_prefix"] = parsed.path
    return entry


class LocalPrometheus(_LocalService):
    """A private Prometheus scraping ``scrape_configs`` and evaluating ``rule_files``.

    ``scrape_configs`` are Prometheus scrape configurations as dicts (``job_name``,
    ``static_configs`` with ``targets`` and ``labels``, ...). Global scrape and evaluation
    intervals default to 1 s, the scrape timeout to the scrape interval. With
    ``alertmanager_url`` (and ``alertmanager_urls``), alerts are sent to each. The lifecycle
    API is enabled, so :meth:`reload` applies a changed :attr:`config`.
    """

    name = "prometheus"
    binary = PROMETHEUS_BINARY
    log_name = "prometheus.log"

    def __init__(
        self,
        scrape_configs: Sequence[dict[str, Any]],
        rule_files: Sequence[str | Path] = (),
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        alertmanager_url: str | None = None,
        *,
        alertmanager_urls: Sequence[str] = (),
        base_dir: str | Path | None = None,
        extra_args: Sequence[str] = (),
        placement: Placement | None = None,
        binary: str | None = None,
    ) -> None:
        """``binary``: another Prometheus than the machine's (one with Kubernetes service
        discovery, which Debian 12's lacks)."""
        super().__init__(base_dir, placement)
        if binary is not None:
            self.binary = binary
        self.config: dict[str, Any] = {
            "global": {
                "scrape_interval": scrape_interval,
                "scrape_timeout": scrape_interval,
                "evaluation_interval": evaluation_interval,
            },
            "rule_files": [str(Path(path).resolve()) for path in rule_files],
            "scrape_configs": [dict(config) for config in scrape_configs],
        }
        urls = [*([alertmanager_url] if alertmanager_url is not None else []), *alertmanager_urls]
        if urls:
            # Every alert goes to each Alertmanager, as to the members of an HA cluster.
            self.config["alerting"] = {"alertmanagers": [_as_prometheus_target(u) for u in urls]}
        self._extra_args = list(extra_args)

    @property
    def config_path(self) -> Path:
        return self.directory / "prometheus.json"

    def _write_config(self, directory: Path) -> None:
        (directory / "prometheus.json").write_text(json.dumps(self.config, indent=2))
        (directory / "data").mkdir(exist_ok=True)

    def _command(self, directory: Path, port: int) -> list[str]:
        return [
            self.binary,
            f"--config.file={directory / 'prometheus.json'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--log.level=info",
            *self._extra_args,
        ]

    def reload(self) -> None:
        """Write :attr:`config` again and ask Prometheus to reload it (rules files too)."""
        self._write_config(self.directory)
        status, body = _http("POST", f"{self.url}/-/reload")
        if status != 200:
            raise LocalServiceError(f"reload failed ({status}): {body[:500]!r}")

    # -- queries -------------------------------------------------------------------------------

    def query(self, promql: str, at: float | None = None) -> Result:
        """The result of an instant query (``data.result``: dicts with ``metric`` and
        ``value``, or a one-element list for a scalar or string result).

        Raises :class:`QueryError` when Prometheus refuses the query.
        """
        params = {"query": promql}
        if at is not None:
            params["time"] = repr(at)
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v1/query",
            data=body,
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        try:
            with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as err:
            with err:
                raw = err.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                raise LocalServiceError(f"query answered {err.code}: {raw[:500]!r}") from None
        if payload.get("status") != "success":
            raise QueryError(promql, str(payload.get("errorType")), str(payload.get("error")))
        data = payload["data"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[Result], bool] = bool,
        timeout: float = 30.0,
    ) -> Result:
        """Poll ``promql`` until ``predicate(result)`` holds (default: any result) and return
        that result; raise TimeoutError with the last result after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if predicate(result):
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{promql!r} did not satisfy the condition within {timeout} s; "
                    f"last result: {result}"
                )
            time.sleep(_POLL)

    def wait_for_targets(self, count: int | None = None, timeout: float = 30.0) -> Result:
        """Wait until ``count`` targets (default: every configured static target) have been
        scraped successfully (``up == 1``); return the ``up`` samples."""
        expected = count if count is not None else self.static_target_count()
        return self.wait_for("up == 1", lambda result: len(result) >= expected, timeout)

    def static_target_count(self) -> int:
        return sum(
            len(static.get("targets", []))
            for config in self.config["scrape_configs"]
            for static in config.get("static_configs", [])
        )

    def metric_names(self) -> set[str]:
        """Every metric name Prometheus holds (scraped, recorded, ALERTS)."""
        return set(self._get_json("/api/v1/label/__name__/values")["data"])

    def alerts(self) -> Result:
        """Active alerts (pending and firing) from /api/v1/alerts."""
        return list(self._get_json("/api/v1/alerts")["data"]["alerts"])

    def rules(self) -> Result:
        """Rule groups from /api/v1/rules, each with its rules' health and last error."""
        return list(self._get_json("/api/v1/rules")["data"]["groups"])

    def loaded_config(self) -> str:
        """The configuration Prometheus runs with, as it prints it (YAML)."""
        return str(self._get_json("/api/v1/status/config")["data"]["yaml"])

    def alertmanagers(self) -> list[str]:
        """The URLs Prometheus sends alerts to now (/api/v1/alertmanagers, active ones)."""
        data = self._get_json("/api/v1/alertmanagers")["data"]
        return [str(am["url"]) for am in data["activeAlertmanagers"]]

    def targets(self) -> Result:
        """Active targets from /api/v1/targets."""
        return list(self._get_json("/api/v1/targets")["data"]["activeTargets"])

    # -- async twins ---------------------------------------------------------------------------

    async def query_async(self, promql: str, at: float | None = None) -> Result:
        return await asyncio.to_thread(self.query, promql, at)

    async def wait_for_async(
        self,
        promql: str,
        predicate: Callable[[Result], bool] = bool,
        within: float = 30.0,
    ) -> Result:
        """:meth:`wait_for` without blocking the event loop (``within``: its timeout)."""
        deadline = time.monotonic() + within
        while True:
            result = await self.query_async(promql)
            if predicate(result):
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{promql!r} did not satisfy the condition within {within} s; "
                    f"last result: {result}"
                )
            await asyncio.sleep(_POLL)

    async def wait_for_targets_async(
        self, count: int | None = None, within: float = 30.0
    ) -> Result:
        """:meth:`wait_for_targets` without blocking the event loop."""
        expected = count if count is not None else self.static_target_count()
        return await self.wait_for_async("up == 1", lambda result: len(result) >= expected, within)

    async def alerts_async(self) -> Result:
        return await asyncio.to_thread(self.alerts)

    async def metric_names_async(self) -> set[str]:
        return await asyncio.to_thread(self.metric_names)


class LocalAlertmanager(_LocalService):
    """A private Alertmanager with the configuration ``config_yaml`` (YAML or JSON text).

    Clustering is disabled unless ``cluster_address`` is given (``127.0.0.1:<port>``, see
    :func:`alertmanager_pair`): then it gossips there with the ``cluster_peers``, sharing
    silences and notification logs as an HA pair does."""

    name = "alertmanager"
    binary = ALERTMANAGER_BINARY
    log_name = "alertmanager.log"

    def __init__(
        self,
        config_yaml: str,
        *,
        base_dir: str | Path | None = None,
        cluster_address: str | None = None,
        cluster_peers: Sequence[str] = (),
        placement: Placement | None = None,
    ) -> None:
        super().__init__(base_dir, placement)
        self.config_yaml = config_yaml
        if cluster_peers and cluster_address is None:
            raise ValueError("cluster peers need a cluster address to listen on")
        self.cluster_address = cluster_address
        self.cluster_peers = tuple(cluster_peers)

    @property
    def config_path(self) -> Path:
        return self.directory / "alertmanager.yml"

    def _write_config(self, directory: Path) -> None:
        (directory / "alertmanager.yml").write_text(self.config_yaml)
        (directory / "data").mkdir(exist_ok=True)

    def _command(self, directory: Path, port: int) -> list[str]:
        return [
            self.binary,
            f"--config.file={directory / 'alertmanager.yml'}",
            f"--storage.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            *self._cluster_args(),
            "--log.level=info",
        ]

    def _cluster_args(self) -> list[str]:
        if self.cluster_address is None:
            return ["--cluster.listen-address="]
        return [
            f"--cluster.listen-address={self.cluster_address}",
            f"--cluster.advertise-address={self.cluster_address}",
            *(f"--cluster.peer={peer}" for peer in self.cluster_peers),
        ]

    def cluster_status(self) -> dict[str, Any]:
        """``cluster`` of /api/v2/status: ``status`` (``ready``, ``settling``, ``disabled``)
        and ``peers``."""
        return dict(self._get_json("/api/v2/status")["cluster"])

    def reload(self) -> None:
        """Write :attr:`config_yaml` again and ask Alertmanager to reload it."""
        self._write_config(self.directory)
        status, body = _http("POST", f"{self.url}/-/reload")
        if status != 200:
            raise LocalServiceError(f"reload failed ({status}): {body[:500]!r}")

    def alerts(self, **filters: str) -> Result:
        """Alerts Alertmanager holds (/api/v2/alerts); ``filters`` as query parameters
        (``active="false"``, ``inhibited="true"``, ...)."""
        return list(self._get_json("/api/v2/alerts", filters or None))

    def post_alerts(self, alerts: Sequence[dict[str, Any]]) -> None:
        """Post alerts as Prometheus would (/api/v2/alerts)."""
        status, body = _http("POST", f"{self.url}/api/v2/alerts", json.dumps(list(alerts)).encode())
        if status != 200:
            raise LocalServiceError(f"posting alerts answered {status}: {body[:500]!r}")

    async def alerts_async(self, **filters: str) -> Result:
        return await asyncio.to_thread(lambda: self.alerts(**filters))

    async def post_alerts_async(self, alerts: Sequence[dict[str, Any]]) -> None:
        await asyncio.to_thread(self.post_alerts, alerts)


def alertmanager_pair(
    config_yaml: str, *, base_dir: str | Path | None = None
) -> list[LocalAlertmanager]:
    """Two Alertmanagers with the same configuration, clustered with each other on loopback
    (each its own free gossip port, the other's as its peer), not started."""
    ports = {free_port()}
    while len(ports) < 2:
        ports.add(free_port())
    first, second = (f"127.0.0.1:{port}" for port in sorted(ports))
    return [
        LocalAlertmanager(
            config_yaml, base_dir=base_dir, cluster_address=first, cluster_peers=[second]
        ),
        LocalAlertmanager(
            config_yaml, base_dir=base_dir, cluster_address=second, cluster_peers=[first]
        ),
    ]
