"""The page at ``/``: the program, its version and its links."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web


def landing_page(
    title: str, description: str, links: Sequence[tuple[str, str]], version: str
) -> Callable[[web.Request], Any]:
    """A handler for ``/``: a small HTML page naming the program and its version, with links to
    ``links`` (path, what it is), as Prometheus' exporters answer ``/`` (exporter-toolkit's
    landing page) instead of 404."""
    rows = "\n".join(
        f'<li><a href="{html.escape(path)}">{html.escape(path)}</a>: {html.escape(what)}</li>'
        for path, what in links
    )
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n<p>{html.escape(description)}</p>\n"
        f"<ul>\n{rows}\n</ul>\n<p>Version {html.escape(version)}</p>\n</body>\n</html>\n"
    ).encode()

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8")

    return handler
