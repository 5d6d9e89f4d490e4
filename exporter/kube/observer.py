"""What the API boundary tells an observer (the request metrics) as it works."""

from __future__ import annotations

from typing import Protocol

from exporter.kube.errors import CODE_UNREACHABLE, InvalidResponse, KubeError

#: ``code`` of a request that got no HTTP answer.
CODE_LABEL_UNREACHABLE = "unreachable"
#: ``code`` of a 2xx answer whose body was not valid JSON.
CODE_LABEL_INVALID = "invalid_response"
#: ``code`` of a leader-election attempt that did not finish in time.
CODE_LABEL_TIMEOUT = "timeout"


class RequestObserver(Protocol):
    """Told about API requests and informer activity. Every method must be cheap.

    ``resource`` is the plural (``nodes``, ``leases``, ``pods`` ...), ``verb`` the Kubernetes
    verb (``get``, ``list``, ``watch``, ``create``, ``patch``, ``delete`` ...), ``code`` the HTTP
    status as a string, or ``"unreachable"``, or ``"invalid_response"``.
    """

    def observe_request(self, resource: str, verb: str, duration_seconds: float, code: str) -> None:
        """One request finished. For ``watch`` this is the answer to the request (the stream
        then runs on), or an error that ended a stream (an ERROR event, a broken connection)."""

    def observe_watch_event(self, resource: str, event_type: str) -> None:
        """An informer received one watch event (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR)."""

    def observe_relist(self, resource: str) -> None:
        """An informer listed again because its resourceVersion expired (410 Gone)."""

    def observe_skipped_object(self, resource: str) -> None:
        """An informer skipped an object it could not convert."""

    def observe_leader_election_error(self, code: str) -> None:
        """A leader-election attempt failed for another reason than a lost race (``code`` as
        for requests, or ``timeout`` when the attempt ran out of time)."""


def code_label(err: KubeError) -> str:
    """The ``code`` an error is reported with."""
    if isinstance(err, InvalidResponse):
        return CODE_LABEL_INVALID
    if err.code == CODE_UNREACHABLE:
        return CODE_LABEL_UNREACHABLE
    return str(err.code)
