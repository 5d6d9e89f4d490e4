"""docs/configuration.md's tables are what the declarations give (scripts/gen-configuration),
and every variable is nodesync's own."""

from __future__ import annotations

import pytest

from exporter.cli import get_parser
from exporter.commandline import SettingAction
from exporter.configuration_docs import commands, render
from tests.configuration_docs import DOC

# Variables with a meaning of their own outside nodesync (the downward API's usual name).
CONVENTIONAL = {"NODE_NAME", "POD_UID"}


def test_the_tables_are_current() -> None:
    current = DOC.read_text(encoding="utf-8")
    assert render(current, get_parser({})) == current, "run scripts/gen-configuration"


def test_a_table_for_a_command_that_does_not_exist_is_an_error() -> None:
    text = "<!-- settings: nodesync nothing -->\n<!-- end of settings -->\n"
    with pytest.raises(ValueError, match="no such command"):
        render(DOC.read_text(encoding="utf-8") + text, get_parser({}))


def test_a_command_without_a_table_is_an_error() -> None:
    with pytest.raises(ValueError, match="no table for nodesync agent"):
        render("", get_parser({}))


@pytest.mark.parametrize("command", sorted(name for name, _ in commands(get_parser({}))))
def test_every_variable_is_nodesyncs(command: str) -> None:
    parser = dict(commands(get_parser({})))[command]
    for action in parser._actions:
        if isinstance(action, SettingAction):
            env = action.setting.environment
            assert env.startswith("NODESYNC_") or env in CONVENTIONAL, env
