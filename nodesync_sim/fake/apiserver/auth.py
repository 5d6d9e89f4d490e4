"""Bearer-token authentication and an authorization hook.

`TokenAuthenticator` maps tokens to user names (a static token file, in effect). Requests to the
Kubernetes paths without a known token get 401. `Authorizer` is the hook a later RBAC model plugs
into: it answers whether a user may do a verb on a resource; "no" is a 403 Forbidden Status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Authorizer(Protocol):
    def __call__(
        self,
        user: str,
        verb: str,
        resource: str,
        subresource: str,
        namespace: str,
        name: str,
    ) -> bool: ...


def allow_all(
    user: str, verb: str, resource: str, subresource: str, namespace: str, name: str
) -> bool:
    return True


class TokenAuthenticator:
    """Token -> user table; mutable at runtime (tests may add or revoke tokens)."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self.tokens: dict[str, str] = dict(tokens)

    def authenticate(self, header: str | None) -> str | None:
        """The user for an Authorization header value, or None."""
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.tokens.get(token.strip())
