"""What both roles serve besides their own metrics: the landing page on ``/`` and the
``process_*`` families, checked the same way for each."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from exporter import __version__
from tests.metrics.promtool import PROCESS_FAMILIES, check_metrics


async def check_landing_page_and_process_metrics(client: Any, role: str) -> None:
    """``client`` (aiohttp's test client of the role's app) answers ``/`` with an HTML page
    naming ``nodesync <role>`` and its version and linking its endpoints, and ``/metrics`` with
    the process families, which promtool accepts."""
    page = await client.get("/")
    assert page.status == 200
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    text = await page.text()
    assert f"<title>nodesync {role}</title>" in text
    for path in ("/metrics", "/healthz", "/readyz"):
        assert f'<a href="{path}">' in text
    assert f"Version {__version__}" in text
    assert (await client.get("/nowhere")).status == 404
    response = await client.get("/metrics")
    assert response.status == 200
    exposition = await response.text()
    names = {f.name for f in text_string_to_metric_families(exposition)}
    assert names >= PROCESS_FAMILIES
    check_metrics(exposition)
