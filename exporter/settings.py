"""Typed settings for each role, and the one place that reads the environment.

Every flag has an environment variable as its default: ``--web.listen-address`` ↔
``NODESYNC_WEB_LISTEN_ADDRESS``. Command-line flags win over the environment, the environment
wins over the built-in default. The CLI passes ``os.environ`` in; nothing else reads it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Parse a Prometheus-style duration (``10s``, ``500ms``, ``1m30s``) or plain seconds."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pos = 0
        seconds = 0.0
        for match in _DURATION.finditer(value):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos != len(value) or not value:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r}: use e.g. 10s, 500ms, 1m30s"
            ) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must not be negative")
    return seconds


def positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must be positive")
    return seconds


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6, ``:port`` for all interfaces)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"invalid listen address {text!r}: use host:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def env_name(flag: str) -> str:
    """``--web.listen-address`` → ``NODESYNC_WEB_LISTEN_ADDRESS``."""
    return "NODESYNC_" + re.sub(r"[^A-Za-z0-9]", "_", flag.lstrip("-")).upper()


class FlagAdder:
    """Adds flags whose defaults come from the environment, and remembers them for the docs."""

    def __init__(self, parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
        self._parser = parser
        self._environ = environ

    def add(
        self,
        flag: str,
        *,
        default: str,
        help: str,
        type: Callable[[str], Any] = str,
        choices: list[str] | None = None,
        env: str | None = None,
    ) -> None:
        env = env or env_name(flag)
        raw = self._environ.get(env, default)
        try:
            value = type(raw)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            self._parser.error(f"environment variable {env}: {exc}")
        if choices is not None and raw not in choices:
            self._parser.error(f"environment variable {env}: {raw!r} is not one of {choices}")
        self._parser.add_argument(
            flag,
            dest=flag.lstrip("-").replace(".", "_").replace("-", "_"),
            type=type,
            default=value,
            choices=choices,
            metavar=None if choices else flag.lstrip("-").split(".")[-1].split("-")[-1].upper(),
            help=f"{help} (env {env}, default {default!r})",
        )


def add_common_flags(add: FlagAdder) -> None:
    add.add("--log-format", default="text", choices=["text", "json"], help="log line format")
    add.add(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="minimum level logged",
    )


@dataclass(frozen=True, slots=True)
class AgentSettings:
    cri_endpoint: str
    listen_host: str
    listen_port: int
    sync_period: float
    cri_timeout: float
    kubelet_root_dir: str
    containerd_root: str
    kubelet_healthz_url: str
    kubelet_timeout: float
    log_format: str
    log_level: str
    node_name: str = ""
    kubeconfig: str = ""
    api_initial_jitter: float = 5.0
    drift_grace_period: float = 60.0
    cleanup: bool = True
    cleanup_call_timeout: float = 30.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AgentSettings:
        host, port = args.web_listen_address
        return cls(
            cri_endpoint=args.cri_endpoint,
            listen_host=host,
            listen_port=port,
            sync_period=args.sync_period,
            cri_timeout=args.cri_timeout,
            kubelet_root_dir=args.kubelet_root_dir,
            containerd_root=args.containerd_root,
            kubelet_healthz_url=args.kubelet_healthz_url,
            kubelet_timeout=args.kubelet_timeout,
            log_format=args.log_format,
            log_level=args.log_level,
            node_name=args.node_name,
            kubeconfig=args.kubeconfig,
            api_initial_jitter=args.api_initial_jitter,
            drift_grace_period=args.drift_grace_period,
            cleanup=args.cleanup == "enabled",
            cleanup_call_timeout=args.cleanup_call_timeout,
        )

    def as_log_fields(self) -> dict[str, Any]:
        return asdict(self)


def add_agent_flags(add: FlagAdder) -> None:
    add.add(
        "--cri-endpoint",
        default="unix:///run/containerd/containerd.sock",
        help="CRI v1 endpoint of the container runtime",
    )
    add.add(
        "--web.listen-address",
        default="0.0.0.0:9617",
        type=listen_address,
        help="address serving /metrics, /healthz and /readyz",
    )
    add.add(
        "--sync-period",
        default="10s",
        type=positive_duration,
        help="how often the runtime, kubelet and host are read",
    )
    add.add(
        "--cri-timeout",
        default="2s",
        type=positive_duration,
        help="deadline of every CRI call",
    )
    add.add(
        "--kubelet-root-dir",
        default="/var/lib/kubelet",
        help="kubelet's root directory (pod directories, nodefs)",
    )
    add.add(
        "--containerd-root",
        default="/var/lib/containerd",
        help="containerd's root directory (imagefs)",
    )
    add.add(
        "--kubelet-healthz-url",
        default="http://127.0.0.1:10248/healthz",
        help="kubelet's healthz endpoint",
    )
    add.add(
        "--kubelet-timeout",
        default="1s",
        type=positive_duration,
        help="deadline of the kubelet healthz probe",
    )
    add.add(
        "--node-name",
        default="",
        env="NODE_NAME",
        help="this node's name in the API server (from the downward API); empty: no API view",
    )
    add.add(
        "--kubeconfig",
        default="",
        help="kubeconfig file for the API server; empty: in-cluster service account",
    )
    add.add(
        "--api-initial-jitter",
        default="5s",
        type=parse_duration,
        help="random delay up to this before the first list, so joining nodes spread out",
    )
    add.add(
        "--drift-grace-period",
        default="60s",
        type=parse_duration,
        help="how long a difference between API, runtime and kubelet must last to count as drift",
    )
    add.add(
        "--cleanup",
        default="enabled",
        choices=["enabled", "disabled"],
        help="answer the controller's cleanup requests (the Node annotation "
        "nodesync.io/cleanup-request) by removing drift's orphans",
    )
    add.add(
        "--cleanup-call-timeout",
        default="30s",
        type=positive_duration,
        help="deadline of each stop and remove call of a cleanup",
    )
