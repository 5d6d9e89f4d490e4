"""Property: whatever is posted (valid groups, damaged ones, arbitrary JSON, arbitrary bytes),
the webhook answers 200 exactly when the pure parser accepts the body, 400 with the parser's
message otherwise, never a 5xx, and its journal agrees with a model of what was accepted."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from exporter.controller.settings import ControllerSettings
from exporter.model.alerts import WebhookPayload
from exporter.model.payload import PayloadError, decode_payload
from tests.controller.alert_builders import alert, payload, payload_json
from tests.controller.builders import T0
from tests.controller.conftest import AiohttpClient, Client
from tests.controller.webhook_support import AUTH, hook_settings, journal, start_hook


@dataclass
class Model:
    """What the journal should hold: alert key → status, and the deliveries accepted."""

    alerts: dict[tuple[str, float], str] = field(default_factory=dict)
    deliveries: int = 0

    def apply(self, p: WebhookPayload) -> dict[str, int]:
        new = duplicates = resolved = 0
        for a in p.alerts:
            known = self.alerts.get(a.key)
            if known is None:
                self.alerts[a.key] = a.status
                new += 1
                resolved += a.status == "resolved"
            elif known == "firing" and a.status == "resolved":
                self.alerts[a.key] = "resolved"
                resolved += 1
            else:
                duplicates += 1
        self.deliveries += 1
        return {"new": new, "duplicates": duplicates, "resolved": resolved}


@pytest.fixture
async def hook(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, tmp_path: Path
) -> Client:
    return await start_hook(aiohttp_client, settings, hook_settings(tmp_path))


@pytest.fixture
def model() -> Model:
    return Model()


ALERTS = st.builds(
    alert,
    st.sampled_from(["0001", "0002", "00a3"]),  # a small pool: duplicates and resolutions happen
    status=st.sampled_from(["firing", "resolved"]),
    starts_at=st.sampled_from([T0, T0 + 60.5, T0 + 0.000001]),
    ends_at=st.none() | st.just(T0 + 600),
    node=st.sampled_from(["worker-1", "worker-2"]),
)
VALID = st.builds(
    lambda alerts, truncated: payload_json(payload(*alerts, truncated=truncated)),
    st.lists(ALERTS, max_size=4),
    st.integers(0, 3),
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["4", "firing", "resolved", "2026-11-30T01:02:03Z", "\ud800", "ab\x00"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = st.sampled_from(
    ["version", "groupKey", "status", "receiver", "truncatedAlerts", "groupLabels", "alerts"]
)
ALERT_FIELDS = st.sampled_from(
    ["status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"]
)


@st.composite
def damaged(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(draw(VALID))
    if body["alerts"] and draw(st.booleans()):
        target = draw(st.sampled_from(body["alerts"]))
        target[draw(ALERT_FIELDS)] = draw(JSON)
    else:
        body[draw(FIELDS)] = draw(JSON)
    return body


BODIES = (
    VALID.map(lambda b: json.dumps(b).encode())
    | damaged().map(lambda b: json.dumps(b).encode())
    | JSON.map(lambda b: json.dumps(b).encode())
    | st.binary(max_size=64)
)


def expected(data: bytes) -> WebhookPayload | str:
    """The shared decoder's verdict on the bytes: a payload, or the error message."""
    try:
        return decode_payload(data)
    except PayloadError as exc:
        return exc.message


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=BODIES)
async def test_posted_bodies_are_judged_like_the_parser_and_never_fail_the_server(
    hook: Client, model: Model, data: bytes
) -> None:
    response = await hook.post(
        "/alerts", data=data, headers={**AUTH, "Content-Type": "application/json"}
    )
    answer = await response.json()
    event(f"status {response.status}")
    verdict = expected(data)
    if isinstance(verdict, str):
        assert response.status == 400, answer
        assert answer["error"].startswith(verdict), (answer, verdict)
    else:
        assert response.status == 200, answer
        counts = model.apply(verdict)
        assert {k: answer[k] for k in counts} == counts
        assert answer["truncated"] == verdict.truncated_alerts
    # across every example so far: the journal holds exactly what the model accepted
    held = journal(hook).last_counts
    assert held.deliveries == model.deliveries
    assert held.alerts == {
        status: sum(s == status for s in model.alerts.values()) for status in ("firing", "resolved")
    }
