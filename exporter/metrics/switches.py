"""Collector switches: groups of metric families turned on or off from the command line, as
node-exporter's ``--collector.<name>`` / ``--no-collector.<name>``.

A role declares its groups once, each with its default, what it exports and why it is on or off
by default, and a settings dataclass with one field per group (:meth:`FamilyGroup.field`).
The settings machinery (exporter.settings.declare) turns each field into a boolean flag with its
``--no-`` form and its environment variable (``--collector.spec`` →
``NODESYNC_COLLECTOR_SPEC``), and into a row of docs/configuration.md::

    SPEC = FamilyGroup("spec", False, "export the taints", ("nodesync_node_taint",))

    @dataclass(frozen=True, slots=True)
    class NodeCollectors:
        spec: bool = SPEC.field()

    enabled(NodeCollectors(), [SPEC])   # -> frozenset(): off by default

Pure: declarations only; the families are built by the role's metrics module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from exporter.settings.declare import Setting
from exporter.settings.values import BOOLEAN

PREFIX = "--collector."


@dataclass(frozen=True, slots=True)
class FamilyGroup:
    """``name``: the switch (``--collector.<name>``, its settings attribute with ``_`` for
    ``-``); ``families``: the metric names it exports (a family may be shared by groups that
    export different series of it: ``detail`` says which); ``help``: the flag's help, what it
    exports and why it is on or off by default."""

    name: str
    default: bool
    help: str
    families: tuple[str, ...]
    detail: str = ""
    setting: Setting = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        declared = Setting(
            PREFIX + self.name, "true" if self.default else "false", self.help, BOOLEAN
        )
        object.__setattr__(self, "setting", declared)

    @property
    def flag(self) -> str:
        return self.setting.flag

    @property
    def attribute(self) -> str:
        return self.name.replace("-", "_")

    def field(self) -> Any:
        """A settings dataclass field holding this switch (named :attr:`attribute`)."""
        return self.setting.field()


def is_on(switches: object, group: FamilyGroup) -> bool:
    """The switch of ``group`` in a settings dataclass that declares it."""
    return bool(getattr(switches, group.attribute))


def enabled(switches: object, groups: Iterable[FamilyGroup]) -> frozenset[str]:
    """The names of the groups switched on."""
    return frozenset(g.name for g in groups if is_on(switches, g))


def exported_families(switches: object, groups: Iterable[FamilyGroup]) -> frozenset[str]:
    """The metric families the groups switched on export."""
    return frozenset(f for g in groups if is_on(switches, g) for f in g.families)
