"""Creates and updates NodeRollbacks (their JSON: exporter.kube.noderollback_codec).

Every write carries the resourceVersion of the object it is made from: of two writers, exactly
one succeeds, the other gets 409 Conflict and must read again. A status change is made from the
object the caller holds (one PUT, no read before it) and the object is read again only on 409.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TypeVar

from exporter.kube.api import KubeAPI
from exporter.kube.convert import ConversionError
from exporter.kube.errors import Conflict, InvalidResponse, NotFound
from exporter.kube.noderollback_codec import (
    NODEROLLBACKS,
    JSONObject,
    node_rollback,
    object_json,
    spec_json,
    status_json,
)
from exporter.kube.ratelimit import AsyncRateLimiter
from exporter.model.rollback import NodeRollback, RollbackSpec, RollbackStatus

__all__ = [
    "CONFLICT_ATTEMPTS",
    "NODEROLLBACKS",
    "RollbackWrites",
    "node_rollback",
    "object_json",
    "spec_json",
    "status_json",
]

#: How often a write that lost a race (409) reads again and retries before giving up.
CONFLICT_ATTEMPTS = 5

P = TypeVar("P", RollbackSpec, RollbackStatus)


class RollbackWrites:
    """Creates and updates NodeRollbacks. Every write takes a token of the shared rate limiter
    (the same bucket as every other write) and carries the resourceVersion it read: of two
    writers, exactly one succeeds, the other gets Conflict and must read again."""

    def __init__(self, api: KubeAPI, *, limiter: AsyncRateLimiter | None = None) -> None:
        self._api = api
        self._limiter = limiter

    async def _write(self, method: str, verb: str, path: str, body: JSONObject) -> NodeRollback:
        if self._limiter is not None:
            await self._limiter.acquire()
        answer = await self._api.request(method, NODEROLLBACKS, verb, path, body=body)
        try:
            return node_rollback(answer)
        except ConversionError as exc:
            raise InvalidResponse(200, "InvalidResponse", str(exc)) from exc

    async def get(self, name: str) -> NodeRollback | None:
        try:
            raw = await self._api.get(NODEROLLBACKS, name)
        except NotFound:
            return None
        try:
            return node_rollback(raw)
        except ConversionError as exc:
            raise InvalidResponse(200, "InvalidResponse", str(exc)) from exc

    async def create(self, rollback: NodeRollback) -> NodeRollback:
        """Create the object, then write its first status (a create ignores ``status``).
        AlreadyExists (another writer made the same decision) is raised."""
        body = object_json(rollback)
        del body["status"]
        for server_set in ("resourceVersion", "uid"):  # a create refuses them (500)
            body["metadata"].pop(server_set, None)
        created = await self._write("POST", "create", NODEROLLBACKS.path(), body)
        return await self.update_status(created, rollback.status)

    async def update_status(self, current: NodeRollback, status: RollbackStatus) -> NodeRollback:
        """Replace the status of ``current`` (at its resourceVersion); Conflict when the object
        changed since it was read, NotFound when it was deleted."""
        body = object_json(current)
        body["status"] = status_json(status)
        path = NODEROLLBACKS.path(None, current.name) + "/status"
        return await self._write("PUT", "update", path, body)

    async def update_spec(self, current: NodeRollback, spec: RollbackSpec) -> NodeRollback:
        """Replace the spec of ``current`` (at its resourceVersion), e.g. an escalation."""
        body = object_json(dataclasses.replace(current, spec=spec))
        del body["status"]
        return await self._write("PUT", "update", NODEROLLBACKS.path(None, current.name), body)

    async def change_status(
        self,
        held: NodeRollback | str,
        change: Callable[[NodeRollback], RollbackStatus | None],
    ) -> NodeRollback | None:
        """Apply ``change`` to the object (None: nothing to write) and write the result at the
        object's resourceVersion. ``held``: the object as the caller holds it, written from
        with no read first; or its name, read first. On Conflict (it changed since) read it
        again and apply ``change`` to the fresh object; a change that finds nothing to do on a
        held object is decided again on a fresh read. Returns the object as written (or as
        read), None when it does not exist."""
        return await self._change(held, change, lambda r: r.status, self.update_status)

    async def change_spec(
        self,
        held: NodeRollback | str,
        change: Callable[[NodeRollback], RollbackSpec | None],
    ) -> NodeRollback | None:
        """As :meth:`change_status`, for the spec."""
        return await self._change(held, change, lambda r: r.spec, self.update_spec)

    async def _change(
        self,
        held: NodeRollback | str,
        change: Callable[[NodeRollback], P | None],
        part: Callable[[NodeRollback], P],
        update: Callable[[NodeRollback, P], Awaitable[NodeRollback]],
    ) -> NodeRollback | None:
        name = held if isinstance(held, str) else held.name
        current: NodeRollback | None = None if isinstance(held, str) else held
        for _ in range(CONFLICT_ATTEMPTS):
            fresh = current is None
            if current is None:
                current = await self.get(name)
                if current is None:
                    return None
            new = change(current)
            if new is None or new == part(current):
                if fresh:
                    return current
                current = None  # held, perhaps stale: decide again on what the server has
                continue
            try:
                return await update(current, new)
            except Conflict:
                current = None
        raise Conflict(409, "Conflict", f"noderollback {name} kept changing")

    async def delete(self, current: NodeRollback) -> bool:
        """Delete ``current`` if it is still that object (uid precondition); False when gone."""
        if self._limiter is not None:
            await self._limiter.acquire()
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": current.uid, "resourceVersion": current.resource_version},
        }
        try:
            await self._api.request(
                "DELETE",
                NODEROLLBACKS,
                "delete",
                NODEROLLBACKS.path(None, current.name),
                body=options,
            )
        except NotFound:
            return False
        return True
