"""Kubernetes object names, checked before they are used (pure).

Label values of an alert become API names: a node's (``node``), a pod's (``namespace`` and
``pod``). Only names the API server could hold are used: anything else (``..``, ``a/status``,
16,000 characters) is refused before it reaches a request path, and shown cut to a bounded
length wherever it is reported.
"""

from __future__ import annotations

import re
from typing import Final

#: A DNS-1123 label: namespaces (and each dot-separated part of a subdomain).
MAX_LABEL_LENGTH: Final = 63
#: A DNS-1123 subdomain: nodes, pods, and most other objects.
MAX_SUBDOMAIN_LENGTH: Final = 253

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL, re.ASCII)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*", re.ASCII)

#: How much of an untrusted value a log line, an Event or a refusal shows.
MAX_SHOWN: Final = 80


def is_dns1123_label(name: str) -> bool:
    """A namespace's name: lower-case letters, digits and ``-``, at most 63 characters."""
    return len(name) <= MAX_LABEL_LENGTH and _LABEL_RE.fullmatch(name) is not None


def is_dns1123_subdomain(name: str) -> bool:
    """A node's or a pod's name: DNS-1123 labels joined by dots, at most 253 characters."""
    return len(name) <= MAX_SUBDOMAIN_LENGTH and _SUBDOMAIN_RE.fullmatch(name) is not None


def shown(value: str, limit: int = MAX_SHOWN) -> str:
    """``value`` cut to at most ``limit`` characters (``...`` marks a cut)."""
    return value if len(value) <= limit else value[: limit - 3] + "..."
