"""Building the CLI, and an agent without an API server, load no Kubernetes client: it is a
third of the agent's memory (docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys


def test_the_parser_and_the_agent_app_do_not_import_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "import exporter.cli, exporter.agent.app\n"
        "exporter.cli.get_parser({})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"
