"""``nodesync plan`` and the webhook agree on every delivery of the corpus (tests/model/
payload_corpus.py): the webhook answers 200 exactly when plan judges the payload (exit 0), and
for a 400 plan prints the webhook's message as one line (exit 2), no traceback. A delivery with
invalid names is accepted by both, and each alert is refused as plan says the controller's
intake refuses it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.commandline import parse_settings
from exporter.controller.keys import CLUSTER
from exporter.controller.plan_command import run
from exporter.controller.settings import ControllerSettings, PlanSettings
from exporter.settings.server import ServerSettings
from nodesync_sim.fake.apiserver import APIServer
from tests.controller.served_hook import ServedHook, intake, served_hook
from tests.controller.test_webhook_hardening import _post
from tests.controller.webhook_support import hook_settings
from tests.model.payload_corpus import AM_BODY, INVALID, NAMES, RAW, body
from tests.support.wait import until_async


def corpus() -> list[tuple[str, bytes]]:
    entries = [("alertmanager 0.25", json.dumps(AM_BODY).encode())]
    for name, mutate, _ in INVALID:
        b = body()
        mutate(b)
        entries.append((name, json.dumps(b).encode()))
    entries += [(name, data) for name, data, _ in RAW]
    entries += [(name, data) for name, data, _ in NAMES]
    return entries


async def plan(
    data: bytes, tmp_path: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    payload = tmp_path / "payload.json"
    payload.write_bytes(data)
    argv = ["--payload", str(payload), "--kubeconfig", str(kubeconfig), "--output", "json"]
    settings = parse_settings(PlanSettings, argv, {}, prog="nodesync plan")
    code = await run(settings)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.timeout(180)
async def test_plan_and_the_webhook_agree_on_the_corpus(
    settings: ControllerSettings,
    server: APIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig = server.write_kubeconfig(tmp_path / "plan-kubeconfig")
    reasons: dict[str, list[str]] = {}
    async with served_hook(settings, hook_settings(tmp_path), ServerSettings()) as hook:
        for name, data in corpus():
            status, _, answer = await _post(hook, data, None)
            code, out, err = await plan(data, tmp_path, kubeconfig, capsys)
            where = f"{name}: webhook {status} {answer}, plan {code} {err!r}"
            assert status in (200, 400), where
            if status == 400:
                assert code == 2, where
                assert err == f"nodesync plan: cannot read the payload: {answer['error']}\n", where
                assert out == "", where
            else:
                assert code == 0, where
                report: dict[str, Any] = json.loads(out)
                assert len(report["alerts"]) == answer["alerts"], where
                reasons[name] = [a.get("reason", a["decision"]) for a in report["alerts"]]
        await _decided_alike(hook, reasons)


async def _decided_alike(hook: ServedHook, planned: dict[str, list[str]]) -> None:
    """The intake refuses each alert of the name deliveries as plan said."""

    async def synced() -> bool:
        return bool(hook.served.runner.app[CLUSTER].synced)

    await until_async(synced, timeout=15.0, what="the cluster view")
    await intake(hook).run_once()
    decided = {d.alert_key[0]: d.reason for d in await hook.journal.decisions()}
    for name, data, expected in NAMES:
        assert planned[name] == expected, name
        fingerprints = [a["fingerprint"] for a in json.loads(data)["alerts"]]
        assert [decided[f] for f in fingerprints] == expected, name
