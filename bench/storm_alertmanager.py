"""The Alertmanager of bench.storm: an HA pair's webhook notifications, each acknowledgement timed.

bench.storm plays Prometheus: it writes alerts to this process' stdin, one JSON object per line,
as the storm unfolds (``{"labels": {...}, "annotations": {...}, "startsAt": <unix seconds>,
"endsAt": <unix seconds or null>, "generatorURL": "..."}``; an alert with ``endsAt`` in the past
is resolved). This process plays the Alertmanager pair in front of the nodesync controller, as
configured in deploy/alertmanager/alertmanager.yml, with its times compressed:

- alerts are grouped by ``alertname`` and ``nodesync_action``; a group's first notification goes
  out ``--group-wait`` after its first alert became active, then one every ``--group-interval``,
  each carrying the WHOLE group again (the firing alerts and, for ``--resolved-notifications``
  notifications, the resolved ones), sorted by labels and cut to ``--max-alerts`` with
  ``truncatedAlerts`` counting the rest. Alertmanager itself skips a flush when its group did not
  change; sending every one is the heavier case.
- both replicas send every notification (their gossip lost the race: the duplicate case), the
  second ``--peer-delay`` after the first, with its own ``externalURL``.
- payloads are version 4, as Alertmanager 0.25 sends them: ``endsAt`` is
  ``0001-01-01T00:00:00Z`` while an alert fires, timestamps are RFC 3339 with fractions, the
  fingerprint is Prometheus' label-set fingerprint (FNV-1a 64 over the sorted labels).

Every notification is POSTed to the controller's ``/alerts`` (bearer token from
``NODESYNC_WEBHOOK_TOKEN``) and to the floor (bench.storm_floor) at the same moment, at most
``--in-flight`` requests in flight per target; each acknowledgement's latency is the time from
sending the request to reading the whole answer. Then, on ``{"cmd": "finish"}``, the
notifications sent are replayed back to back with ``--in-flight`` in flight (the flood: how
many alerts per second each receiver accepts), to the controller and then to the floor.
While the notifications are paced, ``GET /healthz`` probes each receiver every
``--probe-interval``: how long a request that does no work waits. The results go to
``--result`` as JSON, and the process exits. It ends by itself after ``--max-seconds`` or when
stdin closes.

    .venv/bin/python -m bench.storm_alertmanager --controller URL --floor URL --result PATH
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from exporter.tasks import wait_set

RECEIVER = "nodesync-hook"
ZERO_TIME = "0001-01-01T00:00:00Z"
#: The route of deploy/alertmanager/alertmanager.yml, as Alertmanager names it in groupKey.
HOOK_ROUTE = '{}/{nodesync_action=~"rollback_node|evict_pod|cleanup_orphans"}'
#: Where alerts outside the allow list would come from: a route that forgot the allow list.
CATCH_ALL_ROUTE = '{}/{nodesync_action=~".+"}'
HOOK_ACTIONS = frozenset({"rollback_node", "evict_pod", "cleanup_orphans"})

_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_SEPARATOR = 0xFF


def fingerprint(labels: Mapping[str, str]) -> str:
    """Prometheus' model.LabelSet.Fingerprint(), as Alertmanager puts it in the payload."""
    value = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode():
                value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
            value = ((value ^ _SEPARATOR) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def go_time(seconds: float) -> str:
    """A time as Go's encoding/json writes it (RFC 3339, fraction without trailing zeros)."""
    moment = datetime.fromtimestamp(seconds, UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def label_string(labels: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{k}={json.dumps(labels[k])}" for k in sorted(labels)) + "}"


@dataclass(slots=True)
class Alert:
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: float
    ends_at: float | None
    generator_url: str
    fingerprint: str
    sort_key: tuple[tuple[str, str], ...]
    resolved_sent: int = 0  # notifications that carried it resolved

    def resolved(self, now: float) -> bool:
        return self.ends_at is not None and self.ends_at <= now

    def as_json(self, now: float) -> dict[str, Any]:
        resolved = self.resolved(now)
        return {
            "status": "resolved" if resolved else "firing",
            "labels": self.labels,
            "annotations": self.annotations,
            "startsAt": go_time(self.starts_at),
            "endsAt": go_time(self.ends_at) if resolved and self.ends_at else ZERO_TIME,
            "generatorURL": self.generator_url,
            "fingerprint": self.fingerprint,
        }


@dataclass(slots=True)
class Group:
    alertname: str
    action: str
    next_flush: float
    alerts: dict[str, Alert] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        return {"alertname": self.alertname, "nodesync_action": self.action}

    @property
    def key(self) -> str:
        route = HOOK_ROUTE if self.action in HOOK_ACTIONS else CATCH_ALL_ROUTE
        return f"{route}:{label_string(self.labels)}"


@dataclass(slots=True)
class Notification:
    body: bytes
    alerts: int  # alerts carried (after truncation)
    truncated: int
    group: str
    replica: int


@dataclass
class Sample:
    at: float  # unix time the request was sent
    latency: float  # seconds until the whole answer was read
    queued: float  # seconds it waited for a free in-flight slot
    status: int
    alerts: int
    answer: dict[str, Any] | None


class Target:
    """One receiver: a keep-alive session and at most ``in_flight`` requests at once."""

    def __init__(self, name: str, url: str, token: str, in_flight: int) -> None:
        self.name = name
        self.url = url
        self._headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        self._gate = asyncio.Semaphore(in_flight)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=in_flight),
            timeout=aiohttp.ClientTimeout(total=30),
        )

    async def close(self) -> None:
        await self._session.close()

    async def post(self, note: Notification) -> Sample:
        queued_at = time.perf_counter()
        async with self._gate:
            sent = time.perf_counter()
            at = time.time()
            status = 0
            answer: dict[str, Any] | None = None
            try:
                async with self._session.post(
                    self.url, data=note.body, headers=self._headers
                ) as response:
                    raw = await response.read()
                    status = response.status
                latency = time.perf_counter() - sent
                with contextlib.suppress(ValueError):
                    parsed = json.loads(raw)
                    answer = parsed if isinstance(parsed, dict) else None
            except (aiohttp.ClientError, TimeoutError):
                latency = time.perf_counter() - sent
        return Sample(at, latency, sent - queued_at, status, note.alerts, answer)


class Alertmanager:
    def __init__(self, args: argparse.Namespace, token: str) -> None:
        self.args = args
        self.targets = [
            Target("controller", args.controller, token, args.in_flight),
            Target("floor", args.floor, token, args.in_flight),
        ]
        self.probes: dict[str, list[tuple[float, float]]] = {t.name: [] for t in self.targets}
        self.pending: list[Alert] = []  # received, not active yet
        self.groups: dict[tuple[str, str], Group] = {}
        self.sent: list[Notification] = []
        self.samples: dict[str, list[Sample]] = {t.name: [] for t in self.targets}
        self.tasks: set[asyncio.Task[None]] = set()
        self.received = 0
        self.finish = asyncio.Event()
        self.wake = asyncio.Event()
        self.started = time.time()
        self.paced_ended = 0.0

    # ------------------------------------------------------------------ input

    def add(self, raw: dict[str, Any]) -> None:
        labels = {str(k): str(v) for k, v in raw["labels"].items()}
        ends = raw.get("endsAt")
        self.pending.append(
            Alert(
                labels=labels,
                annotations={str(k): str(v) for k, v in raw.get("annotations", {}).items()},
                starts_at=float(raw["startsAt"]),
                ends_at=float(ends) if ends is not None else None,
                generator_url=str(raw.get("generatorURL", "")),
                fingerprint=fingerprint(labels),
                sort_key=tuple(sorted(labels.items())),
            )
        )
        self.received += 1
        self.wake.set()

    async def read_stdin(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = await reader.readline()
            if not line:
                break
            message = json.loads(line)
            if message.get("cmd") == "finish":
                break
            self.add(message)
        self.finish.set()
        self.wake.set()

    # ------------------------------------------------------------------ grouping, flushing

    def activate(self, now: float) -> None:
        still: list[Alert] = []
        for alert in self.pending:
            if alert.starts_at > now:
                still.append(alert)
                continue
            key = (alert.labels.get("alertname", ""), alert.labels.get("nodesync_action", ""))
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = Group(key[0], key[1], now + self.args.group_wait)
            group.alerts[alert.fingerprint] = alert
        self.pending = still

    def flush(self, group: Group, now: float) -> None:
        alerts = sorted(group.alerts.values(), key=lambda a: a.sort_key)
        if not alerts:
            return
        shown = alerts[: self.args.max_alerts]
        firing = any(not a.resolved(now) for a in alerts)
        common_labels = dict(shown[0].labels)
        common_annotations = dict(shown[0].annotations)
        for alert in shown[1:]:
            common_labels = {k: v for k, v in common_labels.items() if alert.labels.get(k) == v}
            common_annotations = {
                k: v for k, v in common_annotations.items() if alert.annotations.get(k) == v
            }
        items = [a.as_json(now) for a in shown]
        for replica in (0, 1):
            body = json.dumps(
                {
                    "receiver": RECEIVER,
                    "status": "firing" if firing else "resolved",
                    "alerts": items,
                    "groupLabels": group.labels,
                    "commonLabels": common_labels,
                    "commonAnnotations": common_annotations,
                    "externalURL": f"http://alertmanager-{replica}:9093",
                    "version": "4",
                    "groupKey": group.key,
                    "truncatedAlerts": len(alerts) - len(shown),
                }
            ).encode()
            note = Notification(body, len(shown), len(alerts) - len(shown), group.key, replica)
            delay = replica * self.args.peer_delay
            task = asyncio.create_task(self.deliver(note, delay))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        # A resolved alert is carried by a few notifications, then forgotten.
        for alert in alerts:
            if alert.resolved(now):
                alert.resolved_sent += 1
                if alert.resolved_sent >= self.args.resolved_notifications:
                    del group.alerts[alert.fingerprint]

    async def deliver(self, note: Notification, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        self.sent.append(note)
        results = await asyncio.gather(*(t.post(note) for t in self.targets))
        for target, sample in zip(self.targets, results, strict=True):
            self.samples[target.name].append(sample)

    async def paced(self) -> None:
        deadline = self.started + self.args.max_seconds
        while not self.finish.is_set() and time.time() < deadline:
            now = time.time()
            self.activate(now)
            for group in self.groups.values():
                if group.next_flush <= now:
                    self.flush(group, now)
                    group.next_flush += self.args.group_interval
                    if group.next_flush <= now:  # fell behind: keep the interval from now
                        group.next_flush = now + self.args.group_interval
            upcoming = [g.next_flush for g in self.groups.values()]
            upcoming += [a.starts_at for a in self.pending]
            wait = min([*upcoming, now + 0.5]) - time.time()
            self.wake.clear()
            if wait > 0:
                await wait_set(self.wake, wait)
        self.paced_ended = time.time()
        self.finish.set()
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    async def probe(self) -> None:
        """GET /healthz on each receiver every ``--probe-interval`` while the paced phase runs:
        a request that does no work, so its latency is the time the receiver's event loop (or
        the machine) kept it waiting. The floor has no such route: its 404 is as cheap."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:

            async def one(name: str, url: str) -> None:
                at = time.time()
                started = time.perf_counter()
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(url) as response:
                        await response.read()
                self.probes[name].append((at, time.perf_counter() - started))

            while not self.finish.is_set():
                await asyncio.gather(
                    *(one(t.name, t.url.rsplit("/", 1)[0] + "/healthz") for t in self.targets)
                )
                await wait_set(self.finish, self.args.probe_interval)

    # ------------------------------------------------------------------ the flood

    async def flood(self, target: Target) -> dict[str, Any]:
        queue = list(self.sent)
        samples: list[Sample] = []
        position = 0

        async def worker() -> None:
            nonlocal position
            while position < len(queue):
                note = queue[position]
                position += 1
                samples.append(await target.post(note))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(self.args.in_flight)))
        elapsed = time.perf_counter() - started
        return {"seconds": elapsed, "samples": [_sample_row(s, self.started) for s in samples]}

    async def run(self) -> dict[str, Any]:
        reader = asyncio.create_task(self.read_stdin())
        prober = asyncio.create_task(self.probe())
        try:
            await self.paced()
            await prober
            flood = {t.name: await self.flood(t) for t in self.targets}
        finally:
            for task in (reader, prober):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for target in self.targets:
                await target.close()
        return {
            "started_at": self.started,
            "paced_ended_at": self.paced_ended,
            "alerts_received": self.received,
            "notifications": len(self.sent),
            "notifications_by_group": dict(Counter(n.group for n in self.sent)),
            "payload_bytes_max": max((len(n.body) for n in self.sent), default=0),
            "truncated_max": max((n.truncated for n in self.sent), default=0),
            "paced": {
                name: [_sample_row(s, self.started) for s in rows]
                for name, rows in self.samples.items()
            },
            "flood": flood,
            "probes": self.probes,
        }


def _sample_row(s: Sample, origin: float) -> dict[str, Any]:
    row: dict[str, Any] = {
        "t": s.at - origin,
        "at": s.at,
        "latency": s.latency,
        "queued": s.queued,
        "status": s.status,
        "alerts": s.alerts,
    }
    if s.answer is not None:
        for key in ("new", "duplicates", "resolved", "truncated"):
            if key in s.answer:
                row[key] = s.answer[key]
    return row


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    token = os.environ.get("NODESYNC_WEBHOOK_TOKEN", "")
    return await Alertmanager(args, token).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--controller", required=True, help="the controller's /alerts URL")
    parser.add_argument("--floor", required=True, help="the floor's /alerts URL")
    parser.add_argument("--result", required=True, help="where to write the results (JSON)")
    parser.add_argument("--group-wait", type=float, default=0.5)
    parser.add_argument("--group-interval", type=float, default=1.0)
    parser.add_argument("--peer-delay", type=float, default=0.25)
    parser.add_argument("--max-alerts", type=int, default=100)
    parser.add_argument("--resolved-notifications", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--probe-interval", type=float, default=0.1)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    with open(args.result, "w") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
