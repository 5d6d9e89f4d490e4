"""The webhook's flags and settings (the token only from a file or the environment, never shown),
and TLS: the context the CLI hands to the site serves the webhook over HTTPS."""

from __future__ import annotations

import argparse
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from exporter.commandline import add_settings
from exporter.controller.app import make_app
from exporter.controller.settings import (
    TOKEN_ENV,
    ControllerSettings,
    WebhookSettings,
)
from exporter.controller.webhook import WebhookConfigError, tls_context
from exporter.controller.wiring import webhook_extension
from exporter.settings.declare import log_fields
from exporter.settings.values import positive_count
from tests.controller.alert_builders import body
from tests.controller.webhook_support import AUTH, hook_settings


def parse(argv: list[str], environ: dict[str, str] | None = None) -> WebhookSettings:
    parser = argparse.ArgumentParser(prog="nodesync controller", exit_on_error=False)
    add_settings(parser, environ or {}, [WebhookSettings])
    return WebhookSettings.from_args(parser.parse_args(argv), environ or {})


def test_defaults() -> None:
    assert parse([]) == WebhookSettings(
        journal_path="/var/lib/nodesync/journal.db",
        token_file="",
        token="",
        max_body_bytes=1024 * 1024,
        tls_cert_file="",
        tls_key_file="",
        journal_retention=7 * 24 * 3600.0,
    )
    assert not parse([]).has_token


def test_flags_and_environment() -> None:
    settings = parse(
        ["--journal.path", "/data/j.db", "--webhook.max-body-bytes", "4096"],
        {
            "NODESYNC_WEBHOOK_TOKEN_FILE": "/etc/nodesync/token",
            "NODESYNC_WEBHOOK_MAX_BODY_BYTES": "100",
            "NODESYNC_JOURNAL_RETENTION": "24h",
            "NODESYNC_WEBHOOK_TLS_CERT_FILE": "/tls/crt",
            "NODESYNC_WEBHOOK_TLS_KEY_FILE": "/tls/key",
        },
    )
    assert settings == WebhookSettings(
        journal_path="/data/j.db",
        token_file="/etc/nodesync/token",
        max_body_bytes=4096,
        tls_cert_file="/tls/crt",
        tls_key_file="/tls/key",
        journal_retention=86400.0,
    )
    assert settings.has_token
    assert settings.tls


def test_the_token_comes_from_the_environment_and_is_never_shown() -> None:
    settings = parse([], {TOKEN_ENV: " secret-value\n"})
    assert settings.token == "secret-value"
    assert settings.has_token
    assert "secret-value" not in repr(settings)
    assert "token" not in log_fields(settings)
    assert "secret-value" not in str(log_fields(settings))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"token": "t", "token_file": "/f"}, "use one of them"),
        ({"tls_cert_file": "/c"}, "go together"),
        ({"tls_key_file": "/k"}, "go together"),
        ({"max_body_bytes": 0}, "must be positive"),
        ({"journal_retention": 0.0}, "must be positive"),
    ],
)
def test_contradicting_settings_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WebhookSettings(**changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "1MiB", ""])
def test_body_limits_are_positive_whole_numbers(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        positive_count(text)
    with pytest.raises(argparse.ArgumentError):
        parse(["--webhook.max-body-bytes", text])


def test_no_tls_without_files(tmp_path: Path) -> None:
    assert tls_context(hook_settings(tmp_path)) is None
    missing = hook_settings(
        tmp_path, tls_cert_file=str(tmp_path / "no.crt"), tls_key_file=str(tmp_path / "no.key")
    )
    with pytest.raises(WebhookConfigError, match=r"cannot load --webhook\.tls-cert-file"):
        tls_context(missing)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (made with the openssl tool)."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl tool is needed to make a test certificate"
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(crt),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return crt, key


async def test_the_webhook_is_served_over_tls(
    settings: ControllerSettings, tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    crt, key = certificate
    webhook = hook_settings(tmp_path, tls_cert_file=str(crt), tls_key_file=str(key))
    context = tls_context(webhook)
    assert context is not None
    app = make_app(settings, registry=CollectorRegistry(), extensions=[webhook_extension(webhook)])
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    try:
        await web.SockSite(runner, sock, ssl_context=context).start()
        trust = ssl.create_default_context(cafile=str(crt))
        async with aiohttp.ClientSession() as session:
            url = f"https://127.0.0.1:{port}/alerts"
            async with session.post(url, json=body(), headers=AUTH, ssl=trust) as response:
                assert response.status == 200
                assert (await response.json())["new"] == 1
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.post(url, json=body(), headers=AUTH)  # not trusted by default
            with pytest.raises(aiohttp.ClientError):
                await session.post(f"http://127.0.0.1:{port}/alerts", json=body(), headers=AUTH)
    finally:
        await runner.cleanup()
        sock.close()
