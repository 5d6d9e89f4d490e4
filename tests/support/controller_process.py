"""One ``nodesync controller`` process of an acceptance test (tests/support/controllers.py),
started from a pool of warm interpreters: :class:`Controller`, :class:`WarmPool` and the
``warm_pool`` fixture."""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodesync_sim.real.kube_apiserver import CONTROLLER
from nodesync_sim.real.process import ChildProcess, free_port
from tests.support.acceptance import (
    LEADER_ELECTION,
    LEADER_LEASE,
    START_TIMEOUT,
    WARM,
    WAVE_LABEL,
    WEBHOOK_TOKEN,
)
from tests.support.kubeapi import REPO_ROOT
from tests.support.kubeproxy import KubeProxy

if TYPE_CHECKING:
    from tests.support.scene import Scene


@dataclass
class Warm:
    """An interpreter with the controller's modules imported (tests/support/warm_start.py),
    waiting for its arguments."""

    process: ChildProcess
    argv_file: Path


class WarmPool:
    """A few :class:`Warm` processes kept ready: a controller taken from here starts in well
    under a second, and the next one's imports run while the test works."""

    def __init__(self, directory: Path, size: int = 2) -> None:
        self.directory = directory
        self.size = size
        self._launched = 0
        self._ready: list[Warm] = []
        self._taken: list[Warm] = []
        self._fill()

    def _fill(self) -> None:
        while len(self._ready) < self.size:
            self._launched += 1
            name = f"controller-{self._launched}"
            argv_file = self.directory / f"{name}.argv.json"
            env = {
                **os.environ,
                "NODESYNC_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
                "PYTHONPATH": str(REPO_ROOT),
            }
            process = ChildProcess(
                [sys.executable, "-m", "tests.support.warm_start", str(argv_file)],
                log_path=self.directory / f"{name}.log",
                cwd=REPO_ROOT,
                env=env,
                name=name,
            )
            process.start()
            self._ready.append(Warm(process, argv_file))

    def take(self) -> Warm:
        warm = self._ready.pop(0)
        self._taken.append(warm)
        self._fill()
        return warm

    def close(self) -> None:
        """Kill every process launched (by PID), idle or not."""
        for warm in self._taken + self._ready:
            warm.process.kill()
        self._ready, self._taken = [], []


@pytest.fixture(scope="module")
def warm_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmPool]:
    pool = WarmPool(tmp_path_factory.mktemp("controllers"))
    try:
        yield pool
    finally:
        pool.close()


class Controller:
    """One ``nodesync controller`` process (``python -m exporter controller ...``, from a
    :class:`WarmPool`): its own journal and port, talking to the API server through ``proxy``
    (its own, so the test can stop it at an exact request) or directly."""

    def __init__(
        self,
        scene: Scene,
        name: str,
        *,
        proxy: KubeProxy | None,
        leader_elect: bool,
        identity: str,
        args: Sequence[str],
        journal: Path | None = None,
    ) -> None:
        self.scene = scene
        self.name = name
        self.proxy = proxy
        self.identity = identity
        self.port = free_port()
        self.journal = journal or scene.workdir / f"{name}.journal.db"
        kubeconfig = scene.workdir / f"{name}.kubeconfig"
        if proxy is not None:
            proxy.kubeconfig(CONTROLLER, kubeconfig)
        else:
            kubeconfig.write_text(scene.server.kubeconfig(CONTROLLER).read_text())
        self.argv = [
            "controller",
            f"--kubeconfig={kubeconfig}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--journal.path={self.journal}",
            f"--wave.label={WAVE_LABEL}",
            "--log.level=info",
        ]
        if leader_elect:
            self.argv += [
                *LEADER_ELECTION,
                f"--leader-election.namespace={scene.namespace}",
                f"--leader-election.name={LEADER_LEASE}",
                f"--leader-election.identity={identity}",
            ]
        self.argv += list(args)
        warm = scene.pool.take()
        self.process = warm.process
        self._argv_file = warm.argv_file
        self.log = warm.process.log_path
        self.started = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.started and self.process.running

    def start(self) -> Controller:
        """Run the controller and wait until it is ready."""
        self.process.wait_until(
            lambda: WARM in self.log.read_text(errors="replace"),
            timeout=START_TIMEOUT,
            what="warm (its imports done)",
        )
        self._argv_file.write_text(json.dumps(self.argv))
        self.started = True
        self.process.signal(signal.SIGUSR1)
        self.process.wait_until(
            lambda: self._get("/readyz") == 200,
            timeout=START_TIMEOUT,
            what="ready (its cluster view listed)",
        )
        return self

    def _request(
        self, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {WEBHOOK_TOKEN}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.url + path, data=body, headers=headers, method=method)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            with error:
                raw = error.read()
            try:
                return error.code, json.loads(raw or b"{}")
            except ValueError:
                return error.code, {"body": raw.decode(errors="replace")}
        except OSError:
            return 0, {}

    def _get(self, path: str) -> int:
        return self._request("GET", path)[0]

    def post_alerts(self, payload: dict[str, Any]) -> int:
        """POST the payload to the webhook as Alertmanager does; the HTTP status (0: no answer)."""
        return self._request("POST", "/alerts", json.dumps(payload).encode())[0]

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample of a fresh scrape of /metrics (None: no such series)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url + "/metrics", timeout=10) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    def kill(self) -> None:
        """SIGKILL (no shutdown of any kind), and wait until it is gone."""
        self.process.kill()
        assert self.process.returncode == -signal.SIGKILL, self.process.returncode
        if self.proxy is not None:
            self.proxy.release()

    def stop(self) -> None:
        """At the end of a test: SIGKILL (nothing of its shutdown is under test here)."""
        self.process.kill()
        if self.proxy is not None:
            self.proxy.release()

    def log_tail(self, lines: int = 60) -> str:
        return self.process.log_tail(lines)
