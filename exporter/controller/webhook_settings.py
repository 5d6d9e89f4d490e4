"""Typed settings of the controller's Alertmanager webhook and journal, and their flags.

The bearer token is a secret: it comes from a file (``--webhook.token-file``) or from the
environment variable ``NODESYNC_WEBHOOK_TOKEN``, never from a flag (flags show in ``ps``), and it
is never logged. The CLI passes the environment to ``from_args``; nothing here reads it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from exporter.settings import FlagAdder, positive_duration

TOKEN_ENV: Final = "NODESYNC_WEBHOOK_TOKEN"
DEFAULT_JOURNAL_PATH: Final = "/var/lib/nodesync/journal.db"
DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
DEFAULT_JOURNAL_RETENTION: Final = 7 * 24 * 3600.0


def positive_int(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: use a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: must be positive")
    return value


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """``token`` (from the environment) and ``token_file`` are mutually exclusive; one of them is
    needed to serve the webhook. TLS needs both the certificate and the key, or neither."""

    journal_path: str = DEFAULT_JOURNAL_PATH
    token_file: str = ""
    token: str = field(default="", repr=False)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    tls_cert_file: str = ""
    tls_key_file: str = ""
    journal_retention: float = DEFAULT_JOURNAL_RETENTION
    #: How long a journal write waits for a lock held by another process before it fails (503).
    journal_busy_timeout: float = 2.0

    def __post_init__(self) -> None:
        if self.token and self.token_file:
            raise ValueError(f"both {TOKEN_ENV} and --webhook.token-file are set: use one of them")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("--webhook.tls-cert-file and --webhook.tls-key-file go together")
        if self.max_body_bytes <= 0:
            raise ValueError("--webhook.max-body-bytes must be positive")
        if self.journal_retention <= 0:
            raise ValueError("--journal-retention must be positive")

    @property
    def has_token(self) -> bool:
        """A token is configured: the webhook can be served."""
        return bool(self.token or self.token_file)

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str]) -> WebhookSettings:
        """Raises ValueError for contradicting settings."""
        return cls(
            journal_path=args.journal_path,
            token_file=args.webhook_token_file,
            token=environ.get(TOKEN_ENV, "").strip(),
            max_body_bytes=args.webhook_max_body_bytes,
            tls_cert_file=args.webhook_tls_cert_file,
            tls_key_file=args.webhook_tls_key_file,
            journal_retention=args.journal_retention,
        )

    def as_log_fields(self) -> dict[str, Any]:
        fields = asdict(self)
        fields["token"] = "<set>" if self.token else ""
        return fields


def add_webhook_flags(add: FlagAdder) -> None:
    add.add(
        "--journal-path",
        default=DEFAULT_JOURNAL_PATH,
        help="SQLite file holding the controller's state: received alerts, plans and their steps",
    )
    add.add(
        "--journal-retention",
        default="168h",
        type=positive_duration,
        help="forget deliveries, and alerts whose plan finished, last seen longer ago than this",
    )
    add.add(
        "--webhook.token-file",
        default="",
        help="file holding the bearer token Alertmanager must send to POST /alerts (or set "
        f"{TOKEN_ENV}); without a token the webhook is not served",
    )
    add.add(
        "--webhook.max-body-bytes",
        default=str(DEFAULT_MAX_BODY_BYTES),
        type=positive_int,
        help="larger webhook requests are refused with 413",
    )
    add.add(
        "--webhook.tls-cert-file",
        default="",
        help="TLS certificate (PEM, with its chain) for the controller's listener (the webhook "
        "and /metrics); empty: plain HTTP",
    )
    add.add(
        "--webhook.tls-key-file",
        default="",
        help="private key (PEM) of --webhook.tls-cert-file",
    )
