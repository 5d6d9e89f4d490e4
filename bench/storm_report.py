"""The storm's figures, as one JSON document: the join, the lease renewals, the plans, the
actions against the checks (bench.storm_checks), the controller's API writes against its token
bucket, the webhook's acknowledgements against the floor's (and which slow ones overlapped a
scrape or a busy event loop), the flood, and the controller's memory and exposition.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bench.harness.apiserver import JSONObject
from bench.harness.exposition import total
from bench.harness.stats import summary_ms
from bench.storm_checks import STEP_EVENTS, Checks, check, count, healthy_nodes, ok_latencies
from bench.storm_cluster import is_controller_write

if TYPE_CHECKING:
    from bench.storm import Storm


def webhook_summary(rows: Sequence[JSONObject], seconds: float | None = None) -> JSONObject:
    ok = [r for r in rows if r["status"] == 200]
    alerts = sum(r["alerts"] for r in ok)
    out: JSONObject = {
        "requests": len(rows),
        "codes": dict(Counter(str(r["status"]) for r in rows)),
        "alerts_accepted": alerts,
        "latency": summary_ms([r["latency"] for r in ok]),
        "waited_for_a_slot": summary_ms([r["queued"] for r in rows]),
    }
    if seconds:
        out["seconds"] = seconds
        out["alerts_per_second"] = alerts / seconds
        out["requests_per_second"] = len(ok) / seconds
    if any("new" in r for r in rows):
        out["answered_new"] = sum(r.get("new", 0) for r in rows)
        out["answered_duplicates"] = sum(r.get("duplicates", 0) for r in rows)
        out["answered_resolved"] = sum(r.get("resolved", 0) for r in rows)
    return out


def overlaps(row: JSONObject, spans: Sequence[tuple[float, float]]) -> bool:
    end = row["at"] + row["latency"]
    return any(row["at"] < s1 and end > s0 for s0, s1 in spans)


def webhook_report(storm: Storm) -> JSONObject:
    am = storm.am
    paced_c, paced_f = am["paced"]["controller"], am["paced"]["floor"]
    first = min((r["at"] for r in paced_c), default=am["paced_ended_at"])
    seconds = am["paced_ended_at"] - first
    families = storm.families
    served = total(families, "nodesync_webhook_request_duration_seconds_count")
    clear = [r for r in paced_c if not overlaps(r, storm.scrapes)]
    slowest = sorted((r for r in paced_c if r["status"] == 200), key=lambda r: -r["latency"])
    probes = {name: [(float(a), float(b)) for a, b in rows] for name, rows in am["probes"].items()}

    def probe_during(row: JSONObject, name: str) -> float:
        """The slowest probe of a receiver sent while this request was open, in ms."""
        end = row["at"] + row["latency"]
        return 1000 * max(
            (lat for at, lat in probes[name] if row["at"] - 0.1 <= at <= end), default=0.0
        )

    return {
        "notifications": am["notifications"],
        "notifications_by_group": am["notifications_by_group"],
        "payload_bytes_max": am["payload_bytes_max"],
        "truncated_alerts_max": am["truncated_max"],
        "during_join": {
            "controller": summary_ms(ok_latencies(paced_c, storm.join_start, storm.join_end)),
            "floor": summary_ms(ok_latencies(paced_f, storm.join_start, storm.join_end)),
        },
        "paced": {
            "controller": webhook_summary(paced_c, seconds),
            "floor": webhook_summary(paced_f, seconds),
        },
        "paced_controller_not_overlapping_a_scrape": summary_ms(ok_latencies(clear)),
        "paced_controller_slowest": [
            {
                "after_join_start_s": r["at"] - storm.join_start,
                "latency_ms": r["latency"] * 1000,
                "alerts": r["alerts"],
                "overlapped_a_scrape": overlaps(r, storm.scrapes),
                "slowest_controller_healthz_meanwhile_ms": probe_during(r, "controller"),
                "slowest_floor_probe_meanwhile_ms": probe_during(r, "floor"),
            }
            for r in slowest[:8]
        ],
        "healthz_probes": {
            name: summary_ms([lat for _, lat in rows]) for name, rows in probes.items()
        },
        "flood": {
            name: webhook_summary(am["flood"][name]["samples"], am["flood"][name]["seconds"])
            for name in ("controller", "floor")
        },
        "server_side": {
            "requests": served,
            "mean_ms": 1000
            * total(families, "nodesync_webhook_request_duration_seconds_sum")
            / max(1.0, served),
            "alerts_received_firing": total(
                families, "nodesync_alerts_received_total", status="firing"
            ),
            "alerts_received_resolved": total(
                families, "nodesync_alerts_received_total", status="resolved"
            ),
            "duplicates": total(families, "nodesync_alert_duplicates_total"),
            "truncated": total(families, "nodesync_alerts_truncated_total"),
        },
    }


def _join(storm: Storm) -> JSONObject:
    failing_since = [
        storm.failed_at[n] - storm.join_start for n in storm.failing if n in storm.failed_at
    ]
    return {
        "nodes": storm.cfg.nodes,
        "old_nodes": storm.cfg.old_nodes,
        "seconds": storm.join_end - storm.join_start,
        "max_schedule_lateness_s": storm.join_lateness,
        "objects_created": count(storm, "create", "nodes")
        + count(storm, "create", "leases")
        + count(storm, "create", "pods"),
        "create_errors": storm.create_errors[:10],
        "failing_nodes": len(storm.failed_at),
        "failed_together_at_s": min(failing_since, default=None),
        "last_failed_at_s": max(failing_since, default=None),
    }


def _plans(storm: Storm) -> JSONObject:
    failing = set(storm.failing)
    return {
        "by_action_and_phase": dict(
            Counter(f"{r.spec.action.value} {r.status.phase.value}" for r in storm.rollbacks)
        ),
        "decisions": dict(Counter(d.verdict for d in storm.decisions)),
        "refusal_reasons": dict(
            Counter(d.reason for d in storm.decisions if d.verdict == "refused")
        ),
        "first_controller_write_s": min(
            (
                r.first_write_at - storm.join_start
                for node, r in storm.watch.records.items()
                if node in failing and r.first_write_at is not None
            ),
            default=None,
        ),
        "all_finished_s": storm.plans_finished - storm.join_start,
    }


def _actions(storm: Storm, checks: Checks) -> JSONObject:
    families = storm.families
    failing = set(storm.failing)
    return {
        "expected": checks.expected,
        "taken": checks.taken,
        "other_outcomes": {
            f"{lab.get('action')} {lab.get('result')}": v
            for lab, v in families.get("nodesync_actions_total", [])
            if v and lab.get("result") != "done"
        },
        "duplicates": checks.duplicates,
        "missed": checks.missed,
        "event_create_conflicts": count(storm, "create", "events", 409),
        "eviction_refusals": count(storm, "create", "pods/eviction", 429),
        "failing_nodes_not_exactly_once": checks.not_once[:10],
        "healthy_nodes_modified": checks.healthy_modified[:10],
        "healthy_nodes_with_step_events": checks.healthy_step_events[:10],
        "healthy_nodes_with_rollback_plans": checks.healthy_plans[:10],
        "healthy_pods_evicted": checks.healthy_pods_evicted,
        "events_on_healthy_nodes": checks.reasons_on(healthy_nodes(storm)),
        "events_on_failing_nodes_besides_steps": checks.reasons_on(failing, STEP_EVENTS),
        "guard_refusals": {
            lab.get("reason", ""): v
            for lab, v in families.get("nodesync_guard_refusals_total", [])
            if v
        },
        "agent_answers": storm.watch.answers_written,
        "agent_answer_conflicts": storm.watch.answer_conflicts,
        "agent_answer_failures": storm.watch.answer_failures,
        "watch_relists": storm.watch.relists,
    }


def _controller(storm: Storm) -> JSONObject:
    families = storm.families
    return {
        "rss_bytes_before_storm": storm.rss_before,
        "rss_bytes": storm.rss,
        "peak_rss_bytes": storm.peak_rss,
        "max_sampled_rss_bytes": max((r for _, r in storm.rss_samples), default=None),
        "scrapes": summary_ms([b - a for a, b in storm.scrapes]),
        "exposition_bytes": storm.exposition_bytes,
        "exposition_samples": sum(len(v) for v in families.values()),
        "exposition_largest": dict(
            Counter({name: len(rows) for name, rows in families.items()}).most_common(8)
        ),
    }


def report(storm: Storm) -> dict[str, Any]:
    """The run's figures and checks; ``targets_met`` says which targets held."""
    cfg = storm.cfg
    checks = check(storm)
    return {
        "machine": {"load_average_1m_at_end": os.getloadavg()[0]},
        "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        "targets_met": checks.targets,
        "wall_time_s": storm.wall_time,
        "join": _join(storm),
        "leases": {
            "renewals_ok": storm.renewer.ok,
            "renewals_failed": storm.renewer.failed,
            "max_schedule_lateness_s": storm.renewer.max_lateness,
            "max_gap_between_renewals_s": storm.renewer.max_gap,
        },
        "plans": _plans(storm),
        "actions": _actions(storm, checks),
        "api_writes": {
            "limit": {"qps": cfg.api_qps, "burst": cfg.api_burst},
            "by_controller": {
                f"{verb} {resource} {code}": k
                for (verb, resource, code), k in sorted(storm.counts.items())
                if is_controller_write(verb, resource)
            },
            **checks.rates,
        },
        "webhook_p99_ms": checks.p99_ms,
        "webhook": webhook_report(storm),
        "controller": _controller(storm),
    }
