"""Client configuration for the API server: a kubeconfig file, in-cluster, or host + token.

The CLI owns the flags (``--kubeconfig``; empty means in-cluster) and passes the values here.
Every function returns a ``kubernetes.aio`` Configuration for :class:`exporter.kube.api.KubeAPI`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kubernetes.aio.config import incluster_config as _incluster_config
from kubernetes.aio.config import kube_config as _kube_config
from kubernetes.aio.config.config_exception import ConfigException

if TYPE_CHECKING:
    from kubernetes.aio.client import Configuration

# The loaders are untyped: use them through Any.
incluster_config: Any = _incluster_config
kube_config: Any = _kube_config

SERVICE_ACCOUNT_TOKEN = incluster_config.SERVICE_TOKEN_FILENAME
SERVICE_ACCOUNT_CA = incluster_config.SERVICE_CERT_FILENAME


class ConfigError(Exception):
    """The client cannot be configured (no kubeconfig, not in a cluster, unreadable files)."""


def _new() -> Configuration:
    from kubernetes.aio.client import Configuration

    return Configuration()


async def kubeconfig_configuration(path: str, *, context: str | None = None) -> Configuration:
    """From a kubeconfig file (its current context unless ``context`` is given)."""
    cfg = _new()
    try:
        await kube_config.load_kube_config(
            config_file=path, context=context, client_configuration=cfg, persist_config=False
        )
    except Exception as exc:  # YAML, I/O, missing keys, exec plugins: all mean "unusable"
        raise ConfigError(f"cannot load kubeconfig {path!r}: {exc}") from exc
    return cfg


def in_cluster_configuration(
    *,
    token_path: str = SERVICE_ACCOUNT_TOKEN,
    ca_path: str = SERVICE_ACCOUNT_CA,
    environ: Mapping[str, str] = os.environ,
) -> Configuration:
    """From the pod's service account: KUBERNETES_SERVICE_HOST/PORT, token and CA files.

    The token is re-read periodically, so rotated (bound) service account tokens keep working.
    """
    cfg = _new()
    loader = incluster_config.InClusterConfigLoader(
        token_filename=token_path, cert_filename=ca_path, try_refresh_token=True, environ=environ
    )
    try:
        loader.load_and_set(cfg)
    except (ConfigException, OSError) as exc:
        raise ConfigError(f"not running in a cluster: {exc}") from exc
    return cfg


def token_configuration(
    host: str, token: str, *, ca_path: str | None = None, verify_ssl: bool = True
) -> Configuration:
    """From an explicit server URL and bearer token (tests, and tools outside a cluster)."""
    cfg = _new()
    cfg.host = host.rstrip("/")
    cfg.api_key = {"authorization": f"Bearer {token}"}
    cfg.ssl_ca_cert = ca_path
    cfg.verify_ssl = verify_ssl
    return cfg


async def load_configuration(kubeconfig: str = "", *, context: str | None = None) -> Configuration:
    """The configuration the CLI asks for: ``kubeconfig`` when set, else in-cluster."""
    if kubeconfig:
        return await kubeconfig_configuration(kubeconfig, context=context)
    return in_cluster_configuration()
