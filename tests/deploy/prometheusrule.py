"""The PrometheusRule in deploy/components/monitoring, generated from rules/*.yml.

``scripts/gen-prometheusrule`` runs this module: it writes the manifest, or with ``--check``
only says whether the file on disk is what the rule files give. The manifest is JSON (which is
YAML, and kustomize reads it); every group of every rule file goes in, in file order, with
every value as the string the rule file has (Prometheus reads them as strings too).

Every alert's ``runbook_url`` in rules/*.yml is ``RUNBOOK_BASE_URL#<alert name in lower
case>``; ``--runbook-base-url`` puts another base in front of the anchors (runbooks published
elsewhere), and ``--output`` writes the manifest to another file (``-``: standard output).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from nodesync_sim.yamlfile import load_file

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "rules"
MANIFEST_PATH = "deploy/components/monitoring/prometheusrule.json"
MANIFEST = ROOT / MANIFEST_PATH
GENERATOR = "scripts/gen-prometheusrule"
#: Where the runbooks are published: the project's docs/runbooks.md (pyproject's Repository).
RUNBOOK_BASE_URL = "https://github.com/nodesync/nodesync/blob/main/docs/runbooks.md"


def rule_files(rules_dir: Path = RULES_DIR) -> list[Path]:
    return sorted(rules_dir.glob("*.yml"))


def runbook_url(alert: str, base: str = RUNBOOK_BASE_URL) -> str:
    return f"{base}#{alert.lower()}"


def check_runbook_base_url(base: str) -> str | None:
    """What is wrong with a runbook base URL (None: nothing)."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "must be an absolute http:// or https:// URL"
    if parts.fragment or base.endswith("#"):
        return "must not have a #fragment: the alert's anchor is appended"
    return None


def _with_runbook_base(group: dict[str, Any], path: Path, base: str) -> dict[str, Any]:
    group = copy.deepcopy(group)
    for rule in group["rules"]:
        if "alert" not in rule:
            continue
        annotations = rule.get("annotations") or {}
        expected = runbook_url(rule["alert"])
        if annotations.get("runbook_url") != expected:
            raise ValueError(f"{path.name}: {rule['alert']}: runbook_url is not {expected}")
        annotations["runbook_url"] = runbook_url(rule["alert"], base)
    return group


def groups(
    rules_dir: Path = RULES_DIR, runbook_base_url: str = RUNBOOK_BASE_URL
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    for path in rule_files(rules_dir):
        document = load_file(path)
        if not isinstance(document, dict) or set(document) != {"groups"}:
            raise ValueError(f"{path}: expected a mapping with only 'groups'")
        for group in document["groups"]:
            name = group["name"]
            if name in seen:
                raise ValueError(f"group {name!r} is in {seen[name].name} and {path.name}")
            seen[name] = path
            out.append(_with_runbook_base(group, path, runbook_base_url))
    return out


def manifest(
    rules_dir: Path = RULES_DIR, runbook_base_url: str = RUNBOOK_BASE_URL
) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "nodesync",
            "namespace": "nodesync",
            "labels": {"app.kubernetes.io/name": "nodesync"},
            "annotations": {
                "nodesync.io/generated-by": f"{GENERATOR} from rules/*.yml: do not edit",
            },
        },
        "spec": {"groups": groups(rules_dir, runbook_base_url)},
    }


def render(rules_dir: Path = RULES_DIR, runbook_base_url: str = RUNBOOK_BASE_URL) -> str:
    document = manifest(rules_dir, runbook_base_url)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=GENERATOR, description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument(
        "--check", action="store_true", help="only check that the manifest is up to date"
    )
    parser.add_argument(
        "--runbook-base-url",
        default=RUNBOOK_BASE_URL,
        metavar="URL",
        help="where docs/runbooks.md is published; each alert's runbook_url is "
        "URL#<alert name in lower case> (default: %(default)s)",
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        help=f"write the manifest here, '-' for standard output (default: {MANIFEST_PATH})",
    )
    args = parser.parse_args(argv)
    problem = check_runbook_base_url(args.runbook_base_url)
    if problem:
        print(
            f"{GENERATOR}: --runbook-base-url {args.runbook_base_url!r}: {problem}", file=sys.stderr
        )
        return 2
    text = render(runbook_base_url=args.runbook_base_url)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    target = Path(args.output) if args.output else MANIFEST
    current = target.read_text(encoding="utf-8") if target.exists() else None
    shown = target.relative_to(ROOT) if target.is_relative_to(ROOT) else target
    if args.check:
        if current != text:
            print(f"{shown} is not what rules/*.yml give: run {GENERATOR}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        target.write_text(text, encoding="utf-8")
        print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
