"""Maps the agent's latest state to metric families, fresh on every scrape."""

from __future__ import annotations

from prometheus_client.metrics_core import Metric

from exporter.agent.state import AgentState
from exporter.metrics.drift import drift_families
from exporter.metrics.host import host_families
from exporter.metrics.kubelet import kubelet_families
from exporter.metrics.pod_problems import pod_problem_families
from exporter.metrics.pods import pods_family
from exporter.metrics.runtime import runtime_families
from exporter.metrics.selfmetrics import SourceStatus, self_families


def agent_families(state: AgentState) -> list[Metric]:
    families: list[Metric] = []
    families.append(pods_family(state.phases, state.api_phases))
    families += runtime_families(state.runtime, state.terminations, state.loops, state.stats)
    families += host_families(state.host, state.pressure)
    families += kubelet_families(state.kubelet)
    families += pod_problem_families(state.problems)
    families += drift_families(state.drift)
    families += self_families(
        {
            name: SourceStatus(up=source.up, last_success_timestamp=source.last_success)
            for name, source in state.sources.items()
        }
    )
    return families
