"""Copies of the shipped rules and Alertmanager configuration with a scenario's settings.

The shipped files are never edited. Each is read as YAML (nodesync_sim.yamlfile: duplicate keys are
errors), changed as a structure, and written as JSON (which is YAML) into a directory of the
caller's:

- thresholds: the constant recording rules ``nodesync:<name>`` get ``vector(<value>)``;
- ``for:`` and ``keep_firing_for:`` of the alerts (one value for all, or per alert; a value for
  all changes only alerts that have the key);
- Alertmanager: the nodesync-hook receiver's URL and bearer-token file, and the timers
  (``group_wait``, ``group_interval``, ``repeat_interval``) of the route to it.

Anything named that does not exist (a threshold, an alert, the receiver) is an
:class:`OverrideError`: an override that silently does nothing would make a rehearsal lie.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from nodesync_sim.fake.scaleout.scenario import AlertmanagerSpec, RuleOverrides
from nodesync_sim.yamlfile import YAMLError, load_file

HOOK_RECEIVER: Final = "nodesync-hook"
THRESHOLD_PREFIX: Final = "nodesync:"


class OverrideError(ValueError):
    """An override names something the shipped files do not have, or a file is unreadable."""


def prometheus_duration(seconds: float) -> str:
    """``3s``, ``500ms``, ``0s``: a duration Prometheus and Alertmanager read."""
    if seconds < 0 or not math.isfinite(seconds):
        raise OverrideError(f"not a duration: {seconds!r}")
    millis = round(seconds * 1000)
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"


def _read(path: Path) -> Any:
    try:
        return load_file(path)
    except (OSError, YAMLError) as exc:
        raise OverrideError(f"{path}: {exc}") from exc


def _rules(document: Any, path: Path) -> list[dict[str, Any]]:
    if not isinstance(document, dict) or not isinstance(document.get("groups"), list):
        raise OverrideError(f"{path}: not a Prometheus rule file")
    return [rule for group in document["groups"] for rule in group.get("rules") or ()]


def rewrite_rules(rule_files: Sequence[Path], overrides: RuleOverrides, target: Path) -> list[Path]:
    """Write every rule file, changed, into ``target``; the new paths, in the same order."""
    target.mkdir(parents=True, exist_ok=True)
    documents = [(path, _read(path)) for path in rule_files]
    rules = [rule for path, doc in documents for rule in _rules(doc, path)]
    records = {str(r["record"]) for r in rules if "record" in r}
    alerts = {str(r["alert"]) for r in rules if "alert" in r}
    for name in overrides.thresholds:
        if THRESHOLD_PREFIX + name not in records:
            raise OverrideError(f"rules.thresholds.{name}: no constant {THRESHOLD_PREFIX}{name}")
    for what, per_alert in (
        ("for", overrides.for_alert),
        ("keep_firing_for", overrides.keep_firing_for_alert),
    ):
        for name in per_alert:
            if name not in alerts:
                raise OverrideError(f"rules.{what}.{name}: no alert {name}")
    for rule in rules:
        record = str(rule.get("record", ""))
        if record.startswith(THRESHOLD_PREFIX):
            value = overrides.thresholds.get(record.removeprefix(THRESHOLD_PREFIX))
            if value is not None:
                rule["expr"] = f"vector({float(value)!r})"
        if "alert" in rule:
            _timer(rule, "for", overrides.for_all, overrides.for_alert)
            _timer(
                rule,
                "keep_firing_for",
                overrides.keep_firing_for_all,
                overrides.keep_firing_for_alert,
            )
    written = []
    for path, document in documents:
        out = target / path.name
        out.write_text(json.dumps(document, indent=1), encoding="utf-8")
        written.append(out)
    return written


def _timer(rule: dict[str, Any], key: str, for_all: float | None, per_alert: Any) -> None:
    value = per_alert.get(rule["alert"])
    if value is None and for_all is not None and key in rule:
        value = for_all
    if value is not None:
        rule[key] = prometheus_duration(value)


def _hook_route(route: Any) -> dict[str, Any] | None:
    if not isinstance(route, dict):
        return None
    if route.get("receiver") == HOOK_RECEIVER and route.get("matchers"):
        return route
    for child in route.get("routes") or ():
        found = _hook_route(child)
        if found is not None:
            return found
    return None


def alertmanager_config(
    shipped: Path, spec: AlertmanagerSpec, *, hook_url: str, token_file: Path
) -> str:
    """The shipped Alertmanager configuration delivering to ``hook_url`` with the bearer token
    in ``token_file``, with the scenario's timers; as JSON text."""
    document = _read(shipped)
    receivers = document.get("receivers") if isinstance(document, dict) else None
    hook = next(
        (r for r in receivers or () if isinstance(r, dict) and r.get("name") == HOOK_RECEIVER),
        None,
    )
    configs = hook.get("webhook_configs") if hook is not None else None
    if not configs:
        raise OverrideError(f"{shipped}: no receiver {HOOK_RECEIVER} with a webhook")
    for config in configs:
        config["url"] = hook_url
        auth = config.setdefault("http_config", {}).setdefault("authorization", {})
        auth["type"] = "Bearer"
        auth.pop("credentials", None)
        auth["credentials_file"] = str(token_file)
    route = _hook_route(document.get("route"))
    if route is None:
        raise OverrideError(f"{shipped}: no route to the receiver {HOOK_RECEIVER}")
    for key in ("group_wait", "group_interval", "repeat_interval"):
        value = getattr(spec, key)
        if value is not None:
            route[key] = prometheus_duration(value)
    return json.dumps(document, indent=1)
