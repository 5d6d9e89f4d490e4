"""The alert ledger: each delivery recorded once per alert episode (de-duplicated against the
episodes already recorded), and the alerts and deliveries read back."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from exporter.controller.journal.records import (
    AlertKey,
    AlertRecord,
    DeliveryRecord,
    RecordResult,
)
from exporter.controller.journal.schema import transaction
from exporter.model.alerts import EPISODE_TOLERANCE, FIRING, RESOLVED, Alert, WebhookPayload

#: How much newer than an alert's ``last_seen_at`` a copy must be to move it. last_seen_at
#: serves retention (``--journal.retention``, hours to days); a group's re-sends come every
#: ``group_interval`` (minutes), and would otherwise rewrite every alert of the group.
LAST_SEEN_RESOLUTION: Final = 60.0
#: Values bound in one statement stay well under SQLite's limit (32766 since 3.32, 999 before).
QUERY_CHUNK: Final = 400


def _json(mapping: Mapping[str, str]) -> str:
    return json.dumps(dict(mapping), sort_keys=True, separators=(",", ":"))


def stored(conn: sqlite3.Connection, key: AlertKey, columns: str) -> tuple[Any, ...] | None:
    """The row of the alert episode ``key`` names: same fingerprint, the startsAt nearest the
    key's within EPISODE_TOLERANCE (the PRIMARY KEY index makes this one range lookup)."""
    fingerprint, starts_at = key
    row: tuple[Any, ...] | None = conn.execute(
        f"SELECT {columns} FROM alerts WHERE fingerprint = ? AND starts_at BETWEEN ? AND ?"
        " ORDER BY abs(starts_at - ?) LIMIT 1",
        (fingerprint, starts_at - EPISODE_TOLERANCE, starts_at + EPISODE_TOLERANCE, starts_at),
    ).fetchone()
    return row


def _episodes(conn: sqlite3.Connection, fingerprints: set[str]) -> dict[str, list[list[Any]]]:
    """Every recorded episode of these fingerprints, as ``[starts_at, status, last_seen_at]``
    lists by fingerprint, in startsAt order: one indexed query for a whole delivery."""
    found: dict[str, list[list[Any]]] = {}
    names = sorted(fingerprints)
    for at in range(0, len(names), QUERY_CHUNK):
        chunk = names[at : at + QUERY_CHUNK]
        marks = ", ".join("?" * len(chunk))
        for fingerprint, *episode in conn.execute(
            "SELECT fingerprint, starts_at, status, last_seen_at FROM alerts"
            f" WHERE fingerprint IN ({marks}) ORDER BY fingerprint, starts_at",
            chunk,
        ):
            found.setdefault(fingerprint, []).append(episode)
    return found


def _nearest(episodes: list[list[Any]], starts_at: float) -> list[Any] | None:
    """The episode whose startsAt is nearest ``starts_at`` within EPISODE_TOLERANCE (as
    :func:`stored` finds it), or None."""
    best: list[Any] | None = None
    for episode in episodes:
        distance = abs(episode[0] - starts_at)
        if distance <= EPISODE_TOLERANCE and (best is None or distance < abs(best[0] - starts_at)):
            best = episode
    return best


@dataclass(slots=True)
class _Judged:
    """What a delivery changes, judged against the recorded episodes: alerts to insert
    (``new_alerts``), rows to resolve, keys whose ``last_seen_at`` moves, and the counts."""

    new_alerts: list[Alert] = dataclasses.field(default_factory=list)
    resolves: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    seen: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    duplicates: int = 0
    resolved: int = 0
    new_firing: int = 0

    @property
    def records_alerts(self) -> bool:
        """The delivery brings an alert or a resolution the journal does not hold yet."""
        return bool(self.new_alerts or self.resolves)


def record(conn: sqlite3.Connection, payload: WebhookPayload, received_at: float) -> RecordResult:
    """One delivery, in a few statements whatever its size: its alerts' episodes read in one
    query, then the new ones inserted, the resolved ones updated and the rest (re-sends, HA
    duplicates, retries) marked seen, each kind in one call. Alerts are judged in delivery
    order against what the delivery's earlier alerts did, as if written one by one. A copy
    moves ``last_seen_at`` only once it is LAST_SEEN_RESOLUTION newer: the re-sends of a group
    then write nothing but their delivery row.

    A delivery that brings a new alert or a resolution is judged and written in one
    transaction, committed with the write-ahead log on disk (fsynced) before this returns. One
    that brings nothing new (most of them: Alertmanager sends every alert of a group again with
    each notification, and an HA pair sends each notification twice) has its alerts on disk
    already: its own row and any ``last_seen_at`` are committed in a second transaction that
    does not wait for the disk (``synchronous=NORMAL``). That commit survives the process'
    death (a crash, a SIGKILL) like any other; a power cut or a kernel crash can lose it until
    the next commit that does wait for the disk, which makes it durable with its own."""
    with transaction(conn):
        judged = _judge(
            payload, _episodes(conn, {a.fingerprint for a in payload.alerts}), received_at
        )
        if judged.records_alerts:
            _write_delivery(conn, payload, received_at, judged)
    if not judged.records_alerts:  # the transaction above wrote nothing, so it flushed nothing
        with transaction(conn, durable=False):
            _write_delivery(conn, payload, received_at, judged)
    return RecordResult(
        new=len(judged.new_alerts),
        duplicates=judged.duplicates,
        resolved=judged.resolved,
        truncated=payload.truncated_alerts,
        new_firing=judged.new_firing,
    )


def _judge(
    payload: WebhookPayload, episodes: dict[str, list[list[Any]]], received_at: float
) -> _Judged:
    """What each alert of the delivery changes, in order (``episodes`` is updated as it goes)."""
    judged = _Judged()
    for alert in payload.alerts:
        known = episodes.setdefault(alert.fingerprint, [])
        row = _nearest(known, alert.starts_at)
        if row is None:
            is_resolved = alert.status == RESOLVED
            judged.new_alerts.append(alert)
            known.append([alert.starts_at, alert.status, received_at])
            judged.resolved += is_resolved
            judged.new_firing += not is_resolved
            continue
        key = (alert.fingerprint, row[0])  # as first recorded
        if row[1] == FIRING and alert.status == RESOLVED:
            judged.resolves.append((RESOLVED, received_at, alert.ends_at, received_at, *key))
            row[1], row[2] = RESOLVED, max(row[2], received_at)
            judged.resolved += 1
            continue
        # A re-send, an HA duplicate, a retry, or a late firing copy of a resolved one.
        judged.duplicates += 1
        if received_at - row[2] >= LAST_SEEN_RESOLUTION:
            judged.seen.append(key)
            row[2] = received_at
    return judged


def _write_delivery(
    conn: sqlite3.Connection, payload: WebhookPayload, received_at: float, judged: _Judged
) -> None:
    """The delivery's row and what it changes, in the caller's transaction."""
    delivery = conn.execute(
        "INSERT INTO deliveries (received_at, group_key, receiver, status, alerts, truncated,"
        " new, duplicates, resolved) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            received_at,
            payload.group_key,
            payload.receiver,
            payload.status,
            len(payload.alerts),
            payload.truncated_alerts,
            len(judged.new_alerts),
            judged.duplicates,
            judged.resolved,
        ),
    ).lastrowid
    conn.executemany(
        "INSERT INTO alerts (fingerprint, starts_at, status, labels, annotations,"
        " ends_at, generator_url, first_delivery, received_at, last_seen_at,"
        " resolved_at, to_decide) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
        [
            (
                alert.fingerprint,
                alert.starts_at,
                alert.status,
                _json(alert.labels),
                _json(alert.annotations),
                alert.ends_at,
                alert.generator_url,
                delivery,
                received_at,
                received_at,
                received_at if alert.status == RESOLVED else None,
            )
            for alert in judged.new_alerts
        ],
    )
    conn.executemany(
        "UPDATE alerts SET status = ?, resolved_at = ?, ends_at = ?, last_seen_at = ?"
        " WHERE fingerprint = ? AND starts_at = ?",
        judged.resolves,
    )
    for at in range(0, len(judged.seen), QUERY_CHUNK):
        chunk = judged.seen[at : at + QUERY_CHUNK]
        pairs = ", ".join(["(?, ?)"] * len(chunk))
        conn.execute(
            "UPDATE alerts SET last_seen_at = max(last_seen_at, ?)"
            f" WHERE (fingerprint, starts_at) IN (VALUES {pairs})",
            (received_at, *(value for key in chunk for value in key)),
        )


_ALERT_COLUMNS = (
    "fingerprint, starts_at, status, labels, annotations, received_at, last_seen_at,"
    " resolved_at, ends_at, generator_url"
)


#: The labels and annotations columns, as the journal wrote them (JSON objects of strings): read
#: again at every executor pass (the firing alerts it refused, for their holds), so decoded in
#: one call each rather than through ``json.loads``.
_MAPPING = msgspec.json.Decoder(dict[str, str])


def _alert_record(row: tuple[Any, ...]) -> AlertRecord:
    return AlertRecord(
        fingerprint=row[0],
        starts_at=row[1],
        status=row[2],
        labels=_MAPPING.decode(row[3]),
        annotations=_MAPPING.decode(row[4]),
        received_at=row[5],
        last_seen_at=row[6],
        resolved_at=row[7],
        ends_at=row[8],
        generator_url=row[9],
    )


def read_alerts_to_decide(conn: sqlite3.Connection, limit: int) -> list[AlertRecord]:
    rows = conn.execute(
        f"SELECT {_ALERT_COLUMNS} FROM alerts INDEXED BY alerts_to_decide WHERE to_decide = 1"
        " ORDER BY received_at, starts_at, fingerprint LIMIT ?",
        (limit,),
    ).fetchall()
    return [_alert_record(r) for r in rows]


def read_alert(conn: sqlite3.Connection, key: AlertKey) -> AlertRecord | None:
    row = stored(conn, key, _ALERT_COLUMNS)
    return None if row is None else _alert_record(row)


def read_deliveries(conn: sqlite3.Connection, limit: int) -> list[DeliveryRecord]:
    rows = conn.execute(
        "SELECT id, received_at, group_key, receiver, status, alerts, truncated, new,"
        " duplicates, resolved FROM deliveries ORDER BY id DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [DeliveryRecord(*r) for r in rows]
