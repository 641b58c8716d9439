"""An HTTP sink that appends every event it is POSTed to a JSON Lines file.

It stands in for an external event store in tests and the demo. Routes live in a table: the
catch-all route takes a JSON array of events (what Ray's aggregator posts) on any path; more
specific routes (e.g. OTLP's /v1/traces and /v1/logs) are added with `extra_routes` and win over
the catch-all. `fail_first` answers the first N POSTs on any route with an error status, to
exercise a publisher's retries. Bodies are read (and gunzipped) by `read_body`, under the same
limit after inflation as every other server's: a gzip bomb is stopped as it inflates.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO, Any

import orjson
from aiohttp import web

from ray_otel_events.receivers.http_body import BodyError, read_body

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY_BYTES = 64 * 1024 * 1024  # after inflation, as the other servers'


class JsonLinesSink:
    """Owns the output file and the counters; its handlers are plain aiohttp handlers."""

    def __init__(
        self,
        out_path: str | Path,
        fail_first: int = 0,
        fail_status: int = 503,
        retry_after: str = "",
        delay_s: float = 0.0,
    ) -> None:
        if fail_first < 0:
            raise ValueError(f"fail_first must be >= 0, got {fail_first}")
        if not 400 <= fail_status <= 599:
            raise ValueError(f"fail_status must be an HTTP error status (400-599), got {fail_status}")
        self.out_path = Path(out_path)
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.retry_after = retry_after  # the Retry-After header of the failures, if any
        if delay_s < 0:
            raise ValueError(f"delay must be >= 0, got {delay_s}")
        self.delay_s = delay_s  # seconds every POST takes (a slow destination)
        self.requests = 0
        self.events = 0
        self.rejected = 0
        self.failed_on_purpose = 0
        self._out: IO[bytes] | None = None

    def open(self) -> None:
        self._out = self.out_path.open("ab")

    @property
    def is_open(self) -> bool:
        return self._out is not None

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def write_lines(self, lines: Sequence[bytes]) -> None:
        """Append records (each without its newline) and flush, so readers see whole lines."""
        if self._out is None:
            raise RuntimeError("sink is not open")
        self._out.write(b"".join(line + b"\n" for line in lines))
        self._out.flush()

    @web.middleware
    async def fail_first_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await self._fail_first(request, handler)
        except ConnectionResetError:  # the sender went away mid-POST (killed, say): nothing was written
            return web.json_response({"error": "the connection was lost before the body arrived"}, status=400)

    async def _fail_first(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "POST":
            self.requests += 1
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.requests <= self.fail_first:
                self.failed_on_purpose += 1
                with contextlib.suppress(BodyError):  # read as a real failure would, then dropped
                    await read_body(request, MAX_BODY_BYTES)
                return web.json_response(
                    {"error": f"failing on purpose ({self.requests} of the first {self.fail_first})"},
                    status=self.fail_status,
                    headers={"Retry-After": self.retry_after} if self.retry_after else None,
                )
        return await handler(request)

    async def handle_json_array(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await read_body(request, MAX_BODY_BYTES)
        except BodyError as exc:
            response = web.json_response({"error": exc.reason}, status=exc.status, headers=exc.headers)
            if exc.close:
                response.force_close()
            return response
        try:
            events = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return self._reject(f"body is not valid JSON: {exc}")
        if not isinstance(events, list):
            return self._reject(f"body must be a JSON array of events, got a JSON {type(events).__name__}")
        self.write_lines([orjson.dumps(event) for event in events])
        self.events += len(events)
        return web.json_response({})

    def _reject(self, reason: str) -> web.Response:
        self.rejected += 1
        return web.json_response({"error": reason}, status=400)

    def stats(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "events": self.events,
            "rejected": self.rejected,
            "failed_on_purpose": self.failed_on_purpose,
        }


def build_app(
    sink: JsonLinesSink,
    extra_routes: Sequence[web.RouteDef] = (),
    middlewares: Sequence[Any] = (),
) -> web.Application:
    """The route table: specific routes first, then the catch-all JSON array route. Run it with
    aiohttp's decompression off (`read_body` gunzips)."""
    app = web.Application(client_max_size=0, middlewares=[*list(middlewares), sink.fail_first_middleware])
    app.add_routes([*extra_routes, web.post("/{tail:.*}", sink.handle_json_array)])
    return app
