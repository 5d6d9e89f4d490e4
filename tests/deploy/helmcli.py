"""``helm install``, ``upgrade`` and ``uninstall`` as docs/install.md and docs/uninstall.md
write them, run by Helm's own code (helm_python: Helm's library, no helm binary).

The doc's shell blocks run through bash with a ``helm`` on PATH (:func:`helm_on_path`) that is
this module. It takes exactly the arguments the docs use and refuses any other, so a doc that
starts using one fails here instead of meaning something else:

    helm install|upgrade RELEASE CHART [--namespace NS] [--set K=V[,K=V]]... [--set-json K=JSON]...
                                       [--reuse-values] [--wait] [--timeout DURATION]
    helm uninstall RELEASE [--namespace NS] [--wait] [--timeout DURATION]

``--set`` parses values as Helm's strvals does for the forms the docs use: ``true``/``false``
are booleans, ``null`` removes, integers are integers, anything else a string; dotted keys nest.
Keys with brackets or escaped commas are refused. ``--set-json`` sets one key to a JSON value.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: A key of ``--set``: dotted names, no list indexes or escapes.
KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*")


def parse_set(values: dict[str, Any], argument: str) -> None:
    """One ``--set`` argument into ``values`` (nested by dots)."""
    if "\\" in argument or "[" in argument:
        raise ValueError(f"--set {argument!r}: escapes and list indexes are not supported")
    for pair in argument.split(","):
        key, sep, text = pair.partition("=")
        if not sep or not KEY.fullmatch(key):
            raise ValueError(f"--set {argument!r}: expected KEY=VALUE")
        _assign(values, key, _typed(text), "--set")


def parse_set_json(values: dict[str, Any], argument: str) -> None:
    """One ``--set-json KEY=JSON`` argument into ``values`` (nested by dots)."""
    key, sep, text = argument.partition("=")
    if not sep or not KEY.fullmatch(key):
        raise ValueError(f"--set-json {argument!r}: expected KEY=JSON")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"--set-json {key}: not JSON: {error}") from None
    _assign(values, key, value, "--set-json")


def _assign(values: dict[str, Any], key: str, value: Any, flag: str) -> None:
    """``value`` at the dotted ``key`` of ``values``, making the maps on the way."""
    *parents, leaf = key.split(".")
    node = values
    for name in parents:
        child = node.setdefault(name, {})
        if not isinstance(child, dict):
            raise ValueError(f"{flag} {key}: {name} is not a map")
        node = child
    node[leaf] = value


def _typed(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    if re.fullmatch(r"-?[0-9]+", text) and not text.startswith("0"):  # Helm's strvals rule
        return int(text)
    return text


def _seconds(duration: str) -> int:
    """Helm's ``--timeout`` (a Go duration: ``300s``, ``5m``, ``1m30s``)."""
    parts = re.findall(r"([0-9]+)(h|m|s)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"--timeout {duration!r}: expected a duration such as 5m or 300s")
    scale = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * scale[u] for n, u in parts)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="helm")
    commands = root.add_subparsers(dest="command", required=True)
    for name in ("install", "upgrade"):
        command = commands.add_parser(name)
        command.add_argument("release")
        command.add_argument("chart")
        command.add_argument("--set", action="append", default=[], dest="sets")
        command.add_argument("--set-json", action="append", default=[], dest="set_jsons")
        if name == "upgrade":
            command.add_argument("--reuse-values", action="store_true")
    uninstall = commands.add_parser("uninstall")
    uninstall.add_argument("release")
    for command in commands.choices.values():
        command.add_argument("--namespace", "-n", default="default")
        command.add_argument("--wait", action="store_true")
        command.add_argument("--timeout", default="5m")
    return root


def run(argv: Sequence[str]) -> str:
    """One helm command; returns what helm prints (the release's status line)."""
    import helm_python as helm  # the native library loads only when a command runs

    args = parser().parse_args(argv)
    timeout = _seconds(args.timeout)
    wait = "watcher" if args.wait else None
    with helm.Config(kubeconfig_path=os.environ["KUBECONFIG"], namespace=args.namespace) as config:
        if args.command == "uninstall":
            config.uninstall(args.release, timeout=timeout, wait=wait)
            return f'release "{args.release}" uninstalled'
        values: dict[str, Any] = {}
        for argument in args.sets:
            parse_set(values, argument)
        for argument in args.set_jsons:
            parse_set_json(values, argument)
        chart = helm.Chart.load(Path(args.chart))
        if args.command == "install":
            release = config.install(
                chart, args.release, values, namespace=args.namespace, timeout=timeout, wait=wait
            )
        else:
            release = config.upgrade(
                chart,
                args.release,
                values,
                namespace=args.namespace,
                timeout=timeout,
                wait=wait,
                reuse_values=args.reuse_values,
            )
    return f"NAME: {release.get('name', args.release)}\nNAMESPACE: {args.namespace}"


def helm_on_path(directory: Path) -> str:
    """A ``helm`` command in ``directory`` (this module, with this interpreter); returns the
    PATH that finds it first."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "helm"
    root = Path(__file__).resolve().parents[2]
    script.write_text(
        f'#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} -m tests.deploy.helmcli "$@"\n'
    )
    script.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        print(run(sys.argv[1:] if argv is None else argv))
    except Exception as error:  # a bad argument or Helm's error, printed as helm prints it
        print(f"Error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
