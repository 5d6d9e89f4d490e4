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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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


class KubeconfigError(Exception):
    """The kubeconfig cannot be used (exporter.kube.config turns it into a ConfigError)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A named cluster, context or user, and the directory of the file that holds it."""

    value: JSONObject
    base: str


@dataclass(slots=True)
class Kubeconfig:
    """The merged files: entries by kind ("clusters", "contexts", "users") and name."""

    entries: dict[str, dict[str, Entry]] = field(default_factory=dict)
    current_context: str = ""

    def get(self, kind: str, name: str) -> Entry:
        entry = self.entries.get(kind, {}).get(name)
        if entry is None:
            raise KubeconfigError(f"no {kind[:-1]} named {name!r}")
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
        for kind, key in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
            named = merged.entries.setdefault(kind, {})
            for item in _list(document, kind):
                name = item.get("name")
                if not isinstance(name, str):
                    raise KubeconfigError(f"{one}: an entry of {kind} has no name")
                value = item.get(key) or {}
                if not isinstance(value, dict):
                    raise KubeconfigError(f"{one}: {kind[:-1]} {name!r} is not a mapping")
                named.setdefault(name, Entry(value, base))
        current = document.get("current-context")
        if not merged.current_context and isinstance(current, str):
            merged.current_context = current
    if not read:
        raise KubeconfigError(f"none of the kubeconfig files exists: {path}")
    return merged


def uses_auth_provider(config: Kubeconfig, context: str | None) -> bool:
    """Whether the context's user authenticates with an ``auth-provider``."""
    user = _user(config, _context(config, context))
    return user is not None and "auth-provider" in user.value


async def configure(config: Kubeconfig, context: str | None, target: Configuration) -> None:
    """Set ``target`` (server, TLS, credentials) from the context; the first credential of an
    exec plugin is fetched here, so that a broken plugin fails at start."""
    chosen = _context(config, context)
    cluster = config.get("clusters", _text(chosen.value, "cluster", required=True))
    user = _user(config, chosen)
    server = _text(cluster.value, "server", required=True)
    target.host = server.rstrip("/")
    target.verify_ssl = not bool(cluster.value.get("insecure-skip-tls-verify", False))
    target.tls_server_name = _text(cluster.value, "tls-server-name") or None
    target.proxy = _text(cluster.value, "proxy-url") or None
    secure = target.host.startswith("https")
    if secure:
        target.ca_cert_data = _pem(cluster.value, "certificate-authority-data")
        if target.ca_cert_data is None:
            target.ssl_ca_cert = _file(cluster, "certificate-authority")
    if user is None:
        return
    if secure:
        target.cert_data = _pem(user.value, "client-certificate-data")
        target.key_data = _pem(user.value, "client-key-data")
        if target.cert_data is None:
            target.cert_file = _file(user, "client-certificate")
        if target.key_data is None:
            target.key_file = _file(user, "client-key")
    if "exec" in user.value:
        plugin = ExecPlugin(user.value["exec"], user.base, cluster.value)
        target.refresh_api_key_hook = plugin.refresh
        await plugin.refresh(target)
    elif token := _text(user.value, "token"):
        target.api_key["authorization"] = f"Bearer {token}"
    elif token_file := _file(user, "tokenFile"):
        reader = TokenFile(token_file)
        target.refresh_api_key_hook = reader.refresh
        reader.refresh(target)
    elif "username" in user.value and "password" in user.value:
        pair = f"{user.value['username']}:{user.value['password']}".encode()
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

    def __init__(self, spec: object, base: str, cluster: Mapping[str, Any]) -> None:
        if not isinstance(spec, dict):
            raise KubeconfigError("exec: not a mapping")
        self.api_version = _text(spec, "apiVersion", required=True)
        if self.api_version not in EXEC_API_VERSIONS:
            raise KubeconfigError(f"exec: apiVersion {self.api_version!r} is not supported")
        command = _text(spec, "command", required=True)
        if os.sep in command and not os.path.isabs(command):
            command = os.path.join(base, command)
        args = spec.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise KubeconfigError("exec: args is not a list of strings")
        self.argv = [command, *args]
        env = spec.get("env") or []
        if not isinstance(env, list) or not all(
            isinstance(e, dict) and isinstance(e.get("name"), str) for e in env
        ):
            raise KubeconfigError("exec: env is not a list of name and value")
        self._env = {e["name"]: str(e.get("value", "")) for e in env}
        self._hint = _text(spec, "installHint")
        self._cluster = dict(cluster) if spec.get("provideClusterInfo") else None
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
            token = status.get("token")
            if isinstance(token, str) and token:
                target.api_key["authorization"] = f"Bearer {token}"
            elif status.get("clientCertificateData") and status.get("clientKeyData"):
                target.cert_data = str(status["clientCertificateData"])
                target.key_data = str(status["clientKeyData"])
                target.cert_file = target.key_file = None
            else:
                raise KubeconfigError(
                    "exec: the plugin printed neither a token nor a client certificate and key"
                )
            expires = parse_time(status.get("expirationTimestamp"))
            self._expires_at = None if expires is None else expires - EXEC_EXPIRY_MARGIN_SECONDS
            self._fetched = True

    async def _run(self) -> JSONObject:
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
            answer = json.loads(out)
        except ValueError as exc:
            raise KubeconfigError(f"exec: the plugin's output is not JSON: {exc}") from exc
        if not isinstance(answer, dict) or answer.get("kind") != "ExecCredential":
            raise KubeconfigError("exec: the plugin's output is not an ExecCredential")
        if answer.get("apiVersion") != self.api_version:
            raise KubeconfigError(
                f"exec: the plugin answered {answer.get('apiVersion')!r}, not {self.api_version!r}"
            )
        status = answer.get("status")
        if not isinstance(status, dict):
            raise KubeconfigError("exec: the plugin's ExecCredential has no status")
        return status


def _cluster_info(cluster: Mapping[str, Any]) -> JSONObject:
    """The cluster as a plugin with ``provideClusterInfo`` is told about it (client-go's
    ``Cluster`` of the ExecCredential's spec)."""
    info: JSONObject = {"server": cluster.get("server", "")}
    for key in (
        "tls-server-name",
        "insecure-skip-tls-verify",
        "certificate-authority-data",
        "proxy-url",
    ):
        if key in cluster:
            info[key] = cluster[key]
    extension = next(
        (
            e.get("extension")
            for e in cluster.get("extensions") or []
            if isinstance(e, dict) and e.get("name") == "client.authentication.k8s.io/exec"
        ),
        None,
    )
    if extension is not None:
        info["config"] = extension
    return info


def _load_yaml(path: str) -> JSONObject:
    import yaml  # only here: an agent in its cluster reads no kubeconfig

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as handle:
        document = yaml.load(handle, Loader=loader)  # a safe loader
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise KubeconfigError(f"{path} is not a kubeconfig (not a mapping)")
    return document


def _list(document: Mapping[str, Any], kind: str) -> list[JSONObject]:
    items = document.get(kind) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise KubeconfigError(f"{kind} is not a list of mappings")
    return items


def _context(config: Kubeconfig, name: str | None) -> Entry:
    chosen = name or config.current_context
    if not chosen:
        raise KubeconfigError("no context given and no current-context set")
    return config.get("contexts", chosen)


def _user(config: Kubeconfig, context: Entry) -> Entry | None:
    name = _text(context.value, "user")
    return config.get("users", name) if name else None


def _text(mapping: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    value = mapping.get(key)
    if value is None or value == "":
        if required:
            raise KubeconfigError(f"{key} is missing")
        return ""
    if not isinstance(value, str):
        raise KubeconfigError(f"{key} is not a string")
    return value


def _pem(mapping: Mapping[str, Any], key: str) -> str | None:
    """A ``*-data`` field: base64 of PEM text."""
    data = _text(mapping, key)
    if not data:
        return None
    try:
        return base64.b64decode(data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise KubeconfigError(f"{key} is not base64 of PEM text: {exc}") from exc


def _file(entry: Entry, key: str) -> str | None:
    """A file field, relative to its kubeconfig's directory; the file must exist."""
    name = _text(entry.value, key)
    if not name:
        return None
    path = os.path.normpath(os.path.join(entry.base, os.path.expanduser(name)))
    if not os.path.isfile(path):
        raise KubeconfigError(f"{key} {path} does not exist")
    return path
