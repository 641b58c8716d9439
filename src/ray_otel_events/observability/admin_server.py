"""A small HTTP server for /metrics and the probes, for a server whose own port is not HTTP (the
aggregator speaks gRPC only), as Ray's agent exposes its metrics on a port of its own."""

from __future__ import annotations

import ssl
from typing import Any

from aiohttp import web

from ray_otel_events.security.http_limits import ServerGuard


class AdminHttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        app: web.Application,
        ssl_context: ssl.SSLContext | None,
        guard: ServerGuard,
    ) -> None:
        self.host = host
        self._requested_port = port
        self.port = 0
        self._guard = guard
        self._runner = guard.runner(app)
        self._ssl = ssl_context

    async def start(self) -> int:
        await self._runner.setup()
        try:
            await self._guard.listen(self._runner, self.host, self._requested_port, self._ssl)
        except OSError as exc:
            await self._runner.cleanup()
            raise OSError(f"cannot listen for metrics on {self.host}:{self._requested_port}: {exc}") from exc
        address: Any = self._runner.addresses[0]
        self.port = int(address[1])
        return self.port

    async def stop(self) -> None:
        await self._runner.cleanup()
