"""A small HTTP server for /metrics and the probes, for a server whose own port is not HTTP (the
aggregator speaks gRPC only), as Ray's agent exposes its metrics on a port of its own."""

from __future__ import annotations

import ssl
from typing import Any

from aiohttp import web


class AdminHttpServer:
    def __init__(
        self, host: str, port: int, app: web.Application, ssl_context: ssl.SSLContext | None
    ) -> None:
        self.host = host
        self._requested_port = port
        self.port = 0
        self._runner = web.AppRunner(app, access_log=None)
        self._ssl = ssl_context

    async def start(self) -> int:
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self.host, self._requested_port, ssl_context=self._ssl).start()
        except OSError as exc:
            await self._runner.cleanup()
            raise OSError(f"cannot listen for metrics on {self.host}:{self._requested_port}: {exc}") from exc
        address: Any = self._runner.addresses[0]
        self.port = int(address[1])
        return self.port

    async def stop(self) -> None:
        await self._runner.cleanup()
