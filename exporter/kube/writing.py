"""What every writer of nodesync shares: the API, the shared write budget, the dry-run switch,
and the result of a write.

Each write request takes a token of the shared :class:`AsyncRateLimiter` first (retries
included; reads take none). With ``dry_run`` nothing is written at all: the live state is still
read and the result says what would have happened (``dry_run=True``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.kube.api import KubeAPI
from exporter.kube.ratelimit import AsyncRateLimiter
from exporter.kube.resources import Resource

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class WriteResult:
    """``changed``: the write was made (or, in a dry run, would be). False when the object was
    already so, or is gone. ``detail`` says which, for logs and audit."""

    changed: bool
    detail: str
    dry_run: bool = False


class Channel:
    """The API as writers use it: each write takes a token of the budget first."""

    def __init__(
        self, api: KubeAPI, *, limiter: AsyncRateLimiter | None = None, dry_run: bool = False
    ) -> None:
        self.api = api
        self.limiter = limiter
        self.dry_run = dry_run

    async def write(
        self,
        method: str,
        resource: Resource,
        verb: str,
        path: str,
        *,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        if self.limiter is not None:
            await self.limiter.acquire()
        return await self.api.request(
            method, resource, verb, path, body=body, content_type=content_type
        )

    def would(self, detail: str) -> WriteResult:
        return WriteResult(True, f"dry run: would {detail}", dry_run=True)
