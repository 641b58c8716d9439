"""The exporters' request bodies: what a server receives when the headers go out before the body."""

from __future__ import annotations

import asyncio
import os

import aiohttp
from aiohttp import web

from ray_otel_events.exporters.transport import WholeBody


async def _post_and_receive(body: bytes) -> tuple[bytes, dict[str, str]]:
    received: dict[str, object] = {}

    async def take(request: web.Request) -> web.Response:
        received["body"] = await request.read()
        received["headers"] = dict(request.headers)
        return web.Response(text="ok")

    app = web.Application(client_max_size=1 << 26)
    app.add_routes([web.post("/v1/logs", take)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://127.0.0.1:{port}/v1/logs",
                data=WholeBody(body, "application/x-protobuf"),
                headers={"Content-Type": "application/x-protobuf", "X-Token": "t"},
            ) as response,
        ):
            assert response.status == 200
            assert await response.text() == "ok"
    finally:
        await runner.cleanup()
    return received["body"], received["headers"]  # type: ignore[return-value]


def test_a_large_body_arrives_whole_with_its_headers() -> None:
    body = os.urandom(3 * 1024 * 1024 + 7)  # larger than a socket buffer takes at once
    got, headers = asyncio.run(_post_and_receive(body))
    assert got == body
    assert headers["Content-Length"] == str(len(body))
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["X-Token"] == "t"


def test_an_empty_body_is_sent_as_empty() -> None:
    got, headers = asyncio.run(_post_and_receive(b""))
    assert got == b""
    assert headers["Content-Length"] == "0"
