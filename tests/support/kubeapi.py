"""pytest plugin: a real kube-apiserver with etcd (nodesync_sim.real.kube_apiserver) for the tests.

Fixtures:

- ``kubeapi`` (session): a started :class:`LocalKubeAPIServer` shared by the whole run. Tests
  create their own uniquely named objects and remove them (``kubeapi_namespace``,
  ``kubeapi_cleanup``); they never restart, kill or compact it.
- ``kubeapi_namespace``: a fresh namespace; after the test its objects and the namespace itself
  are deleted and checked to be gone.
- ``kubeapi_cleanup``: a :class:`KubeCleanup` that deletes the objects a test registered.
- ``private_kubeapi``: a server of the test's own (about 5 s to start), for tests that restart
  or kill the server or compact etcd.

Tests that use these fixtures are marked ``@pytest.mark.kubeapi``. A missing binary fails the
test with one line naming scripts/setup-kube-apiserver (never skips it).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.real.kube_apiserver import LocalKubeAPIServer

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO_ROOT / "scripts" / "setup-kube-apiserver"
ENV_BINARY = "NODESYNC_KUBE_APISERVER"


def find_binaries() -> tuple[str, str]:
    """Paths of kube-apiserver and etcd; fails the running test when either is missing."""
    hint = "run scripts/setup-kube-apiserver"
    override = os.environ.get(ENV_BINARY)
    if override:
        if not os.access(override, os.X_OK):
            pytest.fail(f"{ENV_BINARY}={override} is not an executable ({hint})", pytrace=False)
        apiserver = override
    else:
        result = subprocess.run(
            [str(SETUP_SCRIPT), "--print-path", "--no-build"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or not result.stdout.strip():
            reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
            reason = reason.removeprefix("setup-kube-apiserver: ")
            if "scripts/setup-kube-apiserver" not in reason:
                reason = f"{reason}; {hint}"
            pytest.fail(f"no kube-apiserver: {reason}", pytrace=False)
        apiserver = result.stdout.strip()
    etcd = shutil.which("etcd") or shutil.which("etcd", path="/usr/bin:/usr/sbin")
    if etcd is None:
        pytest.fail(f"etcd not found (Debian package etcd-server); {hint}", pytrace=False)
    return apiserver, etcd


class KubeCleanup:
    """Objects a test created, deleted (and checked to be gone) after it."""

    def __init__(self, server: LocalKubeAPIServer) -> None:
        self.server = server
        self.paths: list[str] = []

    def delete_later(self, path: str) -> str:
        """Remember the object at ``path`` (e.g. ``/api/v1/nodes/n1``); returns ``path``."""
        self.paths.append(path)
        return path

    def create(self, collection: str, obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """POST ``obj`` to ``collection`` as admin (or ``identity=``) and delete it later."""
        created: dict[str, Any] = self.server.ok("POST", collection, obj, **kwargs)
        self.delete_later(f"{collection.split('?')[0]}/{created['metadata']['name']}")
        return created

    def run(self) -> None:
        """Delete everything remembered, newest first, and wait until each is gone."""
        paths, self.paths = self.paths, []
        failures = []
        for path in reversed(paths):
            answer = self.server.request("DELETE", path, {"gracePeriodSeconds": 0})
            if answer.status not in (200, 202, 404):
                failures.append(f"DELETE {path}: {answer.status} {answer.body}")
        for path in paths:
            try:
                self.server.wait_gone(path)
            except AssertionError as error:
                failures.append(str(error))
        if failures:
            raise AssertionError("cleanup failed: " + "; ".join(failures))


# Namespaced kinds a test might leave in its namespace; none needs a controller to go away.
_NAMESPACED_COLLECTIONS = (
    "/api/v1/namespaces/{ns}/pods",
    "/api/v1/namespaces/{ns}/events",
    "/api/v1/namespaces/{ns}/configmaps",
    "/api/v1/namespaces/{ns}/secrets",
    "/api/v1/namespaces/{ns}/serviceaccounts",
    "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
    "/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
)


def create_namespace(server: LocalKubeAPIServer, prefix: str = "t-") -> str:
    """Create a namespace with a fresh name and return the name."""
    name = f"{prefix}{secrets.token_hex(4)}"
    server.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    return name


def delete_namespace(server: LocalKubeAPIServer, name: str) -> None:
    """Delete a namespace and what it holds, and wait until it is gone.

    No namespace controller runs (it is part of kube-controller-manager), so the objects are
    deleted here and the namespace's ``kubernetes`` finalizer removed by hand.
    """
    for collection in _NAMESPACED_COLLECTIONS:
        path = collection.format(ns=name)
        answer = server.request("DELETE", path, {"gracePeriodSeconds": 0})
        if answer.status not in (200, 404):
            raise AssertionError(f"DELETE {path}: {answer.status} {answer.body}")
    path = f"/api/v1/namespaces/{name}"
    answer = server.request("DELETE", path)
    if answer.status == 404:
        return
    if answer.status not in (200, 202):
        raise AssertionError(f"DELETE {path}: {answer.status} {answer.body}")
    namespace = server.ok("GET", path)
    namespace["spec"]["finalizers"] = []
    server.ok("PUT", f"{path}/finalize", namespace)
    server.wait_gone(path)


def _started(apiserver: str, etcd: str) -> LocalKubeAPIServer:
    server = LocalKubeAPIServer(apiserver, etcd)
    try:
        server.start()
    except BaseException:
        server.cleanup()
        raise
    return server


def _teardown(server: LocalKubeAPIServer) -> None:
    server.cleanup()
    leftovers = server.leftovers()
    assert not leftovers, f"LocalKubeAPIServer left things behind: {leftovers}"


@pytest.fixture(scope="session")
def kubeapi() -> Iterator[LocalKubeAPIServer]:
    """A real kube-apiserver with etcd shared by the session; never restart or compact it."""
    server = _started(*find_binaries())
    try:
        yield server
    finally:
        _teardown(server)


@pytest.fixture
def private_kubeapi() -> Iterator[LocalKubeAPIServer]:
    """A real kube-apiserver with etcd of this test's own, to restart, kill or compact."""
    server = _started(*find_binaries())
    try:
        yield server
    finally:
        _teardown(server)


@pytest.fixture
def kubeapi_cleanup(kubeapi: LocalKubeAPIServer) -> Iterator[KubeCleanup]:
    """Deletes the objects the test registered on the shared server after the test."""
    cleanup = KubeCleanup(kubeapi)
    try:
        yield cleanup
    finally:
        cleanup.run()


@pytest.fixture
def kubeapi_namespace(kubeapi: LocalKubeAPIServer) -> Iterator[str]:
    """A fresh namespace on the shared server, deleted with its contents after the test."""
    name = create_namespace(kubeapi)
    try:
        yield name
    finally:
        delete_namespace(kubeapi, name)


CRD_MANIFEST = REPO_ROOT / "deploy" / "base" / "noderollback-crd.yaml"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def install_crd(server: LocalKubeAPIServer) -> None:
    """Create the NodeRollback CustomResourceDefinition (once: it may exist) and wait until the
    server serves it."""
    import yaml

    crd = yaml.safe_load(CRD_MANIFEST.read_text())
    answer = server.request("POST", CRD_PATH, crd)
    if answer.status not in (201, 409):
        raise AssertionError(f"cannot create the CRD: {answer.status} {answer.body}")

    def established() -> bool:
        got = server.request("GET", f"{CRD_PATH}/{crd['metadata']['name']}")
        conditions = (
            (got.body.get("status") or {}).get("conditions") or [] if got.status == 200 else []
        )
        ready = any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        )
        return (
            ready
            and server.request("GET", "/apis/nodesync.io/v1alpha1/noderollbacks").status == 200
        )

    server.wait_for(established, "the NodeRollback CRD to be established", timeout=30)


@pytest.fixture(scope="session")
def noderollback_crd(kubeapi: LocalKubeAPIServer) -> LocalKubeAPIServer:
    """The shared server, serving the NodeRollback resource (tests delete what they create)."""
    install_crd(kubeapi)
    return kubeapi
