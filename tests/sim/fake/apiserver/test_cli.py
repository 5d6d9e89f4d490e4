"""`nodesync sim apiserver`: serves, writes a kubeconfig the real client loads, stops cleanly."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest
from kubernetes.aio import client as aio_client
from kubernetes.aio import config as aio_config

from exporter.commandline import add_settings
from nodesync_sim.fake.apiserver import cli
from nodesync_sim.settings import APIServerSettings
from tests.support.wait import until_async


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_settings(parser, {}, [APIServerSettings])
    return parser


def test_listen_address_parsing() -> None:
    parser = _parser()
    args = parser.parse_args(["--web.listen-address", "127.0.0.1:7443", "--token", "T"])
    assert args.web_listen_address == ("127.0.0.1", 7443)
    assert args.token == "T"
    with pytest.raises(SystemExit):
        parser.parse_args(["--web.listen-address", "nope"])


async def test_run_serves_until_cancelled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = _parser()
    kubeconfig = tmp_path / "kubeconfig"
    args = parser.parse_args(
        ["--web.listen-address", "127.0.0.1:0", "--token", "T", "--kubeconfig", str(kubeconfig)]
    )
    task = asyncio.create_task(cli.run(args))
    try:
        await until_async(kubeconfig.exists, timeout=10, what="the kubeconfig written")
        doc = json.loads(kubeconfig.read_text())
        assert doc["users"][0]["user"]["token"] == "T"
        cfg = aio_client.Configuration()
        await aio_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        async with aio_client.ApiClient(cfg) as api:
            namespaces = await aio_client.CoreV1Api(api).list_namespace()
        assert "default" in {ns.metadata.name for ns in namespaces.items}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert f"kubeconfig: {kubeconfig}" in capsys.readouterr().out
