"""Ray's own dashboard page, served from the user's `ray` package, answering from the store.

`serve --ray-dashboard-port PORT` adds a second HTTP site to `serve`: `/` and its files come from
the installed package's `ray/dashboard/client/build` (found at run time, never copied here), and
every request the page makes is answered by RayDashboardViews, or, for the state API
(`/api/v0/tasks`, `/api/v0/actors`, ...), by the same StateApi as `serve`'s own port. Ray's CLI
pointed at this port (`ray job list`, `ray logs task`, `ray list tasks`) gets the same answers.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
from aiohttp import web

from ray_otel_events.security.auth import BearerToken, no_authentication_routes
from ray_otel_events.services.state_api import (
    SESSION_COOKIE,
    SESSION_PARAM,
    StateApi,
    requested_session,
    served_file,
)
from ray_otel_events.store.ray_dashboard_views import RayDashboardViews

BUILD = Path("dashboard") / "client" / "build"
_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".png": "image/png",
    ".json": "application/json",
    ".map": "application/json",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
    ".ttf": "font/ttf",
    ".txt": "text/plain",
}


class DashboardUnavailable(RuntimeError):
    """The `ray` package (and so its dashboard page) is not installed."""


def dashboard_build() -> Path:
    """The installed `ray` package's built dashboard page."""
    spec = importlib.util.find_spec("ray")
    origin = spec.origin if spec is not None else None
    build = Path(origin).parent / BUILD if origin else None
    if build is None or not (build / "index.html").is_file():
        raise DashboardUnavailable(
            "Ray's dashboard page comes from the `ray` package, which is not installed here: "
            "pip install 'ray-otel-events[ray]'"
        )
    return build


READ_ONLY = (
    "ray-otel-events serve answers from stored events of Ray clusters; it cannot {what}. "
    "Give Ray's CLI the live cluster's dashboard address (http://HEAD:8265)."
)


class RayDashboard:
    """aiohttp routes for Ray's page and its requests (`build`: the page's files; None where only
    Ray's CLI is answered, on `serve`'s main port)."""

    def __init__(self, answers: RayDashboardViews, state_api: StateApi, build: Path | None) -> None:
        self.answers = answers
        self.state_api = state_api
        self.build = build.resolve() if build is not None else Path()

    def cli_routes(self) -> list[web.RouteDef]:
        """What Ray's CLI asks a dashboard (`ray job list|status|logs`, `ray list jobs`,
        `ray list cluster-events`), answered alike on both of `serve`'s ports; what would change a
        cluster (`ray job submit|stop|delete`) is refused, saying why."""
        return [
            web.get("/api/jobs/{job_id}/logs/tail", self.tail_job_logs),
            web.get("/api/jobs{tail:(/.*)?}", self.read),
            web.get("/api/v0/jobs", self.read),
            web.get("/api/v0/cluster_events", self.read),
            web.post("/api/jobs/", self.refuse("submit jobs")),
            web.post("/api/jobs/{job_id}/stop", self.refuse("stop jobs")),
            web.delete("/api/jobs/{job_id}", self.refuse("delete jobs")),
            web.put("/api/packages/{tail:.*}", self.refuse("take a job's working directory")),
        ]

    @staticmethod
    def refuse(what: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def refused(_: web.Request) -> web.Response:
            return web.Response(status=405, text=READ_ONLY.format(what=what))

        return refused

    async def tail_job_logs(self, request: web.Request) -> web.StreamResponse:
        """`ray job logs --follow`: the answer `ray job logs` gives, then the end of the stream."""
        await self.state_api.settle()
        session = requested_session(request, self.answers.views.store)
        path = f"/api/jobs/{request.match_info['job_id']}/logs"
        found = await asyncio.to_thread(self.answers.answer, path, request.query, session)
        status, body = found if found is not None else (404, "no such job")
        if status != 200 or not isinstance(body, dict):
            return web.Response(status=status, text=str(body))
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_str(str(body["logs"]))
        await socket.close()
        return socket

    def app(self, token: BearerToken | None = None) -> web.Application:
        """With a token, every request but the page's own files carries it, as on Ray's dashboard;
        Ray's `/api/authentication_mode` tells the page whether to ask for one."""
        if token is None:
            app = web.Application()
            app.add_routes(no_authentication_routes())
        else:
            shell = [f"/{p.name}" for p in self.build.iterdir() if p.is_file()]
            opened = copy.copy(token).open_pages(["/", *shell], ("/static/", "/speedscope-"))
            app = web.Application(middlewares=[opened.http_middleware()])
            app.add_routes(token.http_routes())
        app.add_routes(self.cli_routes())
        app.add_routes(
            [
                web.get("/", self.index),
                web.get("/{tail:(api|logical|nodes|events|timezone|usage_stats_enabled).*}", self.read),
                web.get("/{path:.+}", self.file),
            ]
        )
        return app

    async def read(self, request: web.Request) -> web.StreamResponse:
        """Ours where RayDashboardViews knows the path; the state API's otherwise."""
        await self.state_api.settle()
        session = requested_session(request, self.answers.views.store)
        found = await asyncio.to_thread(self.answers.answer, request.path, request.query, session)
        if found is None:
            return await self.state_api.api(request)
        status, body = found
        if isinstance(body, str):
            headers = (
                {"Content-Disposition": 'attachment; filename="file.txt"'}
                if "/logs/" in request.path
                else None
            )
            return web.Response(text=body, status=status, content_type="text/plain", headers=headers)
        return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")

    async def index(self, request: web.Request) -> web.Response:
        """Ray's page; `/?session=NAME` picks the session every later request of the page is about
        (a cookie, as the History Server does), `/?session=` goes back to the newest."""
        response = web.Response(body=(self.build / "index.html").read_bytes(), content_type="text/html")
        if SESSION_PARAM in request.query:
            chosen = request.query[SESSION_PARAM]
            if chosen:
                response.set_cookie(SESSION_COOKIE, chosen, path="/", samesite="Lax")
            else:
                response.del_cookie(SESSION_COOKIE, path="/")
        return response

    async def file(self, request: web.Request) -> web.Response:
        """A file of the built page; nothing outside it."""
        wanted = served_file(self.build, request.match_info["path"])
        if wanted is None:
            return web.Response(status=404, text="no such file")
        kind = _TYPES.get(wanted.suffix, "application/octet-stream")
        return web.Response(body=wanted.read_bytes(), content_type=kind)


def ray_page_elsewhere(host: str, page_port: list[int]) -> Callable[[web.Request], Awaitable[web.Response]]:
    """What `serve`'s main port answers for the requests of Ray's page (`/logical/actors`,
    `/nodes`, `/events`): where that page is served, as a 404 that names the port."""

    async def elsewhere(request: web.Request) -> web.Response:
        where = (
            f"on serve's --ray-dashboard-port: http://{host}:{page_port[0]}{request.path_qs}"
            if page_port
            else "only when serve is started with --ray-dashboard-port PORT"
        )
        return web.Response(status=404, text=f"Ray's dashboard page and its requests are answered {where}")

    return elsewhere
