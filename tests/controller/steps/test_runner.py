"""The step runner's table (exporter.controller.steps): every step kind has its handler."""

from __future__ import annotations

from exporter.controller.steps import HANDLERS
from exporter.model.rollback import StepKind


def test_every_step_kind_has_a_handler() -> None:
    assert set(HANDLERS) == set(StepKind)
