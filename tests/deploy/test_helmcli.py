"""The ``helm`` the doc's blocks run (tests/deploy/helmcli.py): the arguments the docs use,
parsed as Helm parses them, and every other refused."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest

from tests.deploy.helmcli import _seconds, parse_set, parse_set_json, parser
from tests.deploy.manifests import ROOT

DOCS = ("install.md", "uninstall.md", "upgrade.md")


@pytest.mark.parametrize(
    ("arguments", "values"),
    [
        (["dryRun=false"], {"dryRun": False}),
        (["deleteNodes=true,ha.enabled=true"], {"deleteNodes": True, "ha": {"enabled": True}}),
        (["ha.replicas=3"], {"ha": {"replicas": 3}}),
        (["image.tag=0.1.1"], {"image": {"tag": "0.1.1"}}),
        (["image.tag=007"], {"image": {"tag": "007"}}),  # Helm keeps leading zeros a string
        (["image.repository=r.example/n"], {"image": {"repository": "r.example/n"}}),
        (["ha.replicas=0"], {"ha": {"replicas": "0"}}),  # as Helm: a leading 0 stays a string
        (["webhookToken.value=a=b"], {"webhookToken": {"value": "a=b"}}),
        (["image.digest=null"], {"image": {"digest": None}}),
        (["a.b=1", "a.c=x"], {"a": {"b": 1, "c": "x"}}),
    ],
)
def test_set_is_parsed_as_helm_parses_it(arguments: list[str], values: dict[str, Any]) -> None:
    found: dict[str, Any] = {}
    for argument in arguments:
        parse_set(found, argument)
    assert found == values


@pytest.mark.parametrize(
    "argument", ["dryRun", "=true", "list[0]=a", "a\\,b=c", "a.b=1,a.b.c=2", "x..y=1"]
)
def test_set_forms_the_docs_do_not_use_are_refused(argument: str) -> None:
    with pytest.raises(ValueError, match="--set"):
        parse_set({}, argument)


def test_set_json_sets_one_key_to_a_json_value() -> None:
    values: dict[str, Any] = {"controller": {"resources": {}}}
    parse_set_json(values, 'controller.extraArgs=["--log.level=debug","--a=1,2"]')
    parse_set_json(values, "ha.replicas=3")
    assert values == {
        "controller": {"resources": {}, "extraArgs": ["--log.level=debug", "--a=1,2"]},
        "ha": {"replicas": 3},
    }


@pytest.mark.parametrize("argument", ["a.b", "a.b=[1,", "a..b=1", "a=1,b=2"])
def test_set_json_forms_that_are_not_one_key_and_json_are_refused(argument: str) -> None:
    with pytest.raises(ValueError, match="--set-json"):
        parse_set_json({}, argument)


@pytest.mark.parametrize(("text", "seconds"), [("300s", 300), ("5m", 300), ("1m30s", 90)])
def test_timeouts_are_go_durations(text: str, seconds: int) -> None:
    assert _seconds(text) == seconds


@pytest.mark.parametrize("text", ["5", "5 m", "1.5m", "m"])
def test_other_timeouts_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--timeout"):
        _seconds(text)


def _doc_commands() -> list[str]:
    """Every ``helm`` command in the docs: in shell blocks, and inline (backquoted; a bare
    ``helm upgrade`` in a sentence names the command, it is not one to run)."""
    found = []
    for name in DOCS:
        text = (ROOT / "docs" / name).read_text()
        for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
            found += [line for line in block.replace("\\\n", " ").splitlines()
                      if line.startswith("helm ")]  # fmt: skip
        inline = [" ".join(c.split()) for c in re.findall(r"`(helm [^`]+)`", text)]
        found += [c for c in inline if len(c.split()) > 2]
    return found


def test_every_helm_command_of_the_docs_is_one_the_tests_run() -> None:
    commands = _doc_commands()
    assert {shlex.split(c)[1] for c in commands} == {"install", "upgrade", "uninstall"}, commands
    for command in commands:
        args = parser().parse_args(shlex.split(command)[1:])
        for argument in getattr(args, "sets", []):
            parse_set({}, argument)
