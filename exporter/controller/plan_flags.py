"""Flags of ``nodesync plan``, apart from the command so that building the CLI's parser loads
nothing of the Kubernetes client."""

from __future__ import annotations

from exporter.controller.hook_settings import add_guard_flags
from exporter.settings import FlagAdder, positive_duration


def add_arguments(add: FlagAdder) -> None:
    add.add(
        "--payload",
        default="-",
        help="Alertmanager webhook payload (JSON) to plan for; - reads it from stdin",
    )
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
        help="nodes created at most this long after the previous one join its scale-out wave",
    )
    add_guard_flags(add)
    add.add(
        "--output",
        default="text",
        choices=["text", "json"],
        help="text for people, json for tools",
    )
