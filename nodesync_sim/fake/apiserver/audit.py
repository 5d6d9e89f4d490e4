"""The server's record of every request it answered, as a real server's audit log has it.

Each record names who asked (user, User-Agent), what (verb, resource, subresource, namespace,
name, the query) and the HTTP status of the answer, in the order the answers completed. Tests
read it to tell which requests a client made on one object, as they read a real server's
audit log (tests/support/realkube.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class AuditRecord:
    user: str
    user_agent: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    query: dict[str, str] = field(default_factory=dict)


class AuditLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[AuditRecord] = []

    def record(self, entry: AuditRecord) -> None:
        with self._lock:
            self._records.append(entry)

    def records(self) -> list[AuditRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
