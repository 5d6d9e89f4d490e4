"""Flags of ``nodesync plan``, apart from the command so that building the CLI's parser loads
nothing of the Kubernetes client."""

from __future__ import annotations

from exporter.controller.hook_settings import add_guard_flags
from exporter.controller.settings import add_cluster_view_flags
from exporter.settings import FlagAdder


def add_arguments(add: FlagAdder) -> None:
    add.add(
        "--payload",
        default="-",
        help="Alertmanager webhook payload (JSON) to plan for; - reads it from stdin",
    )
    add_cluster_view_flags(add)
    add_guard_flags(add)
    add.add(
        "--output",
        default="text",
        choices=["text", "json"],
        help="text for people, json for tools",
    )
