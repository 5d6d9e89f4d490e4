"""How an alert episode ended (pure): an alert of an action rule about a node, from its first
firing to its resolution, ends as one of a few outcomes (:data:`OUTCOMES`), the label values of
``nodesync_alert_episodes_total`` (exporter.metrics.rollback):

- ``remediated``: a rollback ran for it (it planned, joined or escalated one) and succeeded;
- ``failed``: that rollback failed, or was stopped for another reason than the node's recovery
  or a guard;
- ``cleared``: it resolved with no rollback having run: before it was decided, or its rollback
  was given back (the node recovered) or cancelled before its first step (its alerts resolved);
- ``refused``: the planner refused it (an unknown node, a label missing or wrong);
- ``held``: a guard held it (exporter.model.holds: budget, pause, exemption, window) until it
  resolved, or refused it for good;
- in a dry run, ``dry_run_cleared``: nodesync would have acted, and the alert resolved by
  itself within ``clear_within`` of that decision (the action was not needed: a false
  positive of the rule), and ``dry_run_outlasted``: it would have acted and the alert lasted
  longer (something else ended it).

An episode ends when its resolution is known and, if a rollback runs for it, once that rollback
ended too: :func:`outcome` says None until then. Alerts without an action (``nodesync_action``
missing or ``none``) are no action rule's: they have no outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from exporter.model.decision import ESCALATE, JOIN, PLAN, REFUSED
from exporter.model.holds import hold_reason
from exporter.model.planner import RESOLVED
from exporter.model.rollback import ACTIVE_PHASES, Action, Phase

REMEDIATED: Final = "remediated"
FAILED: Final = "failed"
CLEARED: Final = "cleared"
OUTCOME_REFUSED: Final = "refused"
HELD: Final = "held"
DRY_RUN_CLEARED: Final = "dry_run_cleared"
DRY_RUN_OUTLASTED: Final = "dry_run_outlasted"

#: Every outcome, in the order an operator reads them.
OUTCOMES: Final = (
    REMEDIATED,
    FAILED,
    CLEARED,
    OUTCOME_REFUSED,
    HELD,
    DRY_RUN_CLEARED,
    DRY_RUN_OUTLASTED,
)

#: The verdict a decision made in a dry run is stored with (exporter.controller.journal).
DRY_RUN_VERDICT: Final = "dry_run"
#: A rollback ran for the alert: its end is the episode's.
_ACTED: Final = (PLAN, JOIN, ESCALATE)
#: A cancelled rollback's reasons that say the node came right without it: the node recovered
#: (it was given back), or every alert of the rollback resolved before its first step.
CLEARING_REASONS: Final = frozenset({"recovered", "alert_resolved"})


@dataclass(frozen=True, slots=True)
class Episode:
    """One alert episode as the journal and the NodeRollbacks tell it."""

    action: str  # the alert's nodesync_action label
    decided_at: float
    resolved_at: float | None  # None while it fires
    verdict: str  # the decision's: plan, join, escalate, refused or dry_run
    reason: str = ""  # a refusal's reason
    #: The guard's reason the alert waited under last before it resolved undecided ("" none).
    waited: str = ""
    #: The phase of the NodeRollback it made or joined (None: not found in the cluster).
    phase: Phase | None = None
    rollback_reason: str = ""  # that rollback's status.reason


def outcome(episode: Episode, clear_within: float) -> str | None:
    """The outcome of an ended episode; None while it goes on (it fires, or its rollback is
    still active), for an alert with no action, and for a rollback no longer found (deleted
    before its end was seen: how it ended is not known)."""
    if episode.action in ("", Action.NONE.value) or episode.resolved_at is None:
        return None
    if episode.verdict == DRY_RUN_VERDICT:
        lasted = episode.resolved_at - episode.decided_at
        return DRY_RUN_CLEARED if lasted <= clear_within else DRY_RUN_OUTLASTED
    if episode.verdict in _ACTED:
        return _rollback_outcome(episode)
    if episode.verdict != REFUSED:
        return None
    if episode.reason == RESOLVED:  # resolved before it was decided
        return HELD if hold_reason(episode.waited) is not None else CLEARED
    return HELD if hold_reason(episode.reason) is not None else OUTCOME_REFUSED


def _rollback_outcome(episode: Episode) -> str | None:
    phase = episode.phase
    if phase is None or phase in ACTIVE_PHASES:
        return None
    if phase is Phase.SUCCEEDED:
        return REMEDIATED
    if phase is Phase.CANCELLED:
        if episode.rollback_reason in CLEARING_REASONS:
            return CLEARED
        if hold_reason(episode.rollback_reason) is not None:
            return HELD  # stopped by a guard (protected, another remediator) before its end
    return FAILED
