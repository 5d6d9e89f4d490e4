"""The install, upgrade, uninstall and RBAC docs, the README and the manifests' comments point
at files and headings that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.deploy.manifests import DEPLOY, ROOT
from tests.support.docs import markdown_anchors

DOCS = [
    ROOT / "README.md",
    *(ROOT / "docs" / f"{n}.md" for n in ("install", "upgrade", "uninstall", "rbac", "comparison")),
    ROOT / "CHANGELOG.md",
    ROOT / "docs" / "rules.md",
]
MANIFESTS = sorted(p for p in DEPLOY.rglob("*.yaml") if "alertmanager" not in p.parts)


def _check(target: str, base: Path) -> str | None:
    """What is wrong with a link target relative to ``base`` (None: nothing)."""
    if re.match(r"^[a-z]+://", target):
        return None
    path, _, anchor = target.partition("#")
    file = (base / path).resolve() if path else None
    if file is not None and not file.exists():
        return f"{target}: no such file"
    if anchor and (file is None or file.suffix == ".md"):
        text = (file or base).read_text(encoding="utf-8") if file else ""
        if anchor not in markdown_anchors(text):
            return f"{target}: no heading #{anchor}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_markdown_links_resolve(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith("#"):
            if target[1:] not in markdown_anchors(text):
                problems.append(f"{target}: no heading here")
            continue
        found = _check(target, doc.parent)
        if found:
            problems.append(found)
    assert problems == []


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_manifest_comments_point_at_existing_docs(manifest: Path) -> None:
    problems = []
    for target in re.findall(
        r"\b((?:docs|deploy|rules)/[\w./-]*[\w/](?:#[\w-]+)?)", manifest.read_text(encoding="utf-8")
    ):
        if "*" in target:
            continue
        found = _check(target, ROOT)
        if found:
            problems.append(found)
    assert problems == []
