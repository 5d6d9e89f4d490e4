"""A kubeconfig read as kubectl reads it, without the kubernetes client package: merged files,
relative paths, every kind of credential (token, token file, basic, client certificate, a
credential plugin), TLS with a private CA and tls-server-name, and the auth-provider users that
are still handed to the kubernetes client."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.kube import resources
from exporter.kube.api import KubeAPI
from exporter.kube.config import (
    ConfigError,
    Configuration,
    authorization,
    kubeconfig_configuration,
)
from exporter.kube.errors import Unauthorized, Unreachable
from exporter.kube.kubeconfig import TokenFile
from exporter.model.rfc3339 import format_time
from nodesync_sim.fake.apiserver import APIServer

ServerFactory = Callable[..., Awaitable[TestServer]]


def kubeconfig(
    server: str,
    user: dict[str, Any] | None = None,
    *,
    cluster: dict[str, Any] | None = None,
    name: str = "here",
    current: str | None = "here",
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, **(cluster or {})}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "users": [{"name": name, "user": user or {}}],
    }
    if current is not None:
        document["current-context"] = current
    return document


def write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


async def lists_nodes(cfg: Any) -> bool:
    async with KubeAPI(cfg) as api:
        return (await api.list(resources.NODES)).items == []


# ------------------------------------------------------------------ files and contexts


async def test_files_merge_as_kubectl_merges_them(server: APIServer, tmp_path: Path) -> None:
    """The first file naming an entry wins, and the first current-context; a missing file in
    a list is skipped."""
    first = write(tmp_path / "a" / "config", kubeconfig(server.url, {"token": server.token}))
    shadowed = kubeconfig("http://127.0.0.1:1", {"token": "wrong"}, current="other")
    shadowed["contexts"].append({"name": "other", "context": {"cluster": "here"}})
    second = write(tmp_path / "b" / "config", shadowed)
    listed = f"{tmp_path / 'missing'}:{first}:{second}"
    cfg = await kubeconfig_configuration(listed)
    assert cfg.host == server.url
    assert await lists_nodes(cfg)
    anonymous = await kubeconfig_configuration(listed, context="other")
    assert await authorization(anonymous) is None  # a context without a user
    with pytest.raises(ConfigError, match="none of the kubeconfig files exists"):
        await kubeconfig_configuration(f"{tmp_path / 'x'}:{tmp_path / 'y'}")
    with pytest.raises(ConfigError):
        await kubeconfig_configuration(str(tmp_path / "missing"))


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(kubeconfig("http://h", current=None), "no current-context", id="no-context"),
        pytest.param(
            {**kubeconfig("http://h"), "current-context": "elsewhere"},
            "no context named 'elsewhere'",
            id="unknown-context",
        ),
        pytest.param(
            {**kubeconfig("http://h"), "users": []}, "no user named 'here'", id="unknown-user"
        ),
        pytest.param(kubeconfig(""), "server is missing", id="no-server"),
        pytest.param(
            kubeconfig("https://h", cluster={"certificate-authority-data": "%%%"}),
            "not base64",
            id="bad-ca-data",
        ),
        pytest.param(
            kubeconfig("https://h", {"client-certificate": "nowhere.crt"}),
            "nowhere.crt does not exist",
            id="missing-cert-file",
        ),
        pytest.param(
            {"apiVersion": "v1", "clusters": "not a list"},
            r"not a kubeconfig: \$\.clusters: expected `array \| null`, got `str`",
            id="malformed",
        ),
        pytest.param(
            {**kubeconfig("http://h"), "users": [{"user": {"token": "t"}}]},
            r"\$\.users\[0\]\.name: missing",
            id="an entry without a name",
        ),
        pytest.param(
            kubeconfig("http://h", {"exec": {"command": "x", "args": ["a", 1]}}),
            r"\$\.users\[0\]\.user\.exec\.args\[1\]: expected `str`, got `int`",
            id="an exec argument that is no string",
        ),
    ],
)
async def test_unusable_kubeconfigs_are_config_errors(
    tmp_path: Path, document: dict[str, Any], message: str
) -> None:
    path = write(tmp_path / "config", document)
    with pytest.raises(ConfigError, match=message):
        await kubeconfig_configuration(str(path))


async def test_cluster_fields(tmp_path: Path) -> None:
    document = kubeconfig(
        "https://h.example:6443/",
        cluster={
            "insecure-skip-tls-verify": True,
            "tls-server-name": "api.internal",
            "proxy-url": "http://proxy:3128",
        },
    )
    cfg = await kubeconfig_configuration(str(write(tmp_path / "config", document)))
    assert cfg.host == "https://h.example:6443"
    assert cfg.verify_ssl is False
    assert cfg.tls_server_name == "api.internal"
    assert cfg.proxy == "http://proxy:3128"


# ------------------------------------------------------------------ credentials


async def test_token_file_is_relative_to_its_kubeconfig_and_read_again(
    server: APIServer, tmp_path: Path
) -> None:
    (tmp_path / "secrets").mkdir()
    token = tmp_path / "secrets" / "token"
    token.write_text(server.token + "\n")
    path = write(tmp_path / "config", kubeconfig(server.url, {"tokenFile": "secrets/token"}))
    cfg = await kubeconfig_configuration(str(path))
    assert await authorization(cfg) == f"Bearer {server.token}"
    assert await lists_nodes(cfg)

    reader = TokenFile(str(token), reread_seconds=0)  # what the hook does once a minute
    target = Configuration()
    reader.refresh(target)
    token.write_text("rotated")
    reader.refresh(target)
    assert target.api_key["authorization"] == "Bearer rotated"
    token.unlink()  # gone for a moment while it is rotated: the last token is kept
    reader.refresh(target)
    assert target.api_key["authorization"] == "Bearer rotated"


async def test_token_wins_over_token_file_and_basic_auth_is_a_header(tmp_path: Path) -> None:
    both = {"token": "inline", "tokenFile": "does-not-matter"}
    cfg = await kubeconfig_configuration(str(write(tmp_path / "a", kubeconfig("http://h", both))))
    assert await authorization(cfg) == "Bearer inline"
    basic = {"username": "admin", "password": "s3cret"}
    cfg = await kubeconfig_configuration(str(write(tmp_path / "b", kubeconfig("http://h", basic))))
    assert await authorization(cfg) == "Basic " + base64.b64encode(b"admin:s3cret").decode()


def _plugin(tmp_path: Path, *, expires_in: float | None, fail: bool = False) -> Path:
    """A credential plugin: prints an ExecCredential whose token counts its runs; records the
    KUBERNETES_EXEC_INFO and an env variable it was given."""
    script = tmp_path / "bin" / "plugin.py"
    script.parent.mkdir(exist_ok=True)
    expiry = "" if expires_in is None else format_time(time.time() + expires_in)
    script.write_text(
        "import json, os, pathlib, sys\n"
        f"if {fail!r}:\n"
        "    sys.exit('no credentials today')\n"
        "runs = pathlib.Path(__file__).with_name('runs')\n"
        "n = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(n))\n"
        "pathlib.Path(__file__).with_name('info').write_text(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "status = {'token': os.environ['TOKEN_PREFIX'] + str(n)}\n"
        f"if {expiry!r}:\n"
        f"    status['expirationTimestamp'] = {expiry!r}\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1',\n"
        "                  'kind': 'ExecCredential', 'status': status}))\n"
    )
    return script


def _exec_user(script: Path) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script)],
            "env": [{"name": "TOKEN_PREFIX", "value": "tok-"}],
            "provideClusterInfo": True,
            "interactiveMode": "Never",
        }
    }


async def test_exec_plugin_credential_is_used_until_it_expires(tmp_path: Path) -> None:
    script = _plugin(tmp_path, expires_in=5)  # within the renewal margin: renewed every time
    path = write(tmp_path / "config", kubeconfig("http://h", _exec_user(script)))
    cfg = await kubeconfig_configuration(str(path))
    assert await authorization(cfg) == "Bearer tok-2"  # fetched at load, and renewed here
    assert await authorization(cfg) == "Bearer tok-3"
    info = json.loads((script.parent / "info").read_text())
    assert info["kind"] == "ExecCredential"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == "http://h"


async def test_exec_plugin_credential_without_expiry_is_fetched_once(tmp_path: Path) -> None:
    script = _plugin(tmp_path, expires_in=None)
    async with APIServer(token="tok-1") as srv:
        path = write(tmp_path / "config", kubeconfig(srv.url, _exec_user(script)))
        cfg = await kubeconfig_configuration(str(path))
        assert await lists_nodes(cfg)
        assert await lists_nodes(cfg)
    assert (script.parent / "runs").read_text() == "1"


async def test_a_failing_exec_plugin_fails_the_configuration(tmp_path: Path) -> None:
    script = _plugin(tmp_path, expires_in=None, fail=True)
    path = write(tmp_path / "config", kubeconfig("http://h", _exec_user(script)))
    with pytest.raises(ConfigError, match="no credentials today"):
        await kubeconfig_configuration(str(path))
    missing = {"exec": {**_exec_user(script)["exec"], "command": "./bin/nope", "args": []}}
    missing["exec"]["installHint"] = "install nope"
    path = write(tmp_path / "config", kubeconfig("http://h", missing))
    with pytest.raises(ConfigError, match=r"bin/nope.*install nope"):
        await kubeconfig_configuration(str(path))


async def test_auth_provider_users_are_read_by_the_kubernetes_client(tmp_path: Path) -> None:
    """oidc with an id-token that is still valid: the kubernetes client's loader reads it, and
    KubeAPI takes its configuration."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    jwt = f"{part({'alg': 'none'})}.{part({'exp': int(time.time()) + 3600})}.sig"
    async with APIServer(token=jwt) as srv:
        user = {
            "auth-provider": {
                "name": "oidc",
                "config": {"client-id": "c", "idp-issuer-url": "https://idp", "id-token": jwt},
            }
        }
        cfg = await kubeconfig_configuration(
            str(write(tmp_path / "config", kubeconfig(srv.url, user)))
        )
        assert not isinstance(cfg, Configuration)
        assert await lists_nodes(cfg)


# ------------------------------------------------------------------ TLS


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for ``api.test`` and a client certificate for ``agent``."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "ca.key"),
             "-out", str(d / "ca.crt"), "-days", "2", "-subj", "/CN=nodesync-test-ca")  # fmt: skip
    for name, ext in (
        ("server", "subjectAltName=DNS:api.test\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        subject = "/CN=api.test" if name == "server" else "/CN=agent"
        (d / f"{name}.ext").write_text(ext)
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / f"{name}.key"),
                 "-out", str(d / f"{name}.csr"), "-subj", subject)  # fmt: skip
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"),
                 "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2",
                 "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.crt"))  # fmt: skip
    return d


@pytest.fixture
async def tls_server(pki: Path, aiohttp_server: ServerFactory) -> TestServer:
    """An HTTPS server for ``api.test`` that requires a client certificate from the CA and
    answers a NodeList naming the client."""

    async def nodes(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(pair[0] for pair in (peer or {}).get("subject", ()))
        item = {"metadata": {"name": subject.get("commonName", "anonymous")}}
        return web.json_response({"metadata": {"resourceVersion": "1"}, "items": [item]})

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
    app = web.Application()
    app.router.add_get("/api/v1/nodes", nodes)
    return await aiohttp_server(app, ssl=context)


def _data(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


@pytest.mark.parametrize("inline", [pytest.param(True, id="data"), pytest.param(False, id="files")])
async def test_tls_with_a_private_ca_a_server_name_and_a_client_certificate(
    pki: Path, tls_server: TestServer, tmp_path: Path, inline: bool
) -> None:
    url = f"https://127.0.0.1:{tls_server.port}"
    if inline:
        cluster = {"certificate-authority-data": _data(pki / "ca.crt")}
        user = {
            "client-certificate-data": _data(pki / "client.crt"),
            "client-key-data": _data(pki / "client.key"),
        }
    else:
        cluster = {"certificate-authority": str(pki / "ca.crt")}
        user = {
            "client-certificate": str(pki / "client.crt"),
            "client-key": str(pki / "client.key"),
        }
    cluster["tls-server-name"] = "api.test"  # the certificate is not for 127.0.0.1
    path = write(tmp_path / "config", kubeconfig(url, user, cluster=cluster))
    async with KubeAPI(await kubeconfig_configuration(str(path))) as api:
        page = await api.list(resources.NODES)
    assert [i["metadata"]["name"] for i in page.items] == ["agent"]


async def test_tls_refuses_a_server_its_ca_did_not_sign(
    pki: Path, tls_server: TestServer, tmp_path: Path
) -> None:
    url = f"https://127.0.0.1:{tls_server.port}"
    user = {"client-certificate": str(pki / "client.crt"), "client-key": str(pki / "client.key")}
    path = write(
        tmp_path / "config", kubeconfig(url, user, cluster={"tls-server-name": "api.test"})
    )
    async with KubeAPI(await kubeconfig_configuration(str(path))) as api:  # the system's CAs
        with pytest.raises(Unreachable, match="certificate verify failed"):
            await api.list(resources.NODES)


async def test_a_wrong_token_is_unauthorized(server: APIServer, tmp_path: Path) -> None:
    path = write(tmp_path / "config", kubeconfig(server.url, {"token": "wrong"}))
    async with KubeAPI(await kubeconfig_configuration(str(path))) as api:
        with pytest.raises(Unauthorized):
            await api.list(resources.NODES)
