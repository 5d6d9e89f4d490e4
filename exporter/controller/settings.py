"""Typed settings of the controller role, and its flags (each with an environment default)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

from exporter.settings import FlagAdder, listen_address, positive_duration


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    listen_host: str = "0.0.0.0"
    listen_port: int = 9618
    kubeconfig: str = ""  # empty: the pod's service account (in-cluster)
    wave_label: str | None = None  # None: waves by creation time only
    wave_gap: float = 120.0
    log_format: str = "text"
    log_level: str = "info"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ControllerSettings:
        host, port = args.web_listen_address
        return cls(
            listen_host=host,
            listen_port=port,
            kubeconfig=args.kubeconfig,
            wave_label=args.wave_label or None,
            wave_gap=args.wave_gap,
            log_format=args.log_format,
            log_level=args.log_level,
        )

    def as_log_fields(self) -> dict[str, Any]:
        return asdict(self)


def add_controller_flags(add: FlagAdder) -> None:
    add.add(
        "--web.listen-address",
        default="0.0.0.0:9618",
        type=listen_address,
        help="address serving /metrics, /healthz and /readyz",
    )
    add_cluster_view_flags(add)


def add_cluster_view_flags(add: FlagAdder) -> None:
    """How to reach the API server and group nodes into waves: the controller's and
    ``nodesync plan``'s common flags."""
    add.add(
        "--kubeconfig",
        default="",
        help="kubeconfig file to reach the API server; empty: the pod's service account",
    )
    add.add(
        "--wave-label",
        default="",
        help="node label whose value names a node's scale-out wave; empty: waves by creation time",
    )
    add.add(
        "--wave-gap",
        default="2m",
        type=positive_duration,
        help="nodes created at most this long after the previous one join its scale-out wave; "
        "a wave closes (its size is frozen) once no node joined it for this long",
    )
