"""docs/rbac.md lists exactly the permissions the manifests grant, role by role."""

from __future__ import annotations

import re

import pytest

from nodesync_sim.fake.apiserver.rbac import Permission
from tests.rbac.harness import AGENT, CONTROLLER, PROMETHEUS, shipped_rbac
from tests.support.docs import RBAC_DOC, section

Grant = tuple[str, str, tuple[str, ...], str, str]  # group, resource, names, verb, scope


def documented(heading: str) -> set[Grant]:
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section(RBAC_DOC.read_text(encoding="utf-8"), heading).splitlines()
        if line.startswith("| ") and not line.startswith("| API group")
    ]
    grants: set[Grant] = set()
    for group, resource, verbs, scope, _why in rows:
        names = re.findall(r"`([^`]+)`", resource)
        scope_names = re.findall(r"`([^`]+)`", scope)
        for verb in re.findall(r"`([^`]+)`", verbs):
            grants.add(
                (
                    "" if group == "core" else group.strip("`"),
                    names[0],
                    tuple(names[1:]),
                    verb,
                    scope_names[0] if scope.startswith("namespace") else "cluster",
                )
            )
    return grants


def granted(user: str) -> set[Grant]:
    def scope(p: Permission) -> str:
        return p.role.namespace or "cluster"

    return {
        (p.group, p.resource, p.resource_names, p.verb, scope(p))
        for p in shipped_rbac().permissions(user)
    }


@pytest.mark.parametrize(
    ("heading", "user"),
    [("The agent", AGENT), ("The controller", CONTROLLER), ("Prometheus", PROMETHEUS)],
)
def test_the_tables_are_the_shipped_permissions(heading: str, user: str) -> None:
    assert documented(heading) == granted(user)
