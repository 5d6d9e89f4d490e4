"""Kubernetes names as the API server validates them: what an alert's label must be before it
is used as a node's, a namespace's or a pod's name."""

from __future__ import annotations

import pytest

from exporter.model.names import MAX_SHOWN, is_dns1123_label, is_dns1123_subdomain, shown

VALID_SUBDOMAINS = ["a", "worker-1", "ip-10-0-0-1.ec2.internal", "0", "a" * 64 + "." + "b" * 63,
                    ".".join(["a" * 63] * 3) + "." + "b" * 61]  # fmt: skip
INVALID_NAMES = ["", ".", "..", "../x", "a/status", "old-0/status", "a%2Fb", "Worker-1", "-a",
                 "a-", "a..b", ".a", "a.", "a_b", "a b", "ä", "a\x00", "a\n", "a" * 254,
                 "٣"]  # fmt: skip


@pytest.mark.parametrize("name", VALID_SUBDOMAINS)
def test_valid_subdomains(name: str) -> None:
    # as the API server's IsDNS1123Subdomain: 253 characters in all, no limit per part
    assert len(name) <= 253
    assert is_dns1123_subdomain(name)


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_subdomains(name: str) -> None:
    assert not is_dns1123_subdomain(name)
    assert not is_dns1123_label(name)


@pytest.mark.parametrize(
    ("name", "valid"),
    [("kube-system", True), ("a" * 63, True), ("a" * 64, False), ("a.b", False), ("ns1", True)],
)
def test_labels(name: str, valid: bool) -> None:
    assert is_dns1123_label(name) is valid


def test_shown_cuts_long_values() -> None:
    assert shown("short") == "short"
    cut = shown("x" * 16_000)
    assert len(cut) == MAX_SHOWN
    assert cut.endswith("...")
    assert shown("x" * 300, 200) == "x" * 197 + "..."
