"""The PrometheusRule in deploy/components/monitoring, generated from rules/*.yml.

``scripts/gen-prometheusrule`` runs this module: it writes the manifest, or with ``--check``
only says whether the file on disk is what the rule files give. The manifest is JSON (which is
YAML, and kustomize reads it); every group of every rule file goes in, in file order, with
every value as the string the rule file has (Prometheus reads them as strings too).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from exporter.yamlfile import load_file

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "rules"
MANIFEST = ROOT / "deploy" / "components" / "monitoring" / "prometheusrule.json"
GENERATOR = "scripts/gen-prometheusrule"


def rule_files(rules_dir: Path = RULES_DIR) -> list[Path]:
    return sorted(rules_dir.glob("*.yml"))


def groups(rules_dir: Path = RULES_DIR) -> list[dict[str, Any]]:
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
            out.append(group)
    return out


def manifest(rules_dir: Path = RULES_DIR) -> dict[str, Any]:
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
        "spec": {"groups": groups(rules_dir)},
    }


def render(rules_dir: Path = RULES_DIR) -> str:
    return json.dumps(manifest(rules_dir), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=GENERATOR, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only check that the manifest is up to date"
    )
    args = parser.parse_args(argv)
    text = render()
    current = MANIFEST.read_text(encoding="utf-8") if MANIFEST.exists() else None
    relative = MANIFEST.relative_to(ROOT)
    if args.check:
        if current != text:
            print(f"{relative} is not what rules/*.yml give: run {GENERATOR}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        MANIFEST.write_text(text, encoding="utf-8")
        print(f"wrote {relative}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
