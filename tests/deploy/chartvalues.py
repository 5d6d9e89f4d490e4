"""The chart's values that are not switches between kustomizations: each replaces or extends
a few lines of a generated template (tests/deploy/helmchart.py).

| value | what it changes |
|---|---|
| ``controller.resources``, ``agent.resources`` | the container's ``resources:`` block |
| ``controller.extraArgs``, ``agent.extraArgs`` | flags appended to the container's ``args`` |
| ``monitoringLabels`` | labels added to the Prometheus Operator's objects |
| ``imagePullSecrets`` | the pod specs of both workloads |
| ``controller.nodeSelector``, ``controller.tolerations`` | the controller's pod spec |

A flag the manifests set (in ``args``, or through its ``NODESYNC_`` environment variable, which
a flag would override) is *reserved*: the chart refuses it in ``extraArgs``, naming it, since
it is set from a value or is what the rest of the objects rely on (the ports, the journal, the
mounted paths). The reserved flags are read from the command's own parser, so a setting's
boolean ``--no-`` form and its former names are reserved too.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from typing import Any

Key = tuple[str, str, str]  # kind, namespace, name
Obj = dict[str, Any]


class ValueLinesError(RuntimeError):
    """A template's lines are not what a value's substitution expects."""


#: The workloads whose container takes values, by (kind, name): the values' prefix.
WORKLOADS = {
    ("Deployment", "nodesync-controller"): ".Values.controller",
    ("DaemonSet", "nodesync-agent"): ".Values.agent",
}
#: The kinds that carry ``monitoringLabels``: what a Prometheus or Alertmanager selects.
LABELLED_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule", "AlertmanagerConfig")

RESOURCES_LINE = re.compile(r"^(\s*)resources:$")
ARGS_LINE = re.compile(r"^(\s*)(- )?args:$")
LABELS_LINE = re.compile(r"^  labels:$")
#: A line of the pod spec (one per workload) before which the pod values go.
POD_SPEC_LINE = re.compile(r"^      serviceAccountName: ")
#: The pod spec's fields that come from the values, by workload: field -> value.
POD_FIELDS = {
    ("Deployment", "nodesync-controller"): {
        "imagePullSecrets": ".Values.imagePullSecrets",
        "nodeSelector": ".Values.controller.nodeSelector",
        "tolerations": ".Values.controller.tolerations",
    },
    ("DaemonSet", "nodesync-agent"): {"imagePullSecrets": ".Values.imagePullSecrets"},
}


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block_end(lines: list[str], at: int, depth: int, *, items: bool = False) -> int:
    """The index after the block that ``lines[at]`` opens: the deeper lines after it (with
    ``items``, also the ``- `` items at its own depth, as a sequence under a key is written),
    and any switch's directives among them (a directive starts its line); directives right
    after it belong to what follows."""
    end = at + 1
    while end < len(lines) and (
        lines[end].startswith("{{")
        or _depth(lines[end]) > depth
        or (items and _depth(lines[end]) == depth and lines[end].lstrip().startswith("- "))
    ):
        end += 1
    while end > at + 1 and lines[end - 1].startswith("{{"):
        end -= 1
    return end


def _one(key: Key, lines: list[str], pattern: re.Pattern[str], what: str) -> int:
    found = [i for i, line in enumerate(lines) if pattern.match(line)]
    if len(found) != 1:
        raise ValueLinesError(f"{key[0]} {key[2]}: {len(found)} {what}, expected one")
    return found[0]


def resources_from_values(key: Key, lines: list[str]) -> list[str]:
    """The workload's one container ``resources:`` block replaced by its value."""
    prefix = WORKLOADS.get((key[0], key[2]))
    if prefix is None:
        return lines
    at = _one(key, lines, RESOURCES_LINE, "resources blocks")
    depth = _depth(lines[at])
    end = _block_end(lines, at, depth)
    if any("{{" in line for line in lines[at + 1 : end]):
        raise ValueLinesError(f"{key[0]} {key[2]}: a switch changes its resources")
    value_lines = [lines[at], f"{{{{- toYaml {prefix}.resources | nindent {depth + 2} }}}}"]
    return [*lines[:at], *value_lines, *lines[end:]]


def reserved_flags(containers: Iterable[Obj], parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of the settings ``containers`` set, by a flag in their ``args`` or
    by the setting's environment variable; ``parser`` is the command's (``nodesync agent``)."""
    environment: set[str] = set()
    flags: set[str] = set()
    for container in containers:
        environment |= {variable["name"] for variable in container.get("env", [])}
        flags |= {arg.split("=", 1)[0] for arg in container.get("args", []) if arg[:2] == "--"}
    # A setting's names: its flag, a boolean's --no- form, former names (separate actions).
    names: dict[str, set[str]] = {}
    for action in parser._actions:
        if (setting := getattr(action, "setting", None)) is not None:
            names.setdefault(setting.environment, set()).update(action.option_strings)
    reserved = {
        name
        for variable, strings in names.items()
        if variable in environment or flags & strings
        for name in strings
    }
    unknown = flags - {s for a in parser._actions for s in a.option_strings}
    if unknown:
        raise ValueLinesError(f"the manifests pass flags the command does not have: {unknown}")
    return sorted(reserved)


def extra_args_from_values(key: Key, lines: list[str], reserved: list[str]) -> list[str]:
    """The workload's container ``args`` extended by its ``extraArgs`` value, through the
    ``nodesync.extraArgs`` helper that refuses the ``reserved`` flags."""
    prefix = WORKLOADS.get((key[0], key[2]))
    if prefix is None:
        return lines
    at = _one(key, lines, ARGS_LINE, "args lists")
    match = ARGS_LINE.match(lines[at])
    assert match is not None
    # Under "- args:" the key (and its items) sit two columns right of the dash.
    depth = _depth(lines[at]) + (2 if match.group(2) else 0)
    end = _block_end(lines, at, depth, items=True)
    if any("{{" in line for line in lines[at + 1 : end]):
        raise ValueLinesError(f"{key[0]} {key[2]}: a switch changes its args")
    name = prefix.removeprefix(".Values.") + ".extraArgs"
    flags = " ".join(f'"{flag}"' for flag in reserved)
    call = (
        f'include "nodesync.extraArgs" (dict "value" "{name}" "args" {prefix}.extraArgs '
        f'"reserved" (list {flags}))'
    )
    return [
        *lines[:end],
        f"{{{{- with {call} }}}}{{{{ . | nindent {depth} }}}}{{{{- end }}}}",
        *lines[end:],
    ]


def monitoring_labels_from_values(key: Key, lines: list[str]) -> list[str]:
    """``monitoringLabels`` added to the labels of the objects a Prometheus or an Alertmanager
    selects (the schema refuses the keys the manifests set)."""
    if key[0] not in LABELLED_KINDS:
        return lines
    at = _one(key, lines, LABELS_LINE, "metadata.labels blocks")
    end = _block_end(lines, at, 2)
    value = "{{- with .Values.monitoringLabels }}{{ toYaml . | nindent 4 }}{{- end }}"
    return [*lines[:end], value, *lines[end:]]


def pod_fields_from_values(key: Key, lines: list[str]) -> list[str]:
    """The workload's pod spec with the fields of POD_FIELDS, each when its value is set; a
    field the manifests already set would be written twice and stops the generator."""
    fields = POD_FIELDS.get((key[0], key[2]))
    if fields is None:
        return lines
    at = _one(key, lines, POD_SPEC_LINE, "pod specs")
    depth = _depth(lines[at])
    added: list[str] = []
    for field, value in fields.items():
        if any(line == f"{' ' * depth}{field}:" for line in lines):
            raise ValueLinesError(f"{key[0]} {key[2]}: the manifests set {field} already")
        # A mapping's keys go one level deeper; a list's items at the field's own depth.
        items = depth + (2 if field == "nodeSelector" else 0)
        added += [
            f"{{{{- with {value} }}}}",
            f"{' ' * depth}{field}:",
            f"{{{{- toYaml . | nindent {items} }}}}",
            "{{- end }}",
        ]
    return [*lines[:at], *added, *lines[at:]]
