"""Which kubeconfig the commands read, as kubectl chooses it: ``--kubeconfig``, then
``$KUBECONFIG`` (``:``-separated, merged), then ``~/.kube/config``, then in-cluster; ``--context``
picks a context. ``HOME`` and ``KUBECONFIG`` point at the test's directories."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from exporter.kube import resources
from exporter.kube.api import KubeAPI
from exporter.kube.config import ConfigError, kubeconfig_source, load_configuration
from exporter.kube.errors import Unauthorized
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.server import kubeconfig_document
from tests.controller.alert_builders import body
from tests.test_cli_errors import DEADLINE, clean_environment


@pytest.fixture
async def server() -> AsyncIterator[APIServer]:
    async with APIServer() as srv:
        srv.store.create("nodes", {"metadata": {"name": "node-a"}})
        yield srv


def with_stale_context(server: APIServer) -> dict[str, Any]:
    """The server's kubeconfig, plus a context ``stale`` whose user's token is refused."""
    doc = kubeconfig_document(server.url, server.token)
    doc["users"].append({"name": "stale", "user": {"token": "not-a-valid-token"}})
    doc["contexts"].append(
        {"name": "stale", "context": {"cluster": "nodesync-sim", "user": "stale"}}
    )
    return doc


def write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


async def node_names(configuration: Any) -> list[str]:
    async with KubeAPI(configuration) as api:
        return [n["metadata"]["name"] for n in (await api.list(resources.NODES)).items]


def test_the_flag_wins_then_the_variable_then_the_home_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home_file = write(home / ".kube" / "config", {})
    environ = {"HOME": str(home), "KUBECONFIG": "/a:/b"}
    assert kubeconfig_source("/x", environ) == ("/x", "--kubeconfig /x")
    assert kubeconfig_source("", environ) == ("/a:/b", "KUBECONFIG=/a:/b")
    assert kubeconfig_source("", {"HOME": str(home), "KUBECONFIG": "::"}) == (
        str(home_file),
        f"{home_file} (~/.kube/config)",
    )
    assert kubeconfig_source("", {"HOME": str(tmp_path / "elsewhere")}) is None
    assert kubeconfig_source("", {}) is None


async def test_kubeconfig_variable_files_are_merged(server: APIServer, tmp_path: Path) -> None:
    doc = kubeconfig_document(server.url, server.token)
    contexts = write(
        tmp_path / "contexts", {"contexts": doc["contexts"], "current-context": "nodesync-sim"}
    )
    credentials = write(
        tmp_path / "credentials",
        {"clusters": doc["clusters"], "users": doc["users"], "current-context": "ignored"},
    )
    listed = f"{contexts}:{tmp_path / 'absent'}:{credentials}"
    configuration = await load_configuration("", environ={"KUBECONFIG": listed})
    assert await node_names(configuration) == ["node-a"]


async def test_home_kubeconfig_and_context(server: APIServer, tmp_path: Path) -> None:
    write(tmp_path / ".kube" / "config", with_stale_context(server))
    environ = {"HOME": str(tmp_path)}
    assert await node_names(await load_configuration("", environ=environ)) == ["node-a"]
    stale = await load_configuration("", context="stale", environ=environ)
    with pytest.raises(Unauthorized):
        await node_names(stale)


async def test_the_flag_overrides_the_variable(server: APIServer, tmp_path: Path) -> None:
    good = server.write_kubeconfig(tmp_path / "good")
    environ = {"KUBECONFIG": str(tmp_path / "absent"), "HOME": str(tmp_path)}
    assert await node_names(await load_configuration(str(good), environ=environ)) == ["node-a"]


async def test_without_any_kubeconfig_a_context_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--context prod: no kubeconfig to take it from"):
        await load_configuration("", context="prod", environ={"HOME": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"no kubeconfig .* and not running in a cluster"):
        await load_configuration("", environ={"HOME": str(tmp_path)})


async def test_an_unknown_context_names_where_the_kubeconfig_came_from(
    server: APIServer, tmp_path: Path
) -> None:
    path = server.write_kubeconfig(tmp_path / "config")
    with pytest.raises(ConfigError, match=f"^KUBECONFIG={path}: .*no context named 'prod'"):
        await load_configuration("", context="prod", environ={"KUBECONFIG": str(path)})


async def plan(argv: list[str], environ: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "exporter",
        "plan",
        *argv,
        env=environ,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), DEADLINE)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("where", ["home", "variable"])
async def test_plan_reads_the_kubeconfig_kubectl_would(
    server: APIServer, tmp_path: Path, where: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    payload = write(tmp_path / "payload.json", body())
    if where == "home":
        write(home / ".kube" / "config", with_stale_context(server))
        environ = clean_environment(home)
    else:
        # The home file exists but the variable wins, as with kubectl.
        write(home / ".kube" / "config", {"current-context": "nowhere"})
        listed = os.pathsep.join(
            [str(write(tmp_path / "a", {})), str(write(tmp_path / "b", with_stale_context(server)))]
        )
        environ = clean_environment(home, KUBECONFIG=listed)
    code, out, err = await plan(["--payload", str(payload)], environ)
    assert code == 0, err
    assert "Nothing was changed" in out
    code, _, err = await plan(["--payload", str(payload), "--context", "stale"], environ)
    assert code == 1, err
    assert "cannot read the cluster" in err
    assert "Traceback" not in err
