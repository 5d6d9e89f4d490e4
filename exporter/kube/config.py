"""Client configuration for the API server: a kubeconfig file, in-cluster, or host + token.

The CLI owns the flags (``--kubeconfig``; empty means in-cluster) and passes the values here.
Every function returns a configuration for :class:`exporter.kube.api.KubeAPI`: this module's
:class:`Configuration`, read without the ``kubernetes`` client package, whose import alone
costs ~18 MiB (requests, oauthlib, pydantic, urllib3 ... a third of an agent's memory). Its
attributes are named as those of ``kubernetes.aio.client.Configuration``, and KubeAPI takes
either (:class:`ClientConfiguration`): a kubeconfig whose user has an ``auth-provider`` (oidc,
gcp, azure) is still loaded by the kubernetes client. How a kubeconfig is read:
exporter.kube.kubeconfig.
"""

from __future__ import annotations

import inspect
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from exporter.kube.kubeconfig import KubeconfigError, TokenFile, configure, read_files
from exporter.kube.kubeconfig import uses_auth_provider as _uses_auth_provider

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

#: Called before each request with the configuration; may update its ``api_key`` (a token
#: file read again, a plugin's credential renewed). A coroutine function is awaited.
RefreshHook = Callable[[Any], object]


class ConfigError(Exception):
    """The client cannot be configured (no kubeconfig, not in a cluster, unreadable files)."""


class ClientConfiguration(Protocol):
    """What KubeAPI reads of a configuration: :class:`Configuration`, or the kubernetes
    client's ``kubernetes.aio.client.Configuration`` (the tests' and the simulator's)."""

    @property
    def host(self) -> str: ...

    @property
    def api_key(self) -> dict[str, str]: ...

    @property
    def api_key_prefix(self) -> dict[str, str]: ...

    @property
    def refresh_api_key_hook(self) -> RefreshHook | None: ...

    @property
    def ssl_ca_cert(self) -> str | None: ...

    @property
    def ca_cert_data(self) -> str | bytes | None: ...

    @property
    def cert_file(self) -> str | None: ...

    @property
    def key_file(self) -> str | None: ...

    @property
    def verify_ssl(self) -> bool: ...

    @property
    def tls_server_name(self) -> str | None: ...

    @property
    def proxy(self) -> str | None: ...


class Configuration:
    """Where the API server is and how to authenticate to it.

    ``api_key["authorization"]`` is the whole Authorization header (``Bearer T``). Client
    certificates are files (``cert_file``, ``key_file``) or PEM text (``cert_data``,
    ``key_data``, from ``*-data`` fields or a credential plugin), the CA a file
    (``ssl_ca_cert``) or PEM text (``ca_cert_data``); none set: the system's CAs."""

    def __init__(self, host: str = "http://localhost") -> None:
        self.host = host
        self.api_key: dict[str, str] = {}
        self.api_key_prefix: dict[str, str] = {}
        self.refresh_api_key_hook: RefreshHook | None = None
        self.ssl_ca_cert: str | None = None
        self.ca_cert_data: str | bytes | None = None
        self.cert_file: str | None = None
        self.key_file: str | None = None
        self.cert_data: str | None = None
        self.key_data: str | None = None
        self.verify_ssl = True
        self.tls_server_name: str | None = None
        self.proxy: str | None = None

    def __repr__(self) -> str:  # never the credentials
        return f"Configuration(host={self.host!r})"


async def authorization(configuration: ClientConfiguration) -> str | None:
    """The Authorization header for the next request (None: anonymous), after the
    configuration's refresh hook ran; as the kubernetes client computes it."""
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        result = hook(configuration)
        if inspect.isawaitable(result):
            await result
    keys, prefixes = configuration.api_key, configuration.api_key_prefix
    key = keys.get("BearerToken", keys.get("authorization"))
    if not key:
        return None
    prefix = prefixes.get("BearerToken", prefixes.get("authorization"))
    return f"{prefix} {key}" if prefix else key


def ssl_context(configuration: ClientConfiguration) -> ssl.SSLContext:
    """The TLS context for an ``https`` server: its CA (else the system's), the client
    certificate if any, no verification with ``verify_ssl`` false."""
    context = ssl.create_default_context(
        cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data or None
    )
    cert_data: str | None = getattr(configuration, "cert_data", None)
    key_data: str | None = getattr(configuration, "key_data", None)
    if cert_data:
        _load_cert_chain_from_text(context, cert_data, key_data)
    elif configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_cert_chain_from_text(context: ssl.SSLContext, cert: str, key: str | None) -> None:
    """ssl reads certificates from files only: write them to a private directory just long
    enough to load them."""
    with tempfile.TemporaryDirectory(prefix="nodesync-tls-") as private:
        cert_path = os.path.join(private, "cert.pem")
        key_path = os.path.join(private, "key.pem") if key else None
        for path, text in ((cert_path, cert), (key_path, key)):
            if path is not None and text is not None:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as handle:
                    handle.write(text)
        context.load_cert_chain(cert_path, keyfile=key_path)


async def kubeconfig_configuration(
    path: str, *, context: str | None = None, source: str = ""
) -> ClientConfiguration:
    """From a kubeconfig file (its current context unless ``context`` is given); ``path`` may
    list several files separated by ``:``, merged as kubectl merges them. The error names
    ``source`` (where ``path`` came from: ``--kubeconfig /x``) when given, else the path."""
    try:
        config = read_files(path)
        if _uses_auth_provider(config, context):
            return await _kubernetes_client_configuration(path, context)
        cfg = Configuration()
        await configure(config, context, cfg)
    except Exception as exc:  # YAML, I/O, missing keys, plugins: all mean "unusable"
        where = source or f"kubeconfig {path!r}"
        raise ConfigError(f"{where}: cannot load the kubeconfig: {_one_line(exc)}") from exc
    return cfg


def _one_line(exc: BaseException) -> str:
    """``exc`` in one line: the system's words for an I/O error (``no such file or
    directory``), YAML's multi-line messages joined."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return " ".join(str(exc).split()) or type(exc).__name__


async def _kubernetes_client_configuration(path: str, context: str | None) -> ClientConfiguration:
    """An ``auth-provider`` user (oidc, gcp, azure), which only the kubernetes client reads."""
    from kubernetes.aio.client import Configuration as ClientPackageConfiguration
    from kubernetes.aio.config import kube_config

    cfg: ClientConfiguration = ClientPackageConfiguration()
    loader: Any = kube_config
    await loader.load_kube_config(
        config_file=path, context=context, client_configuration=cfg, persist_config=False
    )
    return cfg


def in_cluster_configuration(
    *,
    token_path: str = SERVICE_ACCOUNT_TOKEN,
    ca_path: str = SERVICE_ACCOUNT_CA,
    environ: Mapping[str, str] = os.environ,
) -> Configuration:
    """From the pod's service account: KUBERNETES_SERVICE_HOST/PORT, token and CA files.

    The token is read again every minute, so rotated (bound) service account tokens keep
    working."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    try:
        if not host or not port:
            raise KubeconfigError("KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set")
        with open(ca_path, encoding="utf-8") as handle:
            if not handle.read().strip():
                raise KubeconfigError(f"the CA file {ca_path} is empty")
        bracketed = f"[{host}]" if ":" in host or "%" in host else host  # IPv6
        cfg = Configuration(f"https://{bracketed}:{port}")
        cfg.ssl_ca_cert = ca_path
        token = TokenFile(token_path)
        token.refresh(cfg)
        cfg.refresh_api_key_hook = token.refresh
    except (KubeconfigError, OSError) as exc:
        raise ConfigError(f"not running in a cluster: {exc}") from exc
    return cfg


def token_configuration(
    host: str, token: str, *, ca_path: str | None = None, verify_ssl: bool = True
) -> Configuration:
    """From an explicit server URL and bearer token (tests, and tools outside a cluster)."""
    cfg = Configuration(host.rstrip("/"))
    cfg.api_key = {"authorization": f"Bearer {token}"}
    cfg.ssl_ca_cert = ca_path
    cfg.verify_ssl = verify_ssl
    return cfg


def kubeconfig_source(
    kubeconfig: str = "", environ: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """Which kubeconfig to read, as kubectl chooses it: ``--kubeconfig``, else ``$KUBECONFIG``
    (files separated by ``:``, merged), else ``~/.kube/config`` when it exists (``$HOME``);
    None: none, so in-cluster. Returns the path(s) and the words naming where they came from,
    for errors (``--kubeconfig /x``, ``KUBECONFIG=/a:/b``).

    Unlike kubectl, a ``$KUBECONFIG`` none of whose files exists is an error naming it rather
    than a silent fall-back: it is a mistake far more often than an intent."""
    environ = os.environ if environ is None else environ
    if kubeconfig:
        return kubeconfig, f"--kubeconfig {kubeconfig}"
    listed = environ.get("KUBECONFIG", "")
    if any(listed.split(os.pathsep)):
        return listed, f"KUBECONFIG={listed}"
    home = environ.get("HOME", "")
    if home:
        path = os.path.join(home, ".kube", "config")
        if os.path.exists(path):
            return path, f"{path} (~/.kube/config)"
    return None


async def load_configuration(
    kubeconfig: str = "",
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClientConfiguration:
    """The configuration the CLI asks for, resolved as kubectl does (:func:`kubeconfig_source`):
    ``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``, else the pod's service account.
    ``context`` (``--context``) picks a context of the kubeconfig; without a kubeconfig it is
    an error. Every ConfigError is one line naming the flag or variable it comes from."""
    source = kubeconfig_source(kubeconfig, environ)
    if source is not None:
        path, where = source
        return await kubeconfig_configuration(path, context=context or None, source=where)
    if context:
        raise ConfigError(
            f"--context {context}: no kubeconfig to take it from (no --kubeconfig, no "
            "$KUBECONFIG, no ~/.kube/config)"
        )
    try:
        return in_cluster_configuration(environ=os.environ if environ is None else environ)
    except ConfigError as exc:
        raise ConfigError(
            f"no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and {exc}"
        ) from exc
