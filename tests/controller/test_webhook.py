"""POST /alerts on the controller (with the test API server behind it): alerts recorded once per
key before the 200, every refusal a JSON 4xx with nothing recorded, journal failures a 5xx that
a retry gets past, the executor woken, and the webhook's metrics."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.controller.journal import Journal, RecordResult
from exporter.controller.keys import SCHEDULE
from exporter.controller.settings import ControllerSettings, WebhookSettings
from exporter.controller.webhook import WebhookConfigError
from exporter.controller.wiring import webhook_extension
from exporter.model.payload import MAX_ALERTS
from tests.controller.alert_builders import alert, body, payload
from tests.controller.builders import T0
from tests.controller.conftest import AiohttpClient, Client, scrape
from tests.controller.webhook_support import (
    AUTH,
    TOKEN,
    assert_nothing_recorded,
    hook_settings,
    journal,
    post,
    start_hook,
)
from tests.metrics.exposition import labels, series
from tests.support.wait import until_async


@pytest.fixture
def webhook(tmp_path: Path) -> WebhookSettings:
    return hook_settings(tmp_path, max_body_bytes=64 * 1024)


@pytest.fixture
async def hook(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, webhook: WebhookSettings
) -> Client:
    return await start_hook(aiohttp_client, settings, webhook)


async def metric(client: Client, name: str, **lbls: str) -> float | None:
    return series(await scrape(client), name).get(labels(**lbls))


async def test_a_delivery_is_on_disk_when_answered(hook: Client, webhook: WebhookSettings) -> None:
    a = alert("aaaa")
    response = await post(hook, body(a, truncated=0))
    assert response.status == 200
    assert await response.json() == {
        "status": "recorded",
        "alerts": 1,
        "new": 1,
        "duplicates": 0,
        "resolved": 0,
        "truncated": 0,
    }
    # committed: another connection to the file sees it
    with sqlite3.connect(webhook.journal_path) as conn:
        assert conn.execute("SELECT fingerprint, status FROM alerts").fetchall() == [
            ("aaaa", "firing")
        ]
    conn.close()
    record = await journal(hook).alert(a.key)
    assert record is not None
    assert record.alert.labels == a.labels
    assert hook.app[SCHEDULE].tripped
    assert await metric(hook, "nodesync_alerts_received_total", status="firing") == 1.0
    assert await metric(hook, "nodesync_webhook_requests_total", code="200") == 1.0
    assert await metric(hook, "nodesync_webhook_request_duration_seconds_count") == 1.0
    assert await metric(hook, "nodesync_journal_alerts", status="firing") == 1.0
    assert await metric(hook, "nodesync_journal_deliveries") == 1.0


async def test_a_resend_an_ha_duplicate_and_a_retry_record_the_alert_once(hook: Client) -> None:
    group = body(alert("aaaa"))
    answers = []
    for _ in range(3):  # the next group flush, the HA peer, Alertmanager's retry
        response = await post(hook, group)
        assert response.status == 200
        answers.append(await response.json())
        hook.app[SCHEDULE].clear()
    assert [(a["new"], a["duplicates"]) for a in answers] == [(1, 0), (0, 1), (0, 1)]
    assert not hook.app[SCHEDULE].tripped  # duplicates wake nobody
    counts = await journal(hook).counts()
    assert (counts.alerts["firing"], counts.deliveries) == (1, 3)
    assert len(await journal(hook).alerts_to_decide()) == 1
    assert await metric(hook, "nodesync_alerts_received_total", status="firing") == 1.0
    assert await metric(hook, "nodesync_alert_duplicates_total") == 2.0


async def test_a_resolved_copy_resolves_the_alert(hook: Client) -> None:
    a = alert("aaaa")
    assert (await post(hook, body(a))).status == 200
    hook.app[SCHEDULE].clear()
    response = await post(hook, body(alert("aaaa", status="resolved", ends_at=T0 + 60)))
    assert response.status == 200
    assert (await response.json())["resolved"] == 1
    record = await journal(hook).alert(a.key)
    assert record is not None
    assert (record.status, record.ends_at) == ("resolved", T0 + 60)
    assert record.resolved_at is not None
    assert hook.app[SCHEDULE].tripped  # the executor may cancel a pending plan
    assert await metric(hook, "nodesync_alerts_received_total", status="resolved") == 1.0
    assert await metric(hook, "nodesync_journal_alerts", status="resolved") == 1.0


async def test_truncated_alerts_are_counted(hook: Client) -> None:
    response = await post(hook, body(alert("aaaa"), alert("bbbb"), truncated=7))
    assert response.status == 200
    assert (await response.json())["truncated"] == 7
    [delivery] = await journal(hook).deliveries()
    assert (delivery.alerts, delivery.truncated) == (2, 7)
    assert await metric(hook, "nodesync_alerts_truncated_total") == 7.0


@pytest.mark.parametrize(
    ("headers", "message", "challenge"),
    [
        ({}, "missing bearer token", "Bearer"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "missing bearer token", "Bearer"),
        ({"Authorization": "Bearer"}, "missing bearer token", "Bearer"),
        ({"Authorization": "Bearer nope"}, "invalid bearer token", 'Bearer error="invalid_token"'),
        (
            {"Authorization": f"Bearer {TOKEN}x"},
            "invalid bearer token",
            'Bearer error="invalid_token"',
        ),
        (
            {"Authorization": f"Bearer {TOKEN[:-1]}"},
            "invalid bearer token",
            'Bearer error="invalid_token"',
        ),
    ],
)
async def test_without_the_token_nothing_is_recorded(
    hook: Client, headers: dict[str, str], message: str, challenge: str
) -> None:
    response = await post(hook, body(), headers=headers)
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == challenge
    assert await response.json() == {"error": message}
    await assert_nothing_recorded(hook)
    assert await metric(hook, "nodesync_webhook_requests_total", code="401") == 1.0


async def test_the_scheme_is_case_insensitive(hook: Client) -> None:
    response = await post(hook, body(), headers={"Authorization": f"bearer {TOKEN}"})
    assert response.status == 200


async def test_a_wrong_token_is_refused_before_the_body_is_judged(hook: Client) -> None:
    response = await hook.post(
        "/alerts", data=b"x" * 100_000, headers={"Authorization": "Bearer nope"}
    )
    assert response.status == 401
    await assert_nothing_recorded(hook)


async def _post_raw(
    client: Client, data: bytes, content_type: str = "application/json"
) -> tuple[int, dict[str, str]]:
    response = await client.post(
        "/alerts", data=data, headers={**AUTH, "Content-Type": content_type}
    )
    assert response.content_type == "application/json"
    return response.status, await response.json()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", r"^malformed JSON: object keys must be strings \(byte 1\)$"),
        (b"", r"^malformed JSON: input data was truncated$"),
        (b'{"version": NaN}', r"^malformed JSON: invalid character \(byte 12\)$"),
        (b"\xff\xfe\x00", r"^malformed JSON: not UTF-8: "),
        # deeper than the decoder goes, in a field nodesync does not read
        (b'{"extra": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", r"^malformed JSON: nested"),
        (b'{"version": ' + b"9" * 5000 + b"}", r"^\$\.version: number out of range$"),
        (b"[]", r"^\$: expected `object`, got `array`$"),
        (json.dumps({**body(), "version": "3"}).encode(), r"^\$\.version: '3' is not supported"),
        (
            json.dumps(
                {**body(), "alerts": [{**body()["alerts"][0], "startsAt": "yesterday"}]}
            ).encode(),
            r"^\$\.alerts\[0\]\.startsAt: not an RFC 3339 timestamp: 'yesterday'$",
        ),
        (
            json.dumps(
                {**body(), "alerts": [{**body()["alerts"][0], "labels": {"node": 1}}]}
            ).encode(),
            r"^\$\.alerts\[0\]\.labels\[\.\.\.\]: expected `str`, got `int`$",
        ),
    ],
)
async def test_a_malformed_body_is_a_400_naming_the_fault(
    hook: Client, data: bytes, message: str
) -> None:
    status, answer = await _post_raw(hook, data)
    assert status == 400
    assert list(answer) == ["error"]
    assert re.search(message, answer["error"]), answer
    await assert_nothing_recorded(hook)


async def test_too_many_alerts_is_a_400_that_names_max_alerts(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, tmp_path: Path
) -> None:
    hook = await start_hook(aiohttp_client, settings, hook_settings(tmp_path))
    alerts = [alert(f"{i:016x}") for i in range(MAX_ALERTS + 1)]
    response = await post(hook, body(*alerts))
    assert response.status == 400
    assert "set max_alerts" in (await response.json())["error"]
    await assert_nothing_recorded(hook)


async def test_a_body_over_the_limit_is_a_413(hook: Client, webhook: WebhookSettings) -> None:
    big = body(*(alert(f"{i:016x}") for i in range(400)))
    data = json.dumps(big).encode()
    assert len(data) > webhook.max_body_bytes
    status, answer = await _post_raw(hook, data)
    assert (status, answer) == (413, {"error": "the body is larger than 65536 bytes"})

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        for i in range(0, len(data), 4096):
            yield data[i : i + 4096]

    response = await hook.post(
        "/alerts", data=chunks(), headers={**AUTH, "Content-Type": "application/json"}
    )
    assert response.status == 413
    assert "larger than" in (await response.json())["error"]
    await assert_nothing_recorded(hook)
    # just under the limit is fine
    fits = json.dumps(body(*(alert(f"{i:016x}") for i in range(100)))).encode()
    assert len(fits) < webhook.max_body_bytes
    assert (await _post_raw(hook, fits))[0] == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
async def test_a_body_that_is_not_json_is_a_415(hook: Client, content_type: str) -> None:
    response = await hook.post(
        "/alerts",
        data=json.dumps(body()).encode(),
        headers={**AUTH, "Content-Type": content_type},
    )
    assert response.status == 415
    assert (await response.json())["error"].startswith("Content-Type must be application/json")
    await assert_nothing_recorded(hook)


async def test_a_charset_parameter_is_fine(hook: Client) -> None:
    status, _ = await _post_raw(
        hook, json.dumps(body()).encode(), "application/json; charset=utf-8"
    )
    assert status == 200


async def test_other_methods_are_a_405(hook: Client) -> None:
    response = await hook.get("/alerts", headers=AUTH)
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
    assert await response.json() == {"error": "use POST /alerts"}


async def test_a_locked_journal_is_a_503_and_the_retry_succeeds(
    hook: Client, webhook: WebhookSettings
) -> None:
    other = sqlite3.connect(webhook.journal_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # someone else holds the write lock
        response = await post(hook, body(alert("aaaa")))
        assert response.status == 503
        error = (await response.json())["error"]
        assert "retry" in error
        assert not hook.app[SCHEDULE].tripped
        other.execute("ROLLBACK")
    finally:
        other.close()
    if "database is locked" in error:  # failed waiting for the lock: rolled back
        await assert_nothing_recorded(hook)
    # else queued behind another write waiting for the lock (the start's prune, the journal's
    # probe), it met its deadline first and may have committed once the lock was free

    async def ready() -> bool:  # the journal takes writes again
        return (await hook.get("/readyz")).status == 200

    await until_async(ready, timeout=15.0, what="/readyz to answer 200")
    retry = await post(hook, body(alert("aaaa")))
    assert retry.status == 200
    answer = await retry.json()
    assert answer["new"] + answer["duplicates"] == 1
    assert await metric(hook, "nodesync_webhook_requests_total", code="503") == 1.0
    # counted when acknowledged (a late commit, answered 503, is not)
    assert await metric(hook, "nodesync_alerts_received_total", status="firing") == answer["new"]


async def test_a_closed_journal_is_a_503(hook: Client) -> None:
    await journal(hook).close()
    response = await post(hook, body())
    assert response.status == 503
    assert (await response.json())["error"] == (
        "cannot record the alerts, retry later: the journal is closed"
    )


async def test_a_token_file_is_read_when_the_app_is_made(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  from-a-file\n")
    webhook = hook_settings(tmp_path, token="", token_file=str(token_file))
    hook = await start_hook(aiohttp_client, settings, webhook)
    ok = await post(hook, body(), headers={"Authorization": "Bearer from-a-file"})
    assert ok.status == 200
    assert (await post(hook, body(), headers=AUTH)).status == 401


def test_the_webhook_is_not_made_without_a_usable_token(tmp_path: Path) -> None:
    with pytest.raises(WebhookConfigError, match=r"needs a bearer token: set --webhook.token-file"):
        webhook_extension(hook_settings(tmp_path, token=""))
    token_file = tmp_path / "token"
    webhook = hook_settings(tmp_path, token="", token_file=str(token_file))
    with pytest.raises(WebhookConfigError, match=r"cannot read --webhook.token-file .*/token"):
        webhook_extension(webhook)
    token_file.write_text(" \n")
    with pytest.raises(WebhookConfigError, match=r"--webhook.token-file .*/token is empty"):
        webhook_extension(webhook)


async def test_old_entries_are_pruned_at_start(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, tmp_path: Path
) -> None:
    webhook = hook_settings(tmp_path, journal_retention=3600.0)
    old = await Journal.open(webhook.journal_path)
    try:
        await old.record(payload(alert("aaaa")), received_at=time.time() - 7200)
    finally:
        await old.close()
    hook = await start_hook(aiohttp_client, settings, webhook)

    async def pruned() -> bool:
        return journal(hook).last_counts.alerts["firing"] == 0

    await until_async(pruned, timeout=15.0, what="the old alert pruned")
    assert await journal(hook).deliveries() == []


async def test_the_executor_can_wait_for_new_alerts(hook: Client) -> None:
    schedule = hook.app[SCHEDULE]
    waiter = asyncio.create_task(schedule.wait(60))
    await asyncio.sleep(0)
    assert not waiter.done()
    assert (await post(hook, body())).status == 200
    assert await asyncio.wait_for(waiter, timeout=5)
    assert await journal(hook).alerts_to_decide() != []


async def test_recorded_counts_match_the_journal(hook: Client) -> None:
    for fp in ("0001", "0002"):
        assert (await post(hook, body(alert(fp)))).status == 200
    assert (await post(hook, body(alert("0001", status="resolved")))).status == 200
    assert await journal(hook).counts() == journal(hook).last_counts
    assert journal(hook).last_counts.alerts == {"firing": 1, "resolved": 1}
    result = await journal(hook).record(payload(alert("0002")), received_at=T0)
    assert result == RecordResult(0, 1, 0, 0)
