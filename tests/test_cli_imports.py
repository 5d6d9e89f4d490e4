"""What the agent imports: no ``kubernetes`` client package (~18 MiB, a quarter of the agent's
memory, docs/performance.md), neither to build the CLI nor with the API server's view; and
nothing of the controller's or the simulator's, nor what only a rare path needs. Each check runs
in a fresh interpreter and reads ``sys.modules``."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

KUBERNETES_MODULES = "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"


def _run(code: str, *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()


def test_the_parser_and_the_agent_app_do_not_import_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "import exporter.cli, exporter.agent.app\n"
        "exporter.cli.get_parser({})\n" + KUBERNETES_MODULES
    )
    assert _run(code) == "[]"


#: What ``nodesync agent`` never imports on its way to serving, API view included: each was
#: measured at 0.4-2 MiB of the agent's resident memory (docs/performance.md).
NOT_THE_AGENTS = (
    "kubernetes",
    "exporter.controller",  # the controller's settings and the models of their defaults
    "exporter.model.guards",
    "exporter.metrics.nodes",
    "nodesync_sim",  # the commands other packages register
    "importlib.metadata",  # how they are found
    "psutil",  # two numbers of /proc/meminfo
    "exporter.cri.pb.api_pb2_grpc",  # every method of the CRI services bound at once
    "difflib",  # a mistyped flag's hint only
)

#: ``nodesync agent``'s own command line built (the way ``main`` builds it), then what it runs
#: imported: the app, the server, the API side.
AGENT_IMPORTS = """
import contextlib, io, sys
import exporter.cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    exporter.cli.main(["agent", "--help"])
import exporter.agent.app, exporter.agent.api_connection, exporter.serve
"""


def _loaded(prefixes: tuple[str, ...]) -> str:
    """Code printing the loaded modules that are, or are under, one of ``prefixes``."""
    return (
        f"prefixes = {prefixes!r}\n"
        "print(sorted(m for m in sys.modules if any(m == p or m.startswith(p + '.') "
        "for p in prefixes)))\n"
    )


def test_the_agents_command_line_and_app_import_nothing_of_the_other_roles() -> None:
    assert _run(AGENT_IMPORTS + _loaded(NOT_THE_AGENTS)) == "[]"


def test_the_agent_without_its_api_view_imports_no_kube_boundary() -> None:
    """Without --node.name the agent has no API side, and no cleanup (which writes through it):
    neither the kube boundary nor the cleanup is imported by its app."""
    code = "import sys\nimport exporter.agent.app, exporter.serve\n" + _loaded(
        ("exporter.kube", "exporter.agent.cleanup", "exporter.model.cleanup")
    )
    assert _run(code) == "[]"


def test_a_mistyped_flag_still_names_the_flag_it_resembles() -> None:
    """difflib, imported on that path only, still gives the hint."""
    code = (
        "import contextlib, io, sys\n"
        "import exporter.cli\n"
        "err = io.StringIO()\n"
        "with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):\n"
        "    exporter.cli.main(['agent', '--sync.perod', '5s'])\n"
        "print('--sync.period' in err.getvalue())\n"
    )
    assert _run(code) == "True"


def test_every_command_is_still_built_for_the_general_help() -> None:
    """Any command line but one naming the product's command builds every command, the
    registered ones too (their entry points are read then)."""
    code = (
        "import contextlib, io, sys\n"
        "import exporter.cli\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    exporter.cli.main(['--help'])\n"
        "print(all(c in out.getvalue() for c in ('agent', 'controller', 'plan', 'sim')))\n"
    )
    assert _run(code) == "True"


def _closed_port() -> int:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_agent_with_its_api_view_does_not_import_the_kubernetes_client(
    tmp_path: Path,
) -> None:
    """The agent's API side from a kubeconfig (YAML, a token file), its watches built, and one
    request that fails (the error translated): still no kubernetes module loaded."""
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "current-context: here\n"
        "clusters:\n"
        f"- name: here\n  cluster:\n    server: http://127.0.0.1:{_closed_port()}\n"
        "contexts:\n"
        "- name: here\n  context: {cluster: here, user: me}\n"
        "users:\n"
        "- name: me\n  user: {tokenFile: token}\n"
    )
    code = (
        "import asyncio, sys\n"
        "from prometheus_client import CollectorRegistry\n"
        "from exporter.agent.api_connection import connect\n"
        "from exporter.agent.settings import AgentSettings\n"
        "from exporter.kube.errors import Unreachable\n"
        "from exporter.kube.resources import NODES\n"
        "async def main():\n"
        "    settings = AgentSettings(node_name='n1', kubeconfig=sys.argv[1])\n"
        "    side = await connect(settings, CollectorRegistry())\n"
        "    assert side is not None\n"
        "    try:\n"
        "        await side.api.list(NODES)\n"
        "    except Unreachable:\n"
        "        pass\n"
        "    finally:\n"
        "        await side.api.close()\n"
        "asyncio.run(main())\n" + KUBERNETES_MODULES
    )
    assert _run(code, str(kubeconfig)) == "[]"


def test_the_controller_still_imports_and_builds_its_app() -> None:
    """The controller shares exporter.kube: its entry path imports and makes its app."""
    code = (
        "from exporter.controller.app import make_app\n"
        "from exporter.controller.settings import ControllerSettings\n"
        "from exporter.controller.wiring import rollback_extensions\n"
        "from exporter.kube.config import ConfigError\n"
        "make_app(ControllerSettings())\n"
        "print('ok')\n"
    )
    assert _run(code) == "ok"
