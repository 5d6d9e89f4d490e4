"""Domain errors of the container runtime boundary.

exporter.cri translates every gRPC failure into one of these (raised ``from`` the original
error), so nothing outside the package sees grpc or protobuf types.
"""

from __future__ import annotations


class CRIError(Exception):
    """A CRI call failed. ``code`` is the gRPC status code name, e.g. ``"INTERNAL"``."""

    def __init__(self, operation_type: str, code: str, message: str = "") -> None:
        self.operation_type = operation_type
        self.code = code
        self.message = message
        detail = f": {message}" if message else ""
        super().__init__(f"CRI {operation_type} failed with {code}{detail}")


class RuntimeUnavailable(CRIError):
    """The runtime cannot be reached (socket missing, connection refused): UNAVAILABLE."""


class RuntimeTimeout(CRIError):
    """The runtime did not answer within the call's deadline: DEADLINE_EXCEEDED."""


class NotFound(CRIError):
    """The sandbox or container does not exist (any more): NOT_FOUND."""


class Unimplemented(CRIError):
    """The runtime does not implement this call: UNIMPLEMENTED."""


_BY_CODE: dict[str, type[CRIError]] = {
    "UNAVAILABLE": RuntimeUnavailable,
    "DEADLINE_EXCEEDED": RuntimeTimeout,
    "NOT_FOUND": NotFound,
    "UNIMPLEMENTED": Unimplemented,
}


def error_for(operation_type: str, code: str, message: str = "") -> CRIError:
    """The most specific CRIError for a gRPC status code name."""
    return _BY_CODE.get(code, CRIError)(operation_type, code, message)
