"""The firing action alerts a guard holds back (exporter.model.holds) as one gauge family,
built from their labels at scrape time (pure, as kube-state-metrics' generators: a value in, a
family out).

``nodesync_alert_held{alertname, node, reason}`` counts the alerts of that name about that node
held for that reason: one series per node and alert name while it is held, none otherwise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily

#: One held alert as the family counts it: (alertname, node, reason).
Held = tuple[str, str, str]


def held_family(held: Iterable[Held]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "nodesync_alert_held",
        "Firing action alerts with no rollback running, by the guard that holds them back "
        "(only while held).",
        labels=["alertname", "node", "reason"],
    )
    counts = Counter(held)
    for labels, n in sorted(counts.items()):
        family.add_metric(list(labels), n)
    return family
