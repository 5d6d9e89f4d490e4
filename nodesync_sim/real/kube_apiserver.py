"""A real kube-apiserver with etcd on free loopback ports, in a private directory.

The kube-apiserver binary is built once per machine by ``scripts/setup-kube-apiserver`` (from
Debian's ``kubernetes`` source package) or named by ``NODESYNC_KUBE_APISERVER``; etcd is Debian's
``etcd-server``. The server runs with TLS (its own self-signed certificate, which the kubeconfigs
carry as their CA), token authentication, the RBAC authorizer, an audit log and service-account
keys made with openssl. No controller-manager, scheduler or kubelet runs: no node lifecycle, no
disruption controller, no garbage collector, no namespace controller.

Both processes are children (nodesync_sim.real.process): stopped by PID, SIGTERM then SIGKILL
(kube-apiserver after ``APISERVER_STOP_GRACE``, see there).
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodesync_sim.real.process import ChildProcess, free_port
from nodesync_sim.real.removal import remove_tree

ADMIN = "admin"
AGENT = "nodesync-agent"
CONTROLLER = "nodesync-controller"
SERVICE_ACCOUNT_NAMESPACE = "nodesync"
"""Identities handed out as kubeconfigs: names of deploy/base's service accounts, plus admin."""

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
START_TIMEOUT = 90.0
#: How long kube-apiserver gets to exit after SIGTERM before it is killed. It stops listening
#: at once and exits about a second later, unless a watch is open: 1.20 then waits for its
#: watches to end (a client's, for minutes; measured: still running 10 s after SIGTERM), so a
#: stop with a watch open ends in the SIGKILL anyway. 3 s keeps the graceful exit when no watch
#: holds it and spares the wait when one does.
APISERVER_STOP_GRACE = 3.0
REQUEST_TIMEOUT = 10.0
_PORT_ATTEMPTS = 5
_POLL = 0.05

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    nonResourceURLs: [/readyz, /readyz/*, /healthz, /healthz/*, /livez, /livez/*]
  - level: Request
    verbs: [create, update, patch, delete, deletecollection]
  - level: Metadata
"""
"""Writes are logged with their request bodies, reads with metadata, health probes not at all."""


class KubeAPIStartError(RuntimeError):
    """etcd or kube-apiserver did not start, or did not become ready in time."""


class EtcdError(RuntimeError):
    """etcd's JSON gateway refused a request."""


class _PortInUse(KubeAPIStartError):
    """The process could not bind a port that was free a moment earlier."""


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class Identity:
    """A user of the server: its bearer token, user name and groups."""

    name: str
    user: str
    groups: tuple[str, ...]
    token: str


def service_account_identity(namespace: str, name: str) -> Identity:
    """The identity a token of the service account ``namespace/name`` authenticates as."""
    return Identity(
        name=name,
        user=f"system:serviceaccount:{namespace}:{name}",
        groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
        token=secrets.token_hex(24),
    )


@dataclass(frozen=True)
class Response:
    """An HTTP answer: status, headers and the body (parsed JSON when it is JSON)."""

    status: int
    body: Any
    headers: dict[str, str]


@dataclass(frozen=True)
class APIServerOptions:
    """What a whole cluster needs of the server beyond the defaults (nodesync_sim.real).

    The defaults are the API-only server: RBAC, no admission plugin enabled beyond the
    built-in ones, tokens only.
    """

    authorization_modes: tuple[str, ...] = ("RBAC",)
    admission_plugins: tuple[str, ...] = ()
    """Enabled in addition to the defaults (``--enable-admission-plugins``)."""
    client_ca_file: Path | None = None
    """Client certificates signed by this CA authenticate (kubelets join with one)."""
    kubelet_client_cert: tuple[Path, Path] | None = None
    """(certificate, key) the server presents to kubelets (``kubectl logs/exec``)."""
    allow_privileged: bool = False
    service_accounts: bool = False
    """Pods get their service account's token (ServiceAccount admission): only where a
    controller-manager's token controller writes the tokens it mounts."""


class LocalKubeAPIServer:
    """etcd plus kube-apiserver on free loopback ports, in a private temporary directory.

    :meth:`start` runs both and waits until the API server is ready; :meth:`cleanup` stops them
    and removes the directory. Requests go through :meth:`request` (or any client given one of
    :meth:`kubeconfig`'s files) as one of the identities ``admin`` (group system:masters),
    ``nodesync-agent`` and ``nodesync-controller`` (service accounts in namespace nodesync).

    Over 400 lines on purpose: the certificates, tokens, flags, kubeconfigs, audit log and the
    restart of one server process belong together (a restart must keep every file the others
    wrote), and splitting them would only pass a bag of paths between classes.
    """

    def __init__(
        self,
        apiserver_binary: str,
        etcd_binary: str,
        options: APIServerOptions | None = None,
        *,
        directory: Path | None = None,
    ) -> None:
        self.apiserver_binary = apiserver_binary
        self.options = options or APIServerOptions()
        self.etcd_binary = etcd_binary
        self.dir = directory or Path(tempfile.mkdtemp(prefix="nodesync-kubeapi-"))
        self.cert_dir = self.dir / "certs"
        self.audit_log = self.dir / "audit.log"
        self.identities: dict[str, Identity] = {
            ADMIN: Identity(ADMIN, ADMIN, ("system:masters",), secrets.token_hex(24)),
            AGENT: service_account_identity(SERVICE_ACCOUNT_NAMESPACE, AGENT),
            CONTROLLER: service_account_identity(SERVICE_ACCOUNT_NAMESPACE, CONTROLLER),
        }
        self.etcd_port = 0
        self.etcd_peer_port = 0
        self.port = 0
        self.last_start_seconds = 0.0
        self.last_stop_seconds = 0.0
        self._etcd: ChildProcess | None = None
        self._apiserver: ChildProcess | None = None
        self._spawned: list[ChildProcess] = []
        self._ssl: ssl.SSLContext | None = None
        self._https: urllib.request.OpenerDirector | None = None
        # Loopback only: never through a proxy from the environment.
        self._plain = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The API server's base URL."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        """etcd's client URL (plain HTTP on loopback)."""
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def ca_file(self) -> Path:
        """The server's self-signed certificate (with its CA), usable as the CA to trust."""
        return self.cert_dir / "apiserver.crt"

    @property
    def service_account_key(self) -> Path:
        """The private key service-account tokens are signed with (a controller-manager's)."""
        return self.dir / "sa.key"

    @property
    def apiserver_pid(self) -> int | None:
        """PID of the running kube-apiserver, if one runs."""
        proc = self._apiserver
        return proc.pid if proc is not None else None

    def start(self) -> None:
        """Prepare keys and files, start etcd and kube-apiserver, wait until ready."""
        started = time.monotonic()
        self._write_files()
        self._start_etcd()
        self.start_apiserver()
        self.last_start_seconds = time.monotonic() - started

    def start_apiserver(self) -> None:
        """Start kube-apiserver (on its previous port, if it had one) and wait until ready."""
        if self.apiserver_pid is not None:
            raise KubeAPIStartError("kube-apiserver is already running")
        fixed_port = self.port != 0
        for _attempt in range(1 if fixed_port else _PORT_ATTEMPTS):
            if not fixed_port:
                self.port = free_port()
            proc = self._spawn("kube-apiserver", self._apiserver_argv())
            self._apiserver = proc
            try:
                self._wait_apiserver_ready(proc)
            except _PortInUse:
                proc.stop()
                if fixed_port:
                    raise
                continue
            self._write_kubeconfigs()
            return
        raise KubeAPIStartError(f"no free port for kube-apiserver after {_PORT_ATTEMPTS} tries")

    def stop_apiserver(self, *, kill: bool = False) -> float:
        """Stop kube-apiserver by PID (SIGTERM, or SIGKILL when ``kill``); seconds it took."""
        proc, self._apiserver = self._apiserver, None
        if proc is None:
            return 0.0
        started = time.monotonic()
        if kill:
            proc.kill()
        else:
            proc.stop(APISERVER_STOP_GRACE)
        self.last_stop_seconds = time.monotonic() - started
        return self.last_stop_seconds

    def restart(self, *, kill: bool = False) -> None:
        """Stop kube-apiserver by PID, start it again on the same port with the same etcd."""
        self.stop_apiserver(kill=kill)
        self.start_apiserver()

    def kill(self) -> None:
        """SIGKILL kube-apiserver (no graceful shutdown); :meth:`start_apiserver` revives it."""
        self.stop_apiserver(kill=True)

    def cleanup(self) -> None:
        """Stop kube-apiserver and etcd by PID and remove the directory."""
        self.stop_apiserver()
        if self._etcd is not None:
            self._etcd.stop()
            self._etcd = None
        remove_tree(self.dir)

    def leftovers(self) -> list[str]:
        """What is still there after :meth:`cleanup`: processes, listening ports, files."""
        found = [f"{proc.name} pid {proc.pid}" for proc in self._spawned if proc.running]
        for port in (self.port, self.etcd_port, self.etcd_peer_port):
            if port and _port_open(port):
                found.append(f"port {port} still accepts connections")
        if self.dir.exists():
            found.append(str(self.dir))
        return found

    # -- etcd ------------------------------------------------------------------------------

    def etcd_request(self, path: str, body: dict[str, Any]) -> Any:
        """POST to etcd's v3 JSON gateway (e.g. ``/v3/kv/range``) and return the parsed answer."""
        request = urllib.request.Request(
            self.etcd_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with self._plain.open(request, timeout=REQUEST_TIMEOUT) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            with error:
                detail = error.read().decode(errors="replace")
            raise EtcdError(f"etcd {path}: {error.code} {detail}") from None

    def etcd_revision(self) -> int:
        """etcd's current revision (what the API server calls the latest resourceVersion)."""
        answer = self.etcd_request("/v3/kv/range", {"key": base64.b64encode(b"\0").decode()})
        return int(answer["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd at its current revision (physically) and return that revision.

        Afterwards etcd has forgotten every older revision: a list at an exact older
        resourceVersion (or a continue token from before) answers 410 Expired. The API
        server's watch cache is not affected: a watch from an older resourceVersion that the
        cache still holds keeps replaying its events (see :meth:`expire_history`).
        """
        revision = self.etcd_revision()
        try:
            self.etcd_request("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        except EtcdError as error:
            # Nothing was written since the last compaction: already compacted at revision.
            if "required revision has been compacted" not in str(error):
                raise
        return revision

    def expire_history(self) -> int:
        """Make every resourceVersion up to now too old, for watches as well as for lists.

        Compacts etcd, then restarts kube-apiserver so that its watch caches start again at
        the current revision: a watch from an older resourceVersion then gets one ERROR event
        with code 410 (reason Expired), as on a cluster whose history has moved on. Returns the
        compacted revision.
        """
        revision = self.compact()
        self.restart()
        return revision

    # -- requests --------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts the server's certificate (and checks the host)."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        return self._ssl

    def _opener(self) -> urllib.request.OpenerDirector:
        if self._https is None:
            self._https = urllib.request.build_opener(
                urllib.request.ProxyHandler({}),
                urllib.request.HTTPSHandler(context=self.ssl_context()),
            )
        return self._https

    def _forget_tls(self) -> None:
        self._ssl = None
        self._https = None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        identity: str | None = ADMIN,
        content_type: str = "application/json",
        timeout: float = REQUEST_TIMEOUT,
    ) -> Response:
        """One request as ``identity`` (None: anonymous); HTTP errors are answers, not raised."""
        request = self._build_request(method, path, body, identity, content_type)
        try:
            with self._opener().open(request, timeout=timeout) as answer:
                return _response(answer.status, answer.read(), dict(answer.headers))
        except urllib.error.HTTPError as error:
            with error:
                return _response(error.code, error.read(), dict(error.headers))

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """:meth:`request` that must succeed (2xx); returns the parsed body."""
        answer = self.request(method, path, body, **kwargs)
        if not 200 <= answer.status < 300:
            raise AssertionError(f"{method} {path}: {answer.status} {answer.body}")
        return answer.body

    @contextlib.contextmanager
    def watch(
        self, path: str, *, identity: str | None = ADMIN, timeout: float = REQUEST_TIMEOUT
    ) -> Iterator[Iterator[dict[str, Any]]]:
        """Open a watch (``path`` with ``watch=1`` and any resourceVersion in its query).

        Yields an iterator over the events; reading blocks at most ``timeout`` seconds per
        event. A refused watch raises AssertionError with the status.
        """
        request = self._build_request("GET", path, None, identity, "application/json")
        try:
            answer = self._opener().open(request, timeout=timeout)
        except urllib.error.HTTPError as error:
            with error:
                raise AssertionError(f"watch {path}: {error.code} {error.read()!r}") from None
        with answer:

            def events() -> Iterator[dict[str, Any]]:
                for line in answer:
                    if line.strip():
                        yield json.loads(line)

            yield events()

    def wait_for(
        self, condition: Callable[[], Any], what: str, timeout: float = REQUEST_TIMEOUT
    ) -> Any:
        """Poll ``condition`` until it returns something truthy (returned); fail at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(_POLL)

    def wait_gone(self, path: str, timeout: float = REQUEST_TIMEOUT) -> None:
        """Wait until GET ``path`` (as admin) answers 404."""
        self.wait_for(
            lambda: self.request("GET", path).status == 404, f"{path} to be gone", timeout
        )

    # -- audit log -------------------------------------------------------------------------

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log so far, one parsed JSON event per complete line."""
        try:
            text = self.audit_log.read_text()
        except FileNotFoundError:
            return []
        lines = text.split("\n")[:-1]  # the last piece is empty or a line being written
        return [json.loads(line) for line in lines if line]

    def wait_for_audit(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = REQUEST_TIMEOUT
    ) -> dict[str, Any]:
        """The first audit event matching ``predicate``, waiting for it to be written."""

        def find() -> dict[str, Any] | None:
            return next((event for event in self.audit_events() if predicate(event)), None)

        found: dict[str, Any] = self.wait_for(find, "a matching audit event", timeout)
        return found

    # -- kubeconfigs -----------------------------------------------------------------------

    def kubeconfig(self, identity: str) -> Path:
        """The kubeconfig file of ``identity`` (server URL, the server's CA, the token)."""
        if identity not in self.identities:
            raise KeyError(f"unknown identity {identity!r}; known: {sorted(self.identities)}")
        return self.dir / f"kubeconfig-{identity}.yaml"

    def _write_kubeconfigs(self) -> None:
        ca_data = base64.b64encode(self.ca_file.read_bytes()).decode()
        for name, identity in self.identities.items():
            config = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "kubeapi",
                        "cluster": {"server": self.url, "certificate-authority-data": ca_data},
                    }
                ],
                "users": [{"name": name, "user": {"token": identity.token}}],
                "contexts": [{"name": name, "context": {"cluster": "kubeapi", "user": name}}],
                "current-context": name,
            }
            # JSON is YAML: every kubeconfig loader reads it.
            self.kubeconfig(name).write_text(json.dumps(config, indent=2) + "\n")

    # -- internals -------------------------------------------------------------------------

    def _build_request(
        self, method: str, path: str, body: Any, identity: str | None, content_type: str
    ) -> urllib.request.Request:
        headers = {"Accept": "application/json"}
        if identity is not None:
            headers["Authorization"] = f"Bearer {self.identities[identity].token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        return urllib.request.Request(self.url + path, data=data, headers=headers, method=method)

    def _write_files(self) -> None:
        self.cert_dir.mkdir(mode=0o700, exist_ok=True)
        key, public = self.service_account_key, self.dir / "sa.pub"
        for argv in (
            ["openssl", "genrsa", "-out", str(key), "2048"],
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(public)],
        ):
            subprocess.run(argv, check=True, capture_output=True, timeout=60)
        lines = []
        for identity in self.identities.values():
            groups = ",".join(identity.groups)
            lines.append(f'{identity.token},{identity.user},uid-{identity.name},"{groups}"')
        (self.dir / "tokens.csv").write_text("\n".join(lines) + "\n")
        (self.dir / "audit-policy.yaml").write_text(AUDIT_POLICY)

    def _spawn(self, name: str, argv: list[str]) -> ChildProcess:
        proc = ChildProcess(argv, log_path=self.dir / f"{name}.log", name=name)
        proc.start()
        self._spawned.append(proc)
        return proc

    def _start_etcd(self) -> None:
        for _attempt in range(_PORT_ATTEMPTS):
            self.etcd_port, self.etcd_peer_port = free_port(), free_port()
            client, peer = self.etcd_url, f"http://127.0.0.1:{self.etcd_peer_port}"
            proc = self._spawn(
                "etcd",
                [
                    self.etcd_binary,
                    "--name=default",
                    f"--data-dir={self.dir / 'etcd'}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=default={peer}",
                    "--unsafe-no-fsync",
                    "--log-level=warn",
                ],
            )
            self._etcd = proc
            try:
                self._wait(proc, self._etcd_healthy, "etcd to answer /health")
            except _PortInUse:
                proc.stop()
                remove_tree(self.dir / "etcd", made=self.dir)
                continue
            return
        raise KubeAPIStartError(f"no free ports for etcd after {_PORT_ATTEMPTS} tries")

    def _etcd_healthy(self) -> bool:
        try:
            with self._plain.open(self.etcd_url + "/health", timeout=2.0) as answer:
                return bool(json.load(answer).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _apiserver_argv(self) -> list[str]:
        files = self.dir
        return [
            self.apiserver_binary,
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            # Loopback as the advertised address, and no reconciler writing it into the
            # kubernetes Endpoints (which refuse loopback): no network interface is needed.
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
            f"--cert-dir={self.cert_dir}",
            f"--token-auth-file={files / 'tokens.csv'}",
            "--authorization-mode=" + ",".join(self.options.authorization_modes),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={files / 'sa.pub'}",
            f"--service-account-signing-key-file={files / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--audit-log-path={self.audit_log}",
            f"--audit-policy-file={files / 'audit-policy.yaml'}",
            # Stop in about a second instead of the 60 s a load balancer would want.
            "--shutdown-delay-duration=0s",
            # etcd is compacted only when a test asks for it (compact()).
            "--etcd-compaction-interval=0",
            "--profiling=false",
            *self._option_args(),
        ]

    def _option_args(self) -> list[str]:
        options = self.options
        args = []
        if options.admission_plugins:
            args.append("--enable-admission-plugins=" + ",".join(options.admission_plugins))
        if not options.service_accounts:
            # No token controller runs, so ServiceAccount admission would refuse every pod.
            args.append("--disable-admission-plugins=ServiceAccount")
        if options.client_ca_file is not None:
            args.append(f"--client-ca-file={options.client_ca_file}")
        if options.kubelet_client_cert is not None:
            cert, key = options.kubelet_client_cert
            args += [f"--kubelet-client-certificate={cert}", f"--kubelet-client-key={key}"]
        if options.allow_privileged:
            args.append("--allow-privileged=true")
        return args

    def _wait_apiserver_ready(self, proc: ChildProcess) -> None:
        self._wait(proc, self._apiserver_ready, "kube-apiserver /readyz")

    def _apiserver_ready(self) -> bool:
        """Ready, and the RBAC authorizer's caches already hold the bootstrap bindings."""
        if not self.ca_file.exists():
            return False
        try:
            for identity in (ADMIN, None):  # anonymous /readyz passes only through RBAC
                answer = self.request("GET", "/readyz", identity=identity, timeout=2.0)
                if answer.status != 200:
                    return False
        except OSError:  # not listening yet (ssl.SSLError is an OSError too)
            self._forget_tls()  # the certificate may have been read half written
            return False
        return True

    def _wait(self, proc: ChildProcess, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            if not proc.running:
                tail = proc.log_tail()
                error = _PortInUse if "address already in use" in tail else KubeAPIStartError
                raise error(f"{proc.name} exited with {proc.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                proc.stop()
                raise KubeAPIStartError(f"timed out waiting for {what}:\n{proc.log_tail()}")
            time.sleep(_POLL)


def _response(status: int, raw: bytes, headers: dict[str, str]) -> Response:
    body: Any = raw.decode(errors="replace")
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    if "json" in content_type and raw:
        body = json.loads(raw)
    return Response(status, body, headers)
