"""A RequestObserver that records every CRI request, for assertions."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RecordingObserver:
    calls: list[tuple[str, float, str]] = field(default_factory=list)

    def observe(self, operation_type: str, duration_seconds: float, grpc_code: str) -> None:
        self.calls.append((operation_type, duration_seconds, grpc_code))

    def count(self, operation_type: str, grpc_code: str | None = None) -> int:
        return sum(
            1
            for op, _, code in self.calls
            if op == operation_type and (grpc_code is None or code == grpc_code)
        )

    def codes(self, operation_type: str) -> list[str]:
        return [code for op, _, code in self.calls if op == operation_type]
