"""The settings of the simulator's commands, each declared once (exporter.settings.declare);
apart from the commands so that building the CLI's parser loads neither the simulator nor the
Kubernetes client."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.declare import setting
from exporter.settings.values import (
    ADDRESS,
    DURATION,
    PATH,
    POSITIVE_COUNT,
    POSITIVE_DURATION,
    text,
)


@dataclass(frozen=True, slots=True)
class DemoSettings:
    scenario: str = setting(
        "--scenario",
        "",
        "scenario file (JSON, see scenarios/); empty: the built-in demo",
        PATH,
    )
    duration: float = setting(
        "--duration",
        "0s",
        "stop after this long; 0s: run until Ctrl-C",
        DURATION,
    )


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """``nodesync sim node``."""

    listen: tuple[str, int] = setting(
        "--web.listen-address",
        "127.0.0.1:9617",
        "address of the agent's /metrics",
        ADDRESS,
        doc="address of the agent's `/metrics`",
    )
    sync_period: float = setting("--sync.period", "5s", "agent sync period", POSITIVE_DURATION)


@dataclass(frozen=True, slots=True)
class APIServerSettings:
    """``nodesync sim apiserver``."""

    listen: tuple[str, int] = setting(
        "--web.listen-address",
        "127.0.0.1:6443",
        "address serving the Kubernetes API (plain HTTP)",
        ADDRESS,
        doc="address serving the Kubernetes API",
    )
    token: str = setting(
        "--token",
        "",
        "bearer token clients must send (empty: a random one, printed in the kubeconfig)",
        text("TOKEN"),
        env="NODESYNC_SIM_TOKEN",
        doc="bearer token clients must send (empty: a random one, written into the kubeconfig)",
    )
    kubeconfig: str = setting(
        "--kubeconfig",
        "",
        "where to write a kubeconfig for this server (empty: a new temporary file)",
        PATH,
        doc="where to write the kubeconfig (empty: a new temporary file)",
    )
    bookmark_interval: float = setting(
        "--bookmark-interval",
        "60s",
        "interval between watch bookmarks",
        POSITIVE_DURATION,
    )
    history_limit: int = setting(
        "--history-limit",
        "20000",
        "changes kept for watches and lists from older resourceVersions",
        POSITIVE_COUNT,
    )
    history_age: float = setting(
        "--history-age",
        "5m",
        "how long a change is kept for watches and lists from older resourceVersions (older "
        "ones get 410 Expired, as after a real server's etcd compaction)",
        POSITIVE_DURATION,
    )


@dataclass(frozen=True, slots=True)
class WaveSettings:
    """``nodesync sim wave``."""

    scenario: str = setting(
        "--scenario",
        "",
        "the scenario file (JSON, see scenarios/)",
        PATH,
        doc="the scenario file (JSON, see `scenarios/`)",
    )
    kubeconfig: str = setting(
        "--kubeconfig",
        "",
        "kubeconfig of a running API server to add the nodes to; empty: start an "
        "in-process test API server",
        PATH,
        doc="kubeconfig of a running API server to add the nodes to; empty: start an "
        "in-process test API server (only it can give old nodes their creation times)",
    )
    apiserver_listen: tuple[str, int] = setting(
        "--apiserver.listen-address",
        "127.0.0.1:6443",
        "address of the in-process test API server (without --kubeconfig)",
        ADDRESS,
        doc="address of the in-process test API server",
    )
    apiserver_kubeconfig: str = setting(
        "--apiserver.kubeconfig",
        "",
        "where to write a kubeconfig for the in-process test API server (empty: a new "
        "temporary file)",
        PATH,
        doc="where to write the in-process server's kubeconfig (empty: a new temporary file)",
    )
    listen: tuple[str, int] = setting(
        "--web.listen-address",
        "127.0.0.1:9619",
        "address serving the simulated nodes' agent metrics",
        ADDRESS,
        doc="address serving the simulated nodes' agent metrics (every series labelled `node`: "
        "scrape with `honor_labels: true`)",
    )
    duration: float = setting(
        "--duration",
        "0s",
        "stop after this long (0: run until interrupted)",
        DURATION,
        doc="stop after this long; `0s`: run until interrupted",
    )


@dataclass(frozen=True, slots=True)
class ScenariosSettings:
    """``nodesync sim scenarios``."""

    scenarios_dir: str = setting(
        "--scenarios-dir",
        "scenarios",
        "directory of the scenario library (its files with an 'expect' key are run)",
        PATH,
        doc="directory of the scenario library; its files with an `expect` key are run",
    )
    only: str = setting(
        "--only",
        "",
        "run only these scenarios (names, comma separated); empty: all",
        text("NAME[,NAME...]"),
        doc="run only these scenarios (their names, comma separated); empty: every one",
    )
