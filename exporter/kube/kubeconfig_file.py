"""A kubeconfig file and a credential plugin's ExecCredential as msgspec structs: the fields
exporter.kube.kubeconfig reads, unknown fields ignored (kubectl's preferences, impersonation,
extensions), ``null`` read as absent. A field of another type is refused with its JSON path
(``$.clusters[0].cluster.server: expected `str | null`, got `int```)."""

from __future__ import annotations

from typing import Any

import msgspec


class _Part(msgspec.Struct, frozen=True, kw_only=True, rename="kebab"):
    """Keys as kubeconfig writes them: ``certificate-authority-data``."""


class _CamelPart(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Keys as the client.authentication.k8s.io API writes them: ``apiVersion``."""


class NamedExtension(_Part, frozen=True):
    name: str = ""
    extension: Any = None


class Cluster(_Part, frozen=True):
    server: str | None = None
    certificate_authority_data: str | None = None
    certificate_authority: str | None = None
    insecure_skip_tls_verify: bool | None = None
    tls_server_name: str | None = None
    proxy_url: str | None = None
    extensions: list[NamedExtension] | None = None


class ExecEnvVar(_CamelPart, frozen=True):
    name: str
    value: str | None = None


class ExecConfig(_CamelPart, frozen=True):
    """A user's credential plugin (client-go's ExecConfig)."""

    api_version: str | None = None
    command: str | None = None
    args: list[str] | None = None
    env: list[ExecEnvVar] | None = None
    install_hint: str | None = None
    provide_cluster_info: bool | None = None


class User(_Part, frozen=True):
    client_certificate_data: str | None = None
    client_certificate: str | None = None
    client_key_data: str | None = None
    client_key: str | None = None
    token: str | None = None
    token_file: str | None = msgspec.field(default=None, name="tokenFile")
    username: str | None = None
    password: str | None = None
    exec: ExecConfig | None = None
    auth_provider: dict[str, Any] | None = None


class Context(_Part, frozen=True):
    cluster: str | None = None
    user: str | None = None


class NamedCluster(_Part, frozen=True):
    name: str
    cluster: Cluster | None = None


class NamedContext(_Part, frozen=True):
    name: str
    context: Context | None = None


class NamedUser(_Part, frozen=True):
    name: str
    user: User | None = None


class KubeconfigFile(_Part, frozen=True):
    clusters: list[NamedCluster] | None = None
    contexts: list[NamedContext] | None = None
    users: list[NamedUser] | None = None
    current_context: str | None = None


class ExecCredentialStatus(_CamelPart, frozen=True):
    token: str | None = None
    client_certificate_data: str | None = None
    client_key_data: str | None = None
    expiration_timestamp: str | None = None


class ExecCredential(_CamelPart, frozen=True):
    """What a credential plugin prints."""

    kind: str | None = None
    api_version: str | None = None
    status: ExecCredentialStatus | None = None
