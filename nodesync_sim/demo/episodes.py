"""How the alert episodes of a library scenario ended, against what it expects (its
``expect.episodes``), and a dry run's decisions.

The counts are ``nodesync_alert_episodes_total`` as Prometheus last scraped it from the
controller. An episode is counted once Alertmanager's resolved notification reached the hook
(and, where a rollback ran, once it ended), which can come a little after the scenario's
``run_seconds``: the run waits until the counts are the expected ones, for at most
:data:`EPISODES_WITHIN`.

When the counts are not the expected ones, :func:`episode_story` tells how each episode went,
link by link (the node, the journal, Prometheus, Alertmanager).

A dry run writes nothing, so its decisions are read from the controller's journal: for each
episode nodesync would have acted on that lasted longer than ``dry_run_clear_within`` after
that decision (``dry_run_outlasted``: the action was needed), the decision it would have
taken about the node; an episode that cleared by itself within it (``dry_run_cleared``: a
false positive of the rule) is a decision of ``none``. Scored against the nodes the scenario
says needed an action, precision and recall say whether nodesync told the rule's true
positives from its false ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from exporter.controller.journal import DecisionRecord, Journal
from exporter.model.outcomes import DRY_RUN_OUTLASTED, OUTCOMES
from exporter.model.rollback import Action
from nodesync_sim.demo.chain import CONTROLLER_USER, Chain
from nodesync_sim.fake.scaleout.scenario import EpisodeOutcome

EPISODES = "sum by (alertname, outcome) (nodesync_alert_episodes_total)"
#: How long after the run the expected counts may take to show (a resolved notification on its
#: way, a scrape and the controller's next pass).
EPISODES_WITHIN = 20.0
_POLL = 0.5

#: The decision a dry-run episode's action would have been, as the library names decisions.
WOULD = {
    Action.ROLLBACK_NODE.value: "rollback",
    Action.CLEANUP_ORPHANS.value: "cleanup",
    Action.EVICT_POD.value: "evict",
}

Counts = Mapping[str, Mapping[str, int]]
Expected = Mapping[str, Mapping[EpisodeOutcome, int]]


def episode_problems(expected: Expected, counted: Counts) -> list[str]:
    """Each expected alert name's outcome counted another number of times than expected (an
    outcome not named: none), as problem lines."""
    problems = []
    for alertname, outcomes in sorted(expected.items()):
        wanted: dict[str, int] = dict(outcomes.items())
        seen = counted.get(alertname, {})
        for outcome in OUTCOMES:
            want, got = wanted.get(outcome, 0), seen.get(outcome, 0)
            if got != want:
                problems.append(f"{alertname}: {got} episodes {outcome} ({want} expected)")
    return problems


async def counted(chain: Chain) -> dict[str, dict[str, int]]:
    """The episodes counted, alert name -> outcome -> count."""
    out: dict[str, dict[str, int]] = {}
    for row in await chain.prom.query_async(EPISODES):
        labels = row["metric"]
        out.setdefault(labels["alertname"], {})[labels["outcome"]] = int(float(row["value"][1]))
    return out


async def wait_for_episodes(
    chain: Chain, expected: Expected, within: float = EPISODES_WITHIN
) -> list[str]:
    """Wait until the counts are the expected ones; what still differs after ``within``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        problems = episode_problems(expected, await counted(chain))
        if not problems or loop.time() >= deadline:
            return problems
        await asyncio.sleep(_POLL)


def dry_run_writes(chain: Chain, unlimited: frozenset[str]) -> list[str]:
    """In a dry run, every controller write but those of ``unlimited`` (its leader Lease) is a
    problem: nothing may be written."""
    writes = [e for e in chain.audit.by(CONTROLLER_USER) if e.resource not in unlimited]
    if not writes:
        return []
    first = writes[0]
    return [
        f"a dry run, yet the controller wrote {len(writes)} times (first: {first.verb} "
        f"{first.resource}/{first.name})"
    ]


async def episode_story(chain: Chain, alertnames: Iterable[str]) -> list[str]:
    """How each decided episode of ``alertnames`` went, as the journal and the API server saw
    it (seconds after the waves started): when it was decided and how, when it resolved, its
    outcome, and when its node last turned Ready; then Prometheus' active alerts of those names
    and the warnings of Prometheus and Alertmanager. Told when the counts are not the expected
    ones, to say which link of the chain did not move."""
    names = set(alertnames)
    started = chain.sim.clock.started_at or 0.0
    journal = await Journal.open_read_only(str(chain.journal_path))
    try:
        ended = {d.alert_key: outcome for d, outcome in await journal.outcomes()}
        told = []
        for decision in sorted(await journal.decisions(), key=lambda d: (d.decided_at, d.node)):
            alert = await journal.alert(decision.alert_key)
            alertname = alert.labels.get("alertname", "") if alert is not None else ""
            if alert is None or alertname not in names:
                continue
            resolved = "firing"
            if alert.resolved_at is not None:
                resolved = f"resolved +{alert.resolved_at - started:.1f} s"
            told.append(
                f"{decision.node} {alertname}: decided +{decision.decided_at - started:.1f} s "
                f"({decision.verdict}), {resolved}, outcome "
                f"{ended.get(decision.alert_key) or '-'}; {_ready(chain, decision.node, started)}"
            )
    finally:
        await journal.close()
    return told + await _alerting_story(chain, names)


#: Log lines of Prometheus and Alertmanager that say a notification or a rule went wrong.
_TROUBLE = ("level=warn", "level=error", "level=WARN", "level=ERROR")


async def _alerting_story(chain: Chain, names: set[str]) -> list[str]:
    """Prometheus' active alerts of ``names`` now, and Prometheus' and Alertmanager's warnings
    (a notification dropped or refused, an evaluation that failed)."""
    active = [
        f"{a['labels'].get('node', '?')} {a['state']}"
        for a in await chain.prom.alerts_async()
        if a["labels"].get("alertname") in names
    ]
    told = [f"Prometheus' alerts now: {', '.join(sorted(active)) or 'none'}"]
    services = [("Prometheus", chain.prom), *(("Alertmanager", a) for a in chain.alertmanagers)]
    for name, service in services:
        lines = service.log_tail(200).splitlines()
        told += [f"{name}: {line}" for line in lines if any(t in line for t in _TROUBLE)][-5:]
    return told


def _ready(chain: Chain, node: str, started: float) -> str:
    """When the Node last turned Ready, as the API server stored it."""
    last, was = None, None
    for at, _, obj in chain.node_history.states.get(node, []):
        conditions = (obj.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        if ready and was is False:
            last = at
        was = ready
    if was is None:
        return "its Node never seen"
    if last is None:
        return "Ready all along" if was else "never Ready again"
    return f"Ready +{last - started:.1f} s"


async def dry_run_decisions(chain: Chain) -> dict[str, str]:
    """Per node, the decision a dry run would have taken for an episode that outlasted
    ``dry_run_clear_within`` (the journal's outcomes)."""
    journal = await Journal.open_read_only(str(chain.journal_path))
    try:
        ended = await journal.outcomes()
    finally:
        await journal.close()
    return would_have(ended, delete=chain.executor_settings.policy.delete_nodes)


def would_have(ended: Iterable[tuple[DecisionRecord, str]], *, delete: bool) -> dict[str, str]:
    """Node -> the decision of each ended episode that outlasted its dry run's
    ``dry_run_clear_within``: a node rollback is a ``delete`` with ``delete``."""
    out: dict[str, str] = {}
    for decision, outcome in ended:
        would = WOULD.get(decision.action)
        if outcome != DRY_RUN_OUTLASTED or would is None:
            continue
        out[decision.node] = "delete" if delete and would == "rollback" else would
    return out
