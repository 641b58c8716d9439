"""The reads `serve` answers: Ray's dashboard state API, our page's API, and the page itself.

Every GET under `/api/` is answered by `StoreViews.answer` off the event loop (the same answers
our CLI gives from a store file), once the events answered before it are folded (`settled`, at most
READ_WAIT_S), so `ray list tasks --address http://HOST:PORT` and
`ray.util.state.list_tasks(address=...)` work against the store. `/` serves the page and
`/static/...` its files, shipped as package data (no CDN).

Each read answers for one session (`requested_session`): `?session=NAME`, else the session a
browser chose (the `ray_otel_events_session` cookie, which our page's picker sets), else the newest.
Ray's CLI can pass neither, so `ray list tasks --address` answers for the newest session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path

import orjson
from aiohttp import web

from ray_otel_events.services.store_watch import RETRY_AFTER_S, StoreWatch
from ray_otel_events.store.backend import Store, StoreError
from ray_otel_events.store.views import StoreViews

_WEB = resources.files("ray_otel_events") / "web"
SESSION_PARAM = "session"
SESSION_COOKIE = "ray_otel_events_session"
READ_WAIT_S = 10.0  # a read waits this long at most for the fold to reach it, then answers as is
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


def requested_session(request: web.Request, store: Store) -> str | None:
    """The session a request asks for: the `session` query parameter (an unknown one is answered
    404 by the views), else the cookie's when the store still holds it, else None (the newest)."""
    asked = request.query.get(SESSION_PARAM)
    if asked:
        return asked
    chosen = request.cookies.get(SESSION_COOKIE)
    if chosen and chosen in store.sessions():
        return chosen
    return None


class StateApi:
    """aiohttp routes over StoreViews."""

    def __init__(
        self,
        views: StoreViews,
        settled: Callable[[], Awaitable[None]] | None = None,
        watch: StoreWatch | None = None,
    ) -> None:
        self.views = views
        self.settled = settled
        self.watch = watch  # while its store is unreachable, reads answer 503 at once

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.page),
            web.get("/task/{task_id}", self.page),  # the page routes itself; a link can be reloaded
            web.get("/static/{name}", self.static),
            web.get("/api/{tail:.*}", self.api),
        ]

    async def settle(self) -> None:
        """Wait until what was answered before this read is folded (READ_WAIT_S at most)."""
        if self.settled is not None:
            # a fold far behind (or failing, and logged) does not stop reads
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.settled(), READ_WAIT_S)

    async def api(self, request: web.Request) -> web.Response:
        reason = self.watch.unavailable if self.watch is not None else None
        if reason is None:
            await self.settle()
            try:
                status, body = await asyncio.to_thread(self._answer, request)
                return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
            except StoreError as exc:  # the database went away during the read
                reason = str(exc)
                if self.watch is not None:
                    self.watch.failed(reason)
        return web.Response(
            body=orjson.dumps({"result": False, "msg": f"the store is unavailable: {reason}", "data": {}}),
            status=503,
            content_type="application/json",
            headers={"Retry-After": str(int(RETRY_AFTER_S))},
        )

    def _answer(self, request: web.Request) -> tuple[int, object]:
        session = requested_session(request, self.views.store)
        return self.views.answer(request.path, request.query, session)

    async def page(self, _: web.Request) -> web.Response:
        return web.Response(body=(_WEB / "index.html").read_bytes(), content_type="text/html")

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        suffix = name[name.rfind(".") :] if "." in name else ""
        plain = "/" not in name and not name.startswith(".") and suffix in _TYPES
        item = served_file(Path(str(_WEB)), name) if plain else None
        if item is None:
            return web.Response(status=404, text="no such file")
        return web.Response(body=item.read_bytes(), content_type=_TYPES[suffix])


def served_file(root: Path, name: str) -> Path | None:
    """The file `name` names under `root` (resolved: nothing outside it), or None; a name the OS
    cannot take (a NUL, a segment past its length limit) names no file rather than failing."""
    try:
        wanted = (root / name).resolve()
        return wanted if wanted.is_relative_to(root) and wanted.is_file() else None
    except (OSError, ValueError):
        return None
