"""One handle on either API server the contract suites of the API boundary run against: the test
API server (nodesync_sim.fake.apiserver, in the test's event loop, a new one per test) or a real
kube-apiserver 1.20 with etcd (tests/support/kubeapi.py, one per session).

A contract test is written once against :class:`Cluster` and runs on both (the ``cluster``
fixture of tests/kube/conftest.py is parametrized over :data:`SERVERS`):

- ``cluster.client(identity)`` is the product's client (exporter.kube.api.KubeAPI) as one of the
  real server's identities (admin, the controller's or the agent's service account); the test
  server lets every token do everything.
- ``create``, ``get``, ``patch``, ``delete`` are the test's own writes, by API path, as admin:
  on the test server straight into its store (so they may run inside a client's call, in the
  same loop), on the real one over HTTP. What a test creates on the shared real server is
  deleted after it, and the names it needs come from :meth:`Cluster.unique`.
- ``requests(...)`` are the product's requests the server answered (verb and status per object),
  from the test server's audit log or the real server's; ``expect_requests`` waits until they
  are what the test expects (the real audit log is written a moment after the answer).

A scenario only one server can show is restricted to it with
``@pytest.mark.parametrize("cluster", [FAKE], indirect=True)`` and a comment saying why
(``cluster.fake`` is then the test server, with its fault injection).
"""

from __future__ import annotations

import asyncio
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import psutil
import pytest

from exporter.kube.api import JSONObject, KubeAPI
from exporter.kube.config import kubeconfig_configuration
from exporter.kube.observer import RequestObserver
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.patch import MERGE_PATCH
from nodesync_sim.fake.apiserver.requestinfo import parse
from nodesync_sim.fake.apiserver.resources import by_plural
from nodesync_sim.real.kube_apiserver import ADMIN, LocalKubeAPIServer
from tests.support.kubeapi import KubeCleanup, create_namespace, delete_namespace
from tests.support.realkube import PRODUCT_USER_AGENT, code, is_product, query
from tests.support.wait import until_async

FAKE = "fake"
REAL = "real"
#: The servers every contract test runs against, as ``cluster`` fixture parameters.
SERVERS = [FAKE, pytest.param(REAL, marks=pytest.mark.kubeapi)]

#: Group/version of each resource a real kube-apiserver 1.20 serves (the test server serves the
#: ones of nodesync_sim.fake.apiserver.resources, newer for PodDisruptionBudgets).
_REAL_GROUP_VERSIONS = {
    "namespaces": "v1",
    "nodes": "v1",
    "pods": "v1",
    "events": "v1",
    "leases": "coordination.k8s.io/v1",
    "poddisruptionbudgets": "policy/v1beta1",
    "noderollbacks": "nodesync.io/v1alpha1",
}


@dataclass(frozen=True, slots=True)
class Request:
    """One request of the product's client, as the server recorded it."""

    verb: str
    code: int
    query: dict[str, str]


@dataclass(frozen=True, slots=True)
class Answered:
    """A request of the product's client and what :meth:`Cluster.requests` selects it by."""

    request: Request
    verb: str
    resource: str | None
    subresource: str | None
    name: str | None
    namespace: str | None


class Cluster(ABC):
    """An API server, seen from a test of the product's client (see the module's docstring)."""

    kind: str
    #: A namespace of the test's own, deleted with what it holds after the test.
    namespace: str

    @property
    def fake(self) -> APIServer:
        """The test API server (for what only it can do: faults, compaction, restarts)."""
        raise AssertionError(f"the {self.kind} server has no fault injection")

    @property
    @abstractmethod
    def port(self) -> int:
        """The server's port on 127.0.0.1."""

    def connections(self) -> list[str]:
        """The states of this process's TCP connections to the server that still have a
        socket (none once every client is closed and its requests are done)."""
        return [
            c.status
            for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == self.port
        ]

    @abstractmethod
    async def configuration(self, identity: str = ADMIN) -> Any:
        """A kubernetes.aio configuration as ``identity``."""

    async def client(
        self, identity: str = ADMIN, *, observer: RequestObserver | None = None
    ) -> KubeAPI:
        """The product's client as ``identity`` (enter it with ``async with``)."""
        return KubeAPI(await self.configuration(identity), observer=observer)

    @abstractmethod
    def group_version(self, resource: str) -> str:
        """ "v1", "policy/v1beta1": where the server serves ``resource``."""

    def path(self, resource: str, name: str = "", namespace: str = "") -> str:
        """The API path of a collection (no name) or of one object."""
        gv = self.group_version(resource)
        base = f"/api/{gv}" if "/" not in gv else f"/apis/{gv}"
        if namespace:
            base += f"/namespaces/{namespace}"
        return f"{base}/{resource}/{name}" if name else f"{base}/{resource}"

    def unique(self, prefix: str) -> str:
        """A name no other test uses (the real server is shared by the session)."""
        return f"{prefix}-{secrets.token_hex(4)}"

    @abstractmethod
    async def expire_history(self) -> None:
        """Forget every version before now: a watch or list from an older one gets 410 Expired.
        (The real server's etcd is compacted and the server restarted: ``own_cluster`` only.)"""

    # -------------------------------------------------------------- the test's own requests

    @abstractmethod
    def create(self, collection: str, obj: JSONObject) -> JSONObject:
        """Create ``obj`` in ``collection`` (a path) as admin, status included."""

    @abstractmethod
    def try_get(self, path: str) -> JSONObject | None:
        """The object at ``path``; None when there is none."""

    def get(self, path: str) -> JSONObject:
        found = self.try_get(path)
        assert found is not None, f"{path} not found"
        return found

    @abstractmethod
    def patch(self, path: str, patch: JSONObject) -> JSONObject:
        """A JSON merge patch as admin (a path ending in /status patches the status)."""

    @abstractmethod
    def delete(self, path: str, *, grace_period_seconds: int | None = 0) -> None:
        """Delete the object at ``path`` as admin (at once, unless a grace period is given)."""

    # -------------------------------------------------------------- what the product asked

    def requests(
        self,
        *,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = "",
        name: str | None = None,
        namespace: str | None = None,
    ) -> list[Request]:
        """The product's requests the server answered that match every criterion given, in
        order (``subresource=None``: any, the default "": none)."""
        wanted = {
            "verb": verb,
            "resource": resource,
            "subresource": subresource,
            "name": name,
            "namespace": namespace,
        }
        return [
            answered.request
            for answered in self._answered()
            if all(want is None or getattr(answered, f) == want for f, want in wanted.items())
        ]

    @abstractmethod
    def _answered(self) -> Iterator[Answered]:
        """Every request of the product the server answered, in order."""

    async def expect(self, what: Callable[[], Any], expected: Any, within: float = 10.0) -> None:
        """Wait until ``what()`` equals ``expected`` (the real server writes its audit log a
        moment after it answered); fail with the last value after ``within`` seconds."""
        await until_async(
            what,
            timeout=within,
            what=f"{expected!r} in the {self.kind} server's audit log",
            accept=lambda got: got == expected,
        )


class FakeCluster(Cluster):
    kind = FAKE

    def __init__(self, server: APIServer, namespace: str) -> None:
        self.server = server
        self.namespace = namespace
        server.store.create("namespaces", {"metadata": {"name": namespace}})

    @property
    def fake(self) -> APIServer:
        return self.server

    @property
    def port(self) -> int:
        return self.server.port

    async def configuration(self, identity: str = ADMIN) -> Any:
        return self.server.aio_configuration()

    async def expire_history(self) -> None:
        self.server.compact()
        self.server.drop_watches()

    def group_version(self, resource: str) -> str:
        rt = by_plural(resource)
        return f"{rt.group}/{rt.version}" if rt.group else rt.version

    def _where(self, path: str) -> tuple[str, str, str, str]:
        info = parse("GET", path, {})
        assert info.is_resource_request, path
        return info.resource, info.name, info.namespace, info.subresource

    def create(self, collection: str, obj: JSONObject) -> JSONObject:
        resource, _, namespace, _ = self._where(collection)
        return self.server.store.create(resource, obj, namespace=namespace)

    def try_get(self, path: str) -> JSONObject | None:
        path, _, query = path.partition("?")
        resource, name, namespace, _ = self._where(path)
        if name:
            return self.server.store.try_get(resource, name, namespace=namespace)
        selectors = dict(parse_qsl(query))
        items = self.server.store.list(
            resource,
            namespace=namespace,
            label_selector=selectors.get("labelSelector", ""),
            field_selector=selectors.get("fieldSelector", ""),
        )
        return {"items": items}

    def patch(self, path: str, patch: JSONObject) -> JSONObject:
        resource, name, namespace, subresource = self._where(path)
        return self.server.store.patch(
            resource,
            name,
            patch,
            namespace=namespace,
            patch_type=MERGE_PATCH,
            subresource=subresource,
        )

    def delete(self, path: str, *, grace_period_seconds: int | None = 0) -> None:
        resource, name, namespace, _ = self._where(path)
        self.server.store.delete(
            resource, name, namespace=namespace, grace_period_seconds=grace_period_seconds
        )

    def _answered(self) -> Iterator[Answered]:
        for r in self.server.audit.records():
            if r.user_agent.startswith(PRODUCT_USER_AGENT):
                request = Request(r.verb, r.code, r.query)
                yield Answered(request, r.verb, r.resource, r.subresource, r.name, r.namespace)


class RealCluster(Cluster):
    kind = REAL

    def __init__(self, server: LocalKubeAPIServer) -> None:
        self.server = server
        self.cleanup = KubeCleanup(server)
        self.namespace = create_namespace(server)
        self.namespaces = [self.namespace]

    @property
    def port(self) -> int:
        return self.server.port

    def close(self) -> None:
        try:
            self.cleanup.run()
        finally:
            for namespace in self.namespaces:
                delete_namespace(self.server, namespace)

    async def configuration(self, identity: str = ADMIN) -> Any:
        return await kubeconfig_configuration(str(self.server.kubeconfig(identity)))

    async def expire_history(self) -> None:
        await asyncio.to_thread(self.server.expire_history)

    def group_version(self, resource: str) -> str:
        return _REAL_GROUP_VERSIONS[resource]

    def create(self, collection: str, obj: JSONObject) -> JSONObject:
        status = obj.get("status")
        created: JSONObject = self.server.ok("POST", collection, obj)
        path = f"{collection}/{created['metadata']['name']}"
        if collection.endswith("/namespaces"):
            self.namespaces.append(created["metadata"]["name"])
        elif parse("GET", collection, {}).namespace != self.namespace:
            self.cleanup.delete_later(path)  # the namespace's objects go with it
        if status:  # a create through the API resets the status: written as a kubelet would
            created = self.patch(f"{path}/status", {"status": status})
        return created

    def try_get(self, path: str) -> JSONObject | None:
        answer = self.server.request("GET", path)
        if answer.status == 404:
            return None
        assert answer.status == 200, (path, answer.status, answer.body)
        found: JSONObject = answer.body
        return found

    def patch(self, path: str, patch: JSONObject) -> JSONObject:
        patched: JSONObject = self.server.ok("PATCH", path, patch, content_type=MERGE_PATCH)
        return patched

    def delete(self, path: str, *, grace_period_seconds: int | None = 0) -> None:
        grace = grace_period_seconds
        options = {} if grace is None else {"gracePeriodSeconds": grace}
        self.server.ok("DELETE", path, options)
        if grace_period_seconds == 0:
            self.server.wait_gone(path)

    def _answered(self) -> Iterator[Answered]:
        for event in self.server.audit_events():
            if event.get("stage") != "ResponseComplete" or not is_product(event):
                continue
            ref = event.get("objectRef") or {}
            yield Answered(
                Request(event["verb"], code(event), query(event)),
                event["verb"],
                ref.get("resource"),
                ref.get("subresource", ""),
                ref.get("name", ""),
                ref.get("namespace", ""),
            )
