"""Flags of ``nodesync demo``, apart from the command so the CLI's parser stays light."""

from __future__ import annotations

from exporter.settings import FlagAdder, parse_duration


def add_arguments(add: FlagAdder) -> None:
    add.add(
        "--scenario",
        default="",
        help="scenario file (JSON, see scenarios/); empty: the built-in demo",
    )
    add.add(
        "--duration",
        default="0s",
        type=parse_duration,
        help="stop after this long; 0s: run until Ctrl-C",
    )
