"""A kubeconfig read as kubectl reads it, into a :class:`exporter.kube.config.Configuration`.

What is read (client-go's rules):

- ``path`` may list several files separated by ``:`` (as ``KUBECONFIG`` does). Each cluster,
  context and user is taken from the first file that names it, and ``current-context`` from
  the first file that sets it. In a list, files that do not exist are skipped; a single path
  must exist.
- The context is ``context`` when given, else ``current-context``; a context names its cluster
  and, optionally, its user (a named user that does not exist is an error).
- Cluster: ``server``; ``certificate-authority-data`` (base64 PEM) or ``certificate-authority``
  (a file), the data winning when both are set; ``insecure-skip-tls-verify``;
  ``tls-server-name``; ``proxy-url``.
- User, the first that applies: ``exec`` (a credential plugin, ``client.authentication.k8s.io``
  v1 or v1beta1: run again when its credential expires), ``token``, ``tokenFile`` (read again
  every minute, so a rotated token is picked up), ``username`` and ``password`` (basic auth);
  and, with any of them, ``client-certificate-data``/``client-certificate`` and
  ``client-key-data``/``client-key``. A plugin's client certificate takes the place of the
  user's.
- Relative file names (certificates, keys, the token file, a plugin command with a ``/``) are
  relative to the directory of the file that holds them.

Not read: impersonation (``as``, ``as-groups``) and the context's namespace. A user with an
``auth-provider`` (oidc, gcp, azure) is handed to the ``kubernetes`` client's loader (see
exporter.kube.config), which costs its import.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from exporter.kube.kubeconfig_file import (
    Cluster,
    Context,
    ExecConfig,
    ExecCredential,
    ExecCredentialStatus,
    KubeconfigFile,
    User,
)
from exporter.model.codec import error_message
from exporter.model.rfc3339 import parse_time

if TYPE_CHECKING:
    from exporter.kube.config import Configuration

#: How often a token file is read again (client-go and the kubernetes client: a minute).
TOKEN_FILE_REREAD_SECONDS = 60.0
#: A plugin's credential is renewed this long before it expires.
EXEC_EXPIRY_MARGIN_SECONDS = 10.0
#: The longest a credential plugin may run (client-go has no limit; a hung one would hang us).
EXEC_TIMEOUT_SECONDS = 60.0
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")

JSONObject = dict[str, Any]
T = TypeVar("T")
_EXEC_CREDENTIAL = msgspec.json.Decoder(ExecCredential)


class KubeconfigError(Exception):
    """The kubeconfig cannot be used (exporter.kube.config turns it into a ConfigError)."""


@dataclass(frozen=True, slots=True)
class Entry(Generic[T]):
    """A named cluster, context or user, and the directory of the file that holds it."""

    value: T
    base: str


@dataclass(slots=True)
class Kubeconfig:
    """The merged files: clusters, contexts and users by name."""

    clusters: dict[str, Entry[Cluster]] = field(default_factory=dict)
    contexts: dict[str, Entry[Context]] = field(default_factory=dict)
    users: dict[str, Entry[User]] = field(default_factory=dict)
    current_context: str = ""


def _named(entries: dict[str, Entry[T]], kind: str, name: str) -> Entry[T]:
    entry = entries.get(name)
    if entry is None:
        raise KubeconfigError(f"no {kind} named {name!r}")
    return entry


def read_files(path: str) -> Kubeconfig:
    """The kubeconfig files of ``path`` (``:``-separated), merged as kubectl merges them."""
    paths = [os.path.expanduser(p) for p in path.split(os.pathsep) if p]
    if not paths:
        raise KubeconfigError("no kubeconfig file given")
    merged = Kubeconfig()
    read = 0
    for one in paths:
        if len(paths) > 1 and not os.path.exists(one):
            continue
        document = _load_yaml(one)
        read += 1
        base = os.path.dirname(os.path.abspath(one))
        for cluster in document.clusters or ():
            merged.clusters.setdefault(cluster.name, Entry(cluster.cluster or Cluster(), base))
        for context in document.contexts or ():
            merged.contexts.setdefault(context.name, Entry(context.context or Context(), base))
        for user in document.users or ():
            merged.users.setdefault(user.name, Entry(user.user or User(), base))
        if not merged.current_context and document.current_context:
            merged.current_context = document.current_context
    if not read:
        raise KubeconfigError(f"none of the kubeconfig files exists: {path}")
    return merged


def uses_auth_provider(config: Kubeconfig, context: str | None) -> bool:
    """Whether the context's user authenticates with an ``auth-provider``."""
    user = _user(config, _context(config, context))
    return user is not None and user.value.auth_provider is not None


async def configure(config: Kubeconfig, context: str | None, target: Configuration) -> None:
    """Set ``target`` (server, TLS, credentials) from the context; the first credential of an
    exec plugin is fetched here, so that a broken plugin fails at start."""
    chosen = _context(config, context)
    cluster = _named(config.clusters, "cluster", _required(chosen.value.cluster, "cluster"))
    user = _user(config, chosen)
    server = _required(cluster.value.server, "server")
    target.host = server.rstrip("/")
    target.verify_ssl = not cluster.value.insecure_skip_tls_verify
    target.tls_server_name = cluster.value.tls_server_name or None
    target.proxy = cluster.value.proxy_url or None
    secure = target.host.startswith("https")
    if secure:
        ca = cluster.value
        target.ca_cert_data = _pem(ca.certificate_authority_data, "certificate-authority-data")
        if target.ca_cert_data is None:
            ca_file = _file(cluster.base, ca.certificate_authority, "certificate-authority")
            target.ssl_ca_cert = ca_file
    if user is None:
        return
    who = user.value
    if secure:
        target.cert_data = _pem(who.client_certificate_data, "client-certificate-data")
        target.key_data = _pem(who.client_key_data, "client-key-data")
        if target.cert_data is None:
            target.cert_file = _file(user.base, who.client_certificate, "client-certificate")
        if target.key_data is None:
            target.key_file = _file(user.base, who.client_key, "client-key")
    if who.exec is not None:
        plugin = ExecPlugin(who.exec, user.base, cluster.value)
        target.refresh_api_key_hook = plugin.refresh
        await plugin.refresh(target)
    elif who.token:
        target.api_key["authorization"] = f"Bearer {who.token}"
    elif token_file := _file(user.base, who.token_file, "tokenFile"):
        reader = TokenFile(token_file)
        target.refresh_api_key_hook = reader.refresh
        reader.refresh(target)
    elif who.username is not None and who.password is not None:
        pair = f"{who.username}:{who.password}".encode()
        target.api_key["authorization"] = "Basic " + base64.b64encode(pair).decode()


class TokenFile:
    """A bearer token read from a file, and read again every minute (rotated tokens); a read
    that fails after the first keeps the token it had."""

    def __init__(self, path: str, *, reread_seconds: float = TOKEN_FILE_REREAD_SECONDS) -> None:
        self.path = path
        self._reread_seconds = reread_seconds
        self._read_at: float | None = None

    def refresh(self, target: Any) -> None:
        """The configuration's ``refresh_api_key_hook``: set its token, read again when due."""
        now = time.monotonic()
        if self._read_at is not None and now - self._read_at < self._reread_seconds:
            return
        try:
            with open(self.path, encoding="utf-8") as handle:
                token = handle.read().strip()
            if not token:
                raise KubeconfigError(f"the token file {self.path} is empty")
        except (OSError, KubeconfigError):
            if self._read_at is None:
                raise
            return
        self._read_at = now
        target.api_key["authorization"] = f"Bearer {token}"


class ExecPlugin:
    """A client-go credential plugin: runs the command, reads the ExecCredential it prints,
    and runs it again once that credential expired (one run at a time)."""

    def __init__(self, spec: ExecConfig, base: str, cluster: Cluster) -> None:
        self.api_version = _required(spec.api_version, "apiVersion")
        if self.api_version not in EXEC_API_VERSIONS:
            raise KubeconfigError(f"exec: apiVersion {self.api_version!r} is not supported")
        command = _required(spec.command, "command")
        if os.sep in command and not os.path.isabs(command):
            command = os.path.join(base, command)
        self.argv = [command, *(spec.args or ())]
        self._env = {e.name: e.value or "" for e in spec.env or ()}
        self._hint = spec.install_hint or ""
        self._cluster = cluster if spec.provide_cluster_info else None
        self._expires_at: float | None = None  # Unix time; None: not fetched, or never expires
        self._fetched = False
        self._lock = asyncio.Lock()

    def _valid(self) -> bool:
        if not self._fetched:
            return False
        return self._expires_at is None or time.time() < self._expires_at

    async def refresh(self, target: Any) -> None:
        """The configuration's ``refresh_api_key_hook``: a valid credential in ``target``."""
        if self._valid():
            return
        async with self._lock:
            if self._valid():
                return
            status = await self._run()
            if status.token:
                target.api_key["authorization"] = f"Bearer {status.token}"
            elif status.client_certificate_data and status.client_key_data:
                target.cert_data = status.client_certificate_data
                target.key_data = status.client_key_data
                target.cert_file = target.key_file = None
            else:
                raise KubeconfigError(
                    "exec: the plugin printed neither a token nor a client certificate and key"
                )
            expires = parse_time(status.expiration_timestamp)
            self._expires_at = None if expires is None else expires - EXEC_EXPIRY_MARGIN_SECONDS
            self._fetched = True

    async def _run(self) -> ExecCredentialStatus:
        spec: JSONObject = {"interactive": False}
        if self._cluster is not None:
            spec["cluster"] = _cluster_info(self._cluster)
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **self._env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            hint = f" ({self._hint})" if self._hint else ""
            raise KubeconfigError(f"exec: cannot run {self.argv[0]!r}: {exc}{hint}") from exc
        try:
            async with asyncio.timeout(EXEC_TIMEOUT_SECONDS):  # not wait_for (tasks.wait_set)
                out, err = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            raise KubeconfigError(
                f"exec: {self.argv[0]!r} did not answer within {EXEC_TIMEOUT_SECONDS:g} s"
            ) from None
        if process.returncode != 0:
            detail = err.decode(errors="replace").strip()
            raise KubeconfigError(
                f"exec: {self.argv[0]!r} exited with {process.returncode}"
                + (f": {detail[:500]}" if detail else "")
            )
        try:
            answer = _EXEC_CREDENTIAL.decode(out)
        except msgspec.ValidationError as exc:
            raise KubeconfigError(
                f"exec: the plugin's output is not an ExecCredential: {error_message(exc)}"
            ) from exc
        except msgspec.DecodeError as exc:
            raise KubeconfigError(f"exec: the plugin's output is not JSON: {exc}") from exc
        if answer.kind != "ExecCredential":
            raise KubeconfigError("exec: the plugin's output is not an ExecCredential")
        if answer.api_version != self.api_version:
            raise KubeconfigError(
                f"exec: the plugin answered {answer.api_version!r}, not {self.api_version!r}"
            )
        if answer.status is None:
            raise KubeconfigError("exec: the plugin's ExecCredential has no status")
        return answer.status


def _cluster_info(cluster: Cluster) -> JSONObject:
    """The cluster as a plugin with ``provideClusterInfo`` is told about it (client-go's
    ``Cluster`` of the ExecCredential's spec)."""
    info: JSONObject = {"server": cluster.server or ""}
    for key, value in (
        ("tls-server-name", cluster.tls_server_name),
        ("insecure-skip-tls-verify", cluster.insecure_skip_tls_verify),
        ("certificate-authority-data", cluster.certificate_authority_data),
        ("proxy-url", cluster.proxy_url),
    ):
        if value is not None:
            info[key] = value
    extension = next(
        (
            e.extension
            for e in cluster.extensions or ()
            if e.name == "client.authentication.k8s.io/exec"
        ),
        None,
    )
    if extension is not None:
        info["config"] = extension
    return info


def _load_yaml(path: str) -> KubeconfigFile:
    import yaml  # only here: an agent in its cluster reads no kubeconfig

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as handle:
        document = yaml.load(handle, Loader=loader)  # a safe loader
    try:
        return msgspec.convert(document or {}, KubeconfigFile)
    except msgspec.ValidationError as exc:
        raise KubeconfigError(f"{path} is not a kubeconfig: {error_message(exc)}") from None


def _context(config: Kubeconfig, name: str | None) -> Entry[Context]:
    chosen = name or config.current_context
    if not chosen:
        raise KubeconfigError("no context given and no current-context set")
    return _named(config.contexts, "context", chosen)


def _user(config: Kubeconfig, context: Entry[Context]) -> Entry[User] | None:
    name = context.value.user
    return _named(config.users, "user", name) if name else None


def _required(value: str | None, key: str) -> str:
    if not value:
        raise KubeconfigError(f"{key} is missing")
    return value


def _pem(data: str | None, key: str) -> str | None:
    """A ``*-data`` field: base64 of PEM text."""
    if not data:
        return None
    try:
        return base64.b64decode(data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise KubeconfigError(f"{key} is not base64 of PEM text: {exc}") from exc


def _file(base: str, name: str | None, key: str) -> str | None:
    """A file field, relative to its kubeconfig's directory; the file must exist."""
    if not name:
        return None
    path = os.path.normpath(os.path.join(base, os.path.expanduser(name)))
    if not os.path.isfile(path):
        raise KubeconfigError(f"{key} {path} does not exist")
    return path
