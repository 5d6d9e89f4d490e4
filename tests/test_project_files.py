"""The license, the changelog and the comparison page are there and say what pyproject says."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: SHA-256 of the Apache License 2.0 as https://www.apache.org/licenses/LICENSE-2.0.txt has it.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    assert isinstance(project, dict)
    return project


def test_the_license_file_is_the_full_apache_2_0_text() -> None:
    assert _pyproject()["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256
    assert b"END OF TERMS AND CONDITIONS" in text


def test_the_changelog_has_an_unreleased_section_in_keep_a_changelog_form() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert releases[0] == "Unreleased"
    unreleased = text.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]
    kinds = re.findall(r"^### (\w+)", unreleased, re.M)
    assert kinds, "the Unreleased section lists no changes"
    assert set(kinds) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    urls = _pyproject()["urls"]
    assert isinstance(urls, dict)
    assert urls["Changelog"].endswith("/CHANGELOG.md")


def test_the_readme_links_the_license_the_changelog_and_the_comparison() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in ("LICENSE", "CHANGELOG.md", "docs/comparison.md"):
        assert f"]({target})" in readme, target
    comparison = (ROOT / "docs" / "comparison.md").read_text(encoding="utf-8")
    for name in (
        "--max-node-provision-time",
        "Karpenter",
        "NodeHealthCheck",
        "node-problem-detector",
        "KubeNodeNotReady",
    ):
        assert name in comparison, name
