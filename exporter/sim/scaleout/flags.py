"""Flags of ``nodesync sim wave``, apart from the command so that building the CLI's parser loads
neither the simulator nor the Kubernetes client."""

from __future__ import annotations

from exporter.settings import FlagAdder, listen_address, parse_duration


def add_arguments(add: FlagAdder) -> None:
    add.add("--scenario", default="", help="the scenario file (JSON, see scenarios/)")
    add.add(
        "--kubeconfig",
        default="",
        help="kubeconfig of a running API server to add the nodes to; empty: start an "
        "in-process test API server",
    )
    add.add(
        "--apiserver.listen-address",
        default="127.0.0.1:6443",
        type=listen_address,
        help="address of the in-process test API server (without --kubeconfig)",
    )
    add.add(
        "--apiserver.kubeconfig",
        default="",
        help="where to write a kubeconfig for the in-process test API server (empty: a new "
        "temporary file)",
    )
    add.add(
        "--web.listen-address",
        default="127.0.0.1:9619",
        type=listen_address,
        help="address serving the simulated nodes' agent metrics",
    )
    add.add(
        "--duration",
        default="0s",
        type=parse_duration,
        help="stop after this long (0: run until interrupted)",
    )
