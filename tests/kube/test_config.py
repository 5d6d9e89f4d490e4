"""Client configuration: kubeconfig file, in-cluster service account, explicit host + token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.kube import resources
from exporter.kube.api import KubeAPI
from exporter.kube.config import (
    ConfigError,
    authorization,
    in_cluster_configuration,
    kubeconfig_configuration,
    load_configuration,
    token_configuration,
)
from exporter.kube.errors import Unauthorized
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.server import kubeconfig_document


async def test_kubeconfig_file_reaches_the_server(server: APIServer, tmp_path: Path) -> None:
    server.store.create("nodes", {"metadata": {"name": "node-a"}})
    path = server.write_kubeconfig(tmp_path / "kubeconfig")
    async with KubeAPI(await load_configuration(str(path))) as api:
        page = await api.list(resources.NODES)
    assert [n["metadata"]["name"] for n in page.items] == ["node-a"]


async def test_kubeconfig_context_is_honoured(server: APIServer, tmp_path: Path) -> None:
    doc = kubeconfig_document(server.url, server.token)
    doc["users"].append({"name": "stale", "user": {"token": "not-a-valid-token"}})
    doc["contexts"].append(
        {"name": "stale", "context": {"cluster": "nodesync-sim", "user": "stale"}}
    )
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))
    async with KubeAPI(await kubeconfig_configuration(str(path), context="stale")) as api:
        with pytest.raises(Unauthorized):
            await api.list(resources.NODES)
    async with KubeAPI(await kubeconfig_configuration(str(path))) as api:
        assert (await api.list(resources.NODES)).items == []


@pytest.mark.parametrize(
    "content",
    [pytest.param(None, id="missing"), pytest.param("clusters: [", id="not-yaml")],
)
async def test_unusable_kubeconfig_is_a_config_error(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError):
        await load_configuration(str(path))


async def test_in_cluster_reads_the_service_account(tmp_path: Path) -> None:
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = in_cluster_configuration(token_path=str(token), ca_path=str(ca), environ=env)
    assert cfg.host == "https://[fd00::1]:443"
    assert cfg.ssl_ca_cert == str(ca)
    assert await authorization(cfg) == "Bearer sa-token"


@pytest.mark.parametrize(
    ("env", "write_token"),
    [
        pytest.param({}, True, id="no-service-env"),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
            False,
            id="no-token",
        ),
    ],
)
def test_not_in_a_cluster_is_a_config_error(
    tmp_path: Path, env: dict[str, str], write_token: bool
) -> None:
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    if write_token:
        token.write_text("t")
    ca.write_text("x")
    with pytest.raises(ConfigError):
        in_cluster_configuration(token_path=str(token), ca_path=str(ca), environ=env)


async def test_empty_kubeconfig_means_in_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="not running in a cluster"):
        await load_configuration("", environ={})


async def test_token_configuration(server: APIServer) -> None:
    async with KubeAPI(token_configuration(server.url + "/", server.token)) as api:
        assert (await api.list(resources.NODES)).items == []
    async with KubeAPI(token_configuration(server.url, "wrong")) as api:
        with pytest.raises(Unauthorized):
            await api.list(resources.NODES)
