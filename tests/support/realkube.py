"""Helpers for tests of the product's API side against the real kube-apiserver (the fixtures of
tests/support/kubeapi.py): a KubeAPI as one of the server's identities, the shipped RBAC applied
by admin, polling for a condition with a deadline, and the audit log's requests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psutil
import yaml

from exporter.kube.api import KubeAPI
from exporter.kube.config import kubeconfig_configuration
from exporter.kube.observer import RequestObserver
from exporter.model.rfc3339 import parse_time
from nodesync_sim.real.kube_apiserver import ADMIN, LocalKubeAPIServer
from tests.support.kubeapi import KubeCleanup
from tests.support.wait import until_async

REPO_ROOT = Path(__file__).resolve().parents[2]
AGENT_RBAC = REPO_ROOT / "deploy" / "base" / "agent-rbac.yaml"
CONTROLLER_RBAC = REPO_ROOT / "deploy" / "base" / "controller-rbac.yaml"
LEADER_ELECTION_RBAC = REPO_ROOT / "deploy" / "overlays" / "ha" / "leader-election-rbac.yaml"
DELETE_NODES_RBAC = REPO_ROOT / "deploy" / "components" / "delete-nodes" / "rbac.yaml"
MERGE_PATCH = "application/merge-patch+json"
#: The User-Agent of kubernetes.aio, the product's client (the tests' own requests are urllib's).
PRODUCT_USER_AGENT = "nodesync/"  # exporter.kube.api sends nodesync/<version>

_RBAC = "/apis/rbac.authorization.k8s.io/v1"
_RBAC_KINDS = {
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
}


async def connect(
    server: LocalKubeAPIServer, identity: str = ADMIN, *, observer: RequestObserver | None = None
) -> KubeAPI:
    """The product's client, configured from the server's kubeconfig of ``identity``."""
    configuration = await kubeconfig_configuration(str(server.kubeconfig(identity)))
    return KubeAPI(configuration, observer=observer)


def user_of(server: LocalKubeAPIServer, identity: str) -> str:
    """The user name ``identity`` authenticates as (system:serviceaccount:... for the accounts)."""
    return server.identities[identity].user


def apply_rbac(
    server: LocalKubeAPIServer, manifest: Path, cleanup: KubeCleanup | None = None
) -> None:
    """Create the RBAC objects of a shipped manifest as admin (deleted later by ``cleanup``).

    ServiceAccounts are left out: the server authenticates the accounts by their tokens (its
    token file), so their objects change nothing. A Role's namespace must exist."""
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc or doc["kind"] not in _RBAC_KINDS:
            continue
        plural = _RBAC_KINDS[doc["kind"]]
        namespace = doc["metadata"].get("namespace")
        collection = (
            f"{_RBAC}/namespaces/{namespace}/{plural}" if namespace else f"{_RBAC}/{plural}"
        )
        if cleanup is not None:
            cleanup.create(collection, doc)
        else:
            server.ok("POST", collection, doc)


@contextlib.contextmanager
def rbac_applied(
    server: LocalKubeAPIServer, identity: str, manifests: Sequence[Path], probes: Sequence[str]
) -> Iterator[None]:
    """The RBAC objects of ``manifests``, created by admin on a shared server until the end of
    the block; ``identity`` may GET every path of ``probes`` inside it, and is refused the
    first one again afterwards (as the other tests of the shared server expect to find it)."""
    cleanup = KubeCleanup(server)
    try:
        for manifest in manifests:
            apply_rbac(server, manifest, cleanup)
        for path in probes:
            wait_allowed(server, identity, path)
        yield
    finally:
        cleanup.run()
        wait_allowed(server, identity, probes[0], allowed=False)


def wait_allowed(
    server: LocalKubeAPIServer, identity: str, path: str, allowed: bool = True
) -> None:
    """Wait until GET ``path`` as ``identity`` is allowed (or refused with 403): RBAC objects take
    effect when the authorizer's caches have them, a moment after they were written."""

    def settled() -> bool:
        status = server.request("GET", path, identity=identity).status
        return status != 403 if allowed else status == 403

    what = "allowed" if allowed else "refused"
    server.wait_for(settled, f"GET {path} as {identity} to be {what}")


async def eventually(
    predicate: Callable[[], Any], what: str, within: float = 10.0, *, poll: float = 0.01
) -> float:
    """:func:`tests.support.wait.until_async` with the seconds it took, for the contract tests
    that read it."""
    started = time.monotonic()
    await until_async(predicate, timeout=within, what=what, interval=poll)
    return time.monotonic() - started


def query(event: dict[str, Any]) -> dict[str, str]:
    """An audit event's query parameters (the last value of each)."""
    return {k: v[-1] for k, v in parse_qs(urlsplit(event["requestURI"]).query).items()}


def requests(
    server: LocalKubeAPIServer,
    *,
    user: str | None = None,
    verb: str | None = None,
    resource: str | None = None,
    subresource: str | None = None,
    name: str | None = None,
    namespace: str | None = None,
    uri_contains: str | None = None,
    product: bool | None = None,
    stage: str | None = "ResponseComplete",
) -> list[dict[str, Any]]:
    """The audit log's requests that match every criterion given. ``product``: only the
    product's (its client's User-Agent), or only the test's own (urllib's). ``stage``: by
    default the completed ones (a watch still running has only ResponseStarted)."""

    def matches(event: dict[str, Any]) -> bool:
        ref = event.get("objectRef") or {}
        checks: Iterable[tuple[Any, Any]] = (
            # A request refused before authentication (a bad token) names no user.
            (user, event["user"].get("username")),
            (verb, event["verb"]),
            (resource, ref.get("resource")),
            (subresource, ref.get("subresource")),
            (name, ref.get("name")),
            (namespace, ref.get("namespace")),
        )
        if stage is not None and event.get("stage") != stage:
            return False
        if uri_contains is not None and uri_contains not in event["requestURI"]:
            return False
        if product is not None and is_product(event) != product:
            return False
        return all(want is None or want == got for want, got in checks)

    return [event for event in server.audit_events() if matches(event)]


def is_product(event: dict[str, Any]) -> bool:
    """Whether the product's client (exporter.kube.api) sent the request."""
    return str(event.get("userAgent", "")).startswith(PRODUCT_USER_AGENT)


async def audit_event(
    server: LocalKubeAPIServer, predicate: Callable[[dict[str, Any]], bool], within: float = 10.0
) -> dict[str, Any]:
    """The first audit event matching ``predicate``, polled without blocking the event loop."""
    found: list[dict[str, Any]] = []

    def find() -> bool:
        found[:] = [event for event in server.audit_events() if predicate(event)][:1]
        return bool(found)

    await until_async(find, timeout=within, what="a matching audit event", interval=0.1)
    return found[0]


def received(event: dict[str, Any]) -> float:
    """When the server received the request an audit event records (Unix time)."""
    text = str(event["requestReceivedTimestamp"])
    parsed = parse_time(text)
    assert parsed is not None, text
    return parsed


def code(event: dict[str, Any]) -> int:
    """The HTTP status an audit event records."""
    return int(event["responseStatus"]["code"])


def connections_to(server: LocalKubeAPIServer) -> list[str]:
    """The states of this process's TCP connections to the server that still have a socket."""
    return [
        c.status
        for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.raddr.port == server.port
    ]


async def all_closed(server: LocalKubeAPIServer) -> None:
    """Wait until this process has no connection to the server left, after its clients were
    closed: a request cancelled in flight is closed by aiohttp gracefully, in the background,
    and must be done before the test's event loop ends (else: unclosed transport)."""
    await until_async(
        lambda: connections_to(server) == [], timeout=10.0, what="the connections to close"
    )


class FailureCounter:
    """A RequestObserver that counts failed requests per resource (and leader-election
    errors), so a test can wait until a watch has failed several times, not for a time."""

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.leader_election_errors = 0

    def failed(self, resource: str) -> int:
        return self.failures.get(resource, 0)

    def observe_request(self, resource: str, verb: str, duration_seconds: float, code: str) -> None:
        if not code.startswith("2"):
            self.failures[resource] = self.failures.get(resource, 0) + 1

    def observe_watch_event(self, resource: str, event_type: str) -> None:
        pass

    def observe_relist(self, resource: str) -> None:
        pass

    def observe_skipped_object(self, resource: str) -> None:
        pass

    def observe_leader_election_error(self, code: str) -> None:
        self.leader_election_errors += 1


async def outage(
    server: LocalKubeAPIServer, failed_enough: Callable[[], bool], *, within: float = 60.0
) -> float:
    """Stop the server's kube-apiserver (etcd stays), wait until ``failed_enough`` holds (the
    clients kept failing long enough for their backoff to grow), start it again. Both run in
    a thread, so the clients keep trying meanwhile. Returns the monotonic time at which
    start_apiserver() returned: /readyz answered 200 to admin and to anonymous."""
    await asyncio.to_thread(server.stop_apiserver)
    await until_async(
        failed_enough, timeout=within, what="the clients to fail while the server is away"
    )
    await asyncio.to_thread(server.start_apiserver)
    return time.monotonic()
