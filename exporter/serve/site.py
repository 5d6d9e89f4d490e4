"""The listener: aiohttp's TCPSite, but with this layer's protocol factory (the connection cap
and the JSON errors, exporter.serve.connections) and a TLS handshake timeout. TCPSite.start
takes neither, so :meth:`CappedSite.start` is the one method this class replaces."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from aiohttp import web


class CappedSite(web.TCPSite):
    """A TCP listener whose connections ``protocols`` makes; TLS handshakes get
    ``handshake_timeout``."""

    __slots__ = ("_handshake_timeout", "_protocols")

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        protocols: Callable[[], asyncio.Protocol],
        handshake_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self._protocols = protocols
        self._handshake_timeout = handshake_timeout

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registered with the runner (TCPSite.start would listen)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            self._protocols,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_timeout if self._ssl_context else None,
        )
        self._server = server
        self._bound_port = int(server.sockets[0].getsockname()[1]) if server.sockets else self._port
