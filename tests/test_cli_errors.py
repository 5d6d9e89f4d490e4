"""Configuration mistakes at a terminal, run as a user runs them (``python -m exporter ...`` in a
process): each is one error line naming the flag (or variable), exit code 2, no traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.controller.alert_builders import body

ROOT = Path(__file__).resolve().parent.parent
#: A deadline for a process that should stop at once, not a synchronisation.
DEADLINE = 60.0


def clean_environment(home: Path, **extra: str) -> dict[str, str]:
    """No NODESYNC_*, KUBECONFIG or in-cluster variables; HOME a directory of the test's."""
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("NODESYNC_", "KUBERNETES_")) and name != "KUBECONFIG"
    }
    environ.update(HOME=str(home), PYTHONPATH=str(ROOT), **extra)
    return environ


def nodesync(argv: list[str], environ: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *argv],
        env=dict(environ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def error_line(process: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a process that refused its configuration."""
    assert process.returncode == 2, (process.returncode, process.stderr)
    assert "Traceback" not in process.stderr, process.stderr
    errors = [
        line
        for line in process.stderr.splitlines()
        if " ERROR " in line or ": error:" in line or line.startswith("nodesync plan:")
    ]
    assert len(errors) == 1, process.stderr
    return errors[0]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A well-formed kubeconfig whose server refuses connections: the controller starts (its
    watch retries in the background) up to the point under test."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_agent_on_a_busy_port(home: Path, busy_port: int) -> None:
    process = nodesync(
        ["agent", "--web.listen-address", f"127.0.0.1:{busy_port}"], clean_environment(home)
    )
    line = error_line(process)
    assert f"--web.listen-address 127.0.0.1:{busy_port}: address already in use" in line


def test_controller_on_a_busy_port(
    home: Path, busy_port: int, unreachable_kubeconfig: Path
) -> None:
    argv = ["controller", "--web.listen-address", f"127.0.0.1:{busy_port}"]
    process = nodesync(
        [*argv, "--kubeconfig", str(unreachable_kubeconfig)], clean_environment(home)
    )
    line = error_line(process)
    assert f"--web.listen-address 127.0.0.1:{busy_port}: address already in use" in line


@pytest.mark.parametrize(
    ("content", "words"),
    [
        pytest.param(None, "no such file or directory", id="missing"),
        pytest.param("clusters: [\n  - {", "cannot load the kubeconfig", id="not-yaml"),
        pytest.param("current-context: nowhere\n", "no context named 'nowhere'", id="no-context"),
    ],
)
@pytest.mark.parametrize("command", ["controller", "plan"])
def test_an_unusable_kubeconfig_names_the_flag(
    home: Path, tmp_path: Path, command: str, content: str | None, words: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content)
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps(body()))
    argv = [command, "--kubeconfig", str(kubeconfig)]
    if command == "plan":
        argv += ["--payload", str(payload)]
    else:
        argv += ["--web.listen-address", "127.0.0.1:0"]
    line = error_line(nodesync(argv, clean_environment(home)))
    assert f"--kubeconfig {kubeconfig}: " in line
    assert words in line


def test_a_kubeconfig_variable_naming_no_file_names_the_variable(
    home: Path, tmp_path: Path
) -> None:
    missing = f"{tmp_path}/a:{tmp_path}/b"
    environ = clean_environment(home, KUBECONFIG=missing)
    line = error_line(nodesync(["controller", "--web.listen-address", "127.0.0.1:0"], environ))
    assert f"KUBECONFIG={missing}: " in line
    assert "none of the kubeconfig files exists" in line


def test_no_kubeconfig_outside_a_cluster_says_where_it_looked(home: Path) -> None:
    environ = clean_environment(home)
    line = error_line(nodesync(["controller", "--web.listen-address", "127.0.0.1:0"], environ))
    assert "no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config)" in line
    assert "not running in a cluster" in line


@pytest.mark.parametrize(
    "endpoint",
    [
        "/run/containerd/containerd.sock",
        "tcp://",
        "tcp://10.0.0.1:2375",
        "npipe:////./pipe/containerd",
        "unix://",
        "unix://run/containerd.sock",
        "",
    ],
)
def test_a_malformed_cri_endpoint_is_refused_at_parse_time(home: Path, endpoint: str) -> None:
    line = error_line(nodesync(["agent", "--cri.endpoint", endpoint], clean_environment(home)))
    assert line.startswith("nodesync agent: error: argument --cri.endpoint: invalid endpoint")


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        (["controller", "--journal.retention", "a week"], {}, "--journal.retention"),
        (["agent", "--sync.period", "1h30"], {}, "--sync.period"),
        (["agent"], {"NODESYNC_CRI_TIMEOUT": "5 s"}, "NODESYNC_CRI_TIMEOUT"),
    ],
)
def test_a_bad_duration_names_the_flag(
    home: Path, argv: list[str], environ: dict[str, str], named: str
) -> None:
    line = error_line(nodesync(argv, clean_environment(home, **environ)))
    assert named in line
    assert "invalid duration" in line


def test_an_abbreviated_flag_is_refused_naming_the_flag(home: Path) -> None:
    line = error_line(nodesync(["agent", "--web.listen-addres", ":0"], clean_environment(home)))
    assert "unrecognized arguments: --web.listen-addres" in line
    assert "did you mean --web.listen-address?" in line


def test_a_journal_that_cannot_be_opened_names_the_flag(
    home: Path, tmp_path: Path, unreachable_kubeconfig: Path
) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    journal = not_a_directory / "journal.db"
    argv = ["controller", "--web.listen-address", "127.0.0.1:0", "--journal.path", str(journal)]
    argv += ["--kubeconfig", str(unreachable_kubeconfig)]
    environ = clean_environment(home, NODESYNC_WEBHOOK_TOKEN="secret")
    line = error_line(nodesync(argv, environ))
    assert f"--journal.path {journal}: " in line
    assert "journal: journal" not in line
