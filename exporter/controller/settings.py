"""The settings of ``nodesync controller`` and ``nodesync plan``, each declared once
(exporter.settings.declare):

- :class:`ControllerSettings`: the listener and how the cluster view reads the API server;
- :class:`WebhookSettings`: the Alertmanager webhook and its journal;
- :class:`ExecutorSettings`: the rollback executor, with the :class:`GuardPolicy` it enforces;
- :class:`PlanSettings`: ``nodesync plan``, which shares the cluster and policy declarations.

The webhook's bearer token is a secret: it comes from a file (``--webhook.token-file``) or from
the environment variable ``NODESYNC_WEBHOOK_TOKEN``, never from a flag (flags show in ``ps``),
and it is never logged. The CLI passes the environment to ``WebhookSettings.from_args``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from exporter.metrics.nodes import NodeCollectors
from exporter.model.guards.policy import GuardPolicy
from exporter.model.joins import JoinPolicy
from exporter.settings.declare import Setting, build, group, setting
from exporter.settings.joins import JoinSettings
from exporter.settings.kube import KUBE_CONTEXT, KUBECONFIG
from exporter.settings.policy import GuardSettings
from exporter.settings.server import ServerSettings
from exporter.settings.values import (
    ADDRESS,
    BOOLEAN,
    NAME,
    PATH,
    POSITIVE_COUNT,
    POSITIVE_DURATION,
    POSITIVE_NUMBER,
    choice,
    text,
)

TOKEN_ENV: Final = "NODESYNC_WEBHOOK_TOKEN"

# How the cluster view reads the API server: the controller's and ``nodesync plan``'s.
WAVE_LABEL = Setting(
    "--wave.label",
    "",
    "node label whose value names a node's scale-out wave; empty: waves by creation time",
    text("LABEL"),
    doc="node label whose value names a node's scale-out wave; empty: waves by creation time only",
    aliases=("--wave-label",),
)
WAVE_GAP = Setting(
    "--wave.gap",
    "2m",
    "nodes created at most this long after the previous one join its scale-out wave; "
    "a wave closes (its size is frozen) once no node joined it for this long",
    POSITIVE_DURATION,
    doc="a node created at most this long after the previous one joins its wave; a wave "
    "closes (its size is frozen) once no node joined it for this long",
    aliases=("--wave-gap",),
)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    listen: tuple[str, int] = setting(
        "--web.listen-address",
        "0.0.0.0:9618",
        "address serving /metrics, /healthz and /readyz",
        ADDRESS,
        doc="address serving `/metrics`, `/healthz`, `/readyz`",
    )
    server: ServerSettings = group(ServerSettings)  # the listener's timeouts and limits
    kubeconfig: str = KUBECONFIG.field()
    context: str = KUBE_CONTEXT.field()
    wave_label: str = WAVE_LABEL.field()  # empty: waves by creation time only
    wave_gap: float = WAVE_GAP.field()
    collectors: NodeCollectors = group(NodeCollectors)
    # how a join is followed, and the join SLO's objective
    join: JoinPolicy = group(JoinSettings, builds=JoinPolicy)

    @property
    def listen_host(self) -> str:
        return self.listen[0]

    @property
    def listen_port(self) -> int:
        return self.listen[1]


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """``token`` (from the environment) and ``token_file`` are mutually exclusive; one of them is
    needed to serve the webhook. TLS needs both the certificate and the key, or neither."""

    journal_path: str = setting(
        "--journal.path",
        "/var/lib/nodesync/journal.db",
        "SQLite file holding the controller's intake: received alerts and what was decided",
        PATH,
        aliases=("--journal-path",),
    )
    journal_retention: float = setting(
        "--journal.retention",
        "168h",
        "forget deliveries, and alerts (with their decisions), last seen longer ago than this",
        POSITIVE_DURATION,
        aliases=("--journal-retention",),
    )
    journal_commit_timeout: float = setting(
        "--journal.commit-timeout",
        "2s",
        "a delivery not committed to the journal this long after it was read (a frozen "
        "filesystem, a lock another process holds) is answered 503, and the controller is not "
        "ready until a write commits again",
        POSITIVE_DURATION,
        doc="a delivery whose commit has not finished this long after its body was read is "
        "answered `503` (Alertmanager retries), and `/readyz` fails until a write commits "
        "again; also how long a write waits for a lock another process holds",
        aliases=("--journal-commit-timeout",),
    )
    token_file: str = setting(
        "--webhook.token-file",
        "",
        "file holding the bearer token Alertmanager must send to POST /alerts (or set "
        f"{TOKEN_ENV}); without a token the webhook is not served",
        PATH,
    )
    max_body_bytes: int = setting(
        "--webhook.max-body-bytes",
        "1048576",
        "larger webhook requests are refused with 413",
        POSITIVE_COUNT,
    )
    tls_cert_file: str = setting(
        "--webhook.tls-cert-file",
        "",
        "TLS certificate (PEM, with its chain) for the controller's listener (the webhook "
        "and /metrics); empty: plain HTTP",
        PATH,
    )
    tls_key_file: str = setting(
        "--webhook.tls-key-file",
        "",
        "private key (PEM) of --webhook.tls-cert-file",
        PATH,
    )
    token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.token and self.token_file:
            raise ValueError(f"both {TOKEN_ENV} and --webhook.token-file are set: use one of them")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("--webhook.tls-cert-file and --webhook.tls-key-file go together")
        if self.max_body_bytes <= 0:
            raise ValueError("--webhook.max-body-bytes must be positive")
        if self.journal_retention <= 0:
            raise ValueError("--journal.retention must be positive")
        if self.journal_commit_timeout <= 0:
            raise ValueError("--journal.commit-timeout must be positive")

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
        token = environ.get(TOKEN_ENV, "").strip()
        return dataclasses.replace(build(cls, args), token=token)


def default_identity() -> str:
    """The hostname (the pod's name in a Deployment) and the process id."""
    return f"{socket.gethostname()}_{os.getpid()}"


@dataclass(frozen=True, slots=True)
class ExecutorSettings:
    """The rollback executor's settings, and the policy its guards enforce."""

    dry_run: bool = setting(
        "--rollback.dry-run",
        "false",
        "plan and record every alert, write nothing to the API server",
        BOOLEAN,
        aliases=("--dry-run",),
    )
    dry_run_clear_within: float = setting(
        "--rollback.dry-run-clear-within",
        "10m",
        "in a dry run, an alert nodesync would have acted on that resolves this soon after "
        "that decision counts as cleared by itself (outcome dry_run_cleared: the action was "
        "not needed), one that lasts longer as dry_run_outlasted",
        POSITIVE_DURATION,
    )
    policy: GuardPolicy = group(GuardSettings, builds=GuardPolicy)
    api_qps: float = setting(
        "--apiserver.qps",
        "5",
        "API writes per second on average (token bucket refill)",
        POSITIVE_NUMBER,
        aliases=("--api-qps",),
    )
    api_burst: int = setting(
        "--apiserver.burst",
        "10",
        "API writes at once (token bucket size)",
        POSITIVE_COUNT,
        aliases=("--api-burst",),
    )
    eviction_timeout: float = setting(
        "--drain.eviction-timeout",
        "30m",
        "how long evictions a PodDisruptionBudget refuses are retried (with backoff, from the "
        "drain's first attempt) before the step fails; the rollback waits without a slot",
        POSITIVE_DURATION,
        aliases=("--eviction-timeout",),
    )
    cleanup_ack_timeout: float = setting(
        "--cleanup.ack-timeout",
        "1m",
        "when a node is unreachable (no fresh Lease) and its agent has not taken up the "
        "cleanup request this long after it was made, a node rollback goes on without it",
        POSITIVE_DURATION,
        aliases=("--cleanup-ack-timeout",),
    )
    cleanup_timeout: float = setting(
        "--cleanup.timeout",
        "5m",
        "how long to wait for the node's agent to finish its runtime cleanup (from the request)",
        POSITIVE_DURATION,
        aliases=("--cleanup-timeout",),
    )
    rollback_retention: float = setting(
        "--rollback.retention",
        "168h",
        "finished NodeRollbacks are deleted this long after they finished",
        POSITIVE_DURATION,
        aliases=("--rollback-retention",),
    )
    leader_elect: bool = setting(
        "--leader-election.enabled",
        "false",
        "execute plans only while holding the leader Lease",
        BOOLEAN,
        aliases=("--leader-elect",),
    )
    leader_elect_namespace: str = setting(
        "--leader-election.namespace",
        "nodesync",
        "namespace of the leader Lease",
        NAME,
        aliases=("--leader-elect-namespace",),
    )
    leader_elect_name: str = setting(
        "--leader-election.name",
        "nodesync-controller",
        "name of the leader Lease",
        NAME,
        aliases=("--leader-elect-name",),
    )
    leader_elect_identity: str = setting(
        "--leader-election.identity",
        "",
        "this controller's identity in the leader Lease (set it to the pod's name); "
        "empty: hostname and process id",
        NAME,
        aliases=("--leader-elect-identity",),
    )
    leader_elect_lease_duration: float = setting(
        "--leader-election.lease-duration",
        "15s",
        "how long the other replicas wait after the leader's last renewal before they take over",
        POSITIVE_DURATION,
        aliases=("--leader-elect-lease-duration",),
    )
    leader_elect_renew_deadline: float = setting(
        "--leader-election.renew-deadline",
        "10s",
        "how long the leader keeps trying to renew before it stops leading",
        POSITIVE_DURATION,
        aliases=("--leader-elect-renew-deadline",),
    )
    leader_elect_retry_period: float = setting(
        "--leader-election.retry-period",
        "2s",
        "how often the leader renews, and the others try to take over",
        POSITIVE_DURATION,
        aliases=("--leader-elect-retry-period",),
    )

    def __post_init__(self) -> None:
        if not (
            self.leader_elect_retry_period
            < self.leader_elect_renew_deadline
            < self.leader_elect_lease_duration
        ):
            raise ValueError(
                "need --leader-election.retry-period < --leader-election.renew-deadline < "
                "--leader-election.lease-duration"
            )
        if self.rollback_retention < self.policy.max_rollbacks_window:
            # The blast-radius budget counts the NodeRollbacks of the window: one deleted
            # before the window ends would no longer count.
            raise ValueError("--rollback.retention must be at least --guard.max-rollbacks-window")

    @property
    def leader_identity(self) -> str:
        return self.leader_elect_identity or default_identity()


@dataclass(frozen=True, slots=True)
class PlanSettings:
    """``nodesync plan``: a payload, the cluster it reads, and the policy it judges by."""

    payload: str = setting(
        "--payload",
        "-",
        "Alertmanager webhook payload (JSON) to plan for; - reads it from stdin",
        PATH,
    )
    kubeconfig: str = KUBECONFIG.field()
    context: str = KUBE_CONTEXT.field()
    wave_label: str = WAVE_LABEL.field()
    wave_gap: float = WAVE_GAP.field()
    policy: GuardPolicy = group(GuardSettings, builds=GuardPolicy)
    output: str = setting(
        "--output",
        "text",
        "text for people, json for tools",
        choice("text", "json"),
    )
