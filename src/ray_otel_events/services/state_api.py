"""The state service: RayEvent JSON in at `/v1/ray-events`, Ray's dashboard state API out.

Intake is what Ray's aggregator (or ours, or the bridge's route) POSTs: a JSON array of RayEvents,
folded into the store before the POST is answered, so a 200 means stored. Out: `GET /api/version`
(what Ray's clients check first), `GET /api/v0/{resource}` with Ray's query parameters, and
`/api/v0/{tasks,actors}/summarize`, answered in the dashboard's envelope, so `ray list tasks
--address http://HOST:PORT` and `ray.util.state.list_tasks(address=...)` work against the store.
A bad query gets Ray's error shape with 400; a bad POST a 400 naming the problem.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from ray_otel_events.receivers.http_body import BodyError, read_body
from ray_otel_events.store import state_query
from ray_otel_events.store.sqlite_store import EventStore
from ray_otel_events.store.state_merge import ACTORS, TASKS, Row

RAY_VERSION = "2.60.0"  # the state API contract we answer to
MAX_BODY_BYTES = 64 * 1024 * 1024


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _summary(total: int, result: dict[str, Any]) -> dict[str, Any]:
    """Ray's SummaryApiResponse: nothing is truncated or filtered in a summary."""
    return {
        "total": total,
        "num_after_truncation": total,
        "num_filtered": total,
        "result": result,
        "partial_failure_warning": "",
        "warnings": None,
    }


class StateApi:
    """The aiohttp handlers over one EventStore; the store's calls run off the event loop."""

    def __init__(self, store: EventStore, *, session_name: str = "ray-otel-events") -> None:
        self.store = store
        self.session_name = session_name
        self.posts = 0
        self.events_stored = 0
        self.duplicates = 0
        self.rejected = 0

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/ray-events", self.ingest),
            web.get("/api/version", self.version),
            web.get("/api/v0/tasks/summarize", self.summarize_tasks),
            web.get("/api/v0/actors/summarize", self.summarize_actors),
            web.get("/api/v0/{resource}", self.list_resource),
        ]

    async def ingest(self, request: web.Request) -> web.Response:
        try:
            body = await read_body(request, MAX_BODY_BYTES)
        except BodyError as exc:
            self.rejected += 1
            return web.Response(status=exc.status, text=exc.reason)
        try:
            events = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            self.rejected += 1
            return web.Response(status=400, text=f"body is not JSON: {exc}")
        if not isinstance(events, list):
            self.rejected += 1
            return web.Response(status=400, text="body must be a JSON array of RayEvents")
        result = await asyncio.to_thread(self.store.ingest, events)
        self.posts += 1
        self.events_stored += result.stored
        self.duplicates += result.duplicates
        if result.invalid:
            # The valid events of the batch are stored; say what was not.
            return web.Response(
                status=400,
                text=f"{len(result.invalid)} event(s) not stored: {result.invalid[0]}"
                f" ({result.stored} stored, {result.duplicates} duplicates)",
            )
        return _json({"stored": result.stored, "duplicates": result.duplicates, "ignored": result.ignored})

    async def _rows(self, resource: str) -> list[Row]:
        return await asyncio.to_thread(lambda: [stored.data for stored in self.store.rows(resource)])

    async def version(self, _: web.Request) -> web.Response:
        return _json(
            {
                "version": "4",
                "ray_version": RAY_VERSION,
                "ray_commit": "ray-otel-events",
                "session_name": self.session_name,
            }
        )

    async def list_resource(self, request: web.Request) -> web.Response:
        resource = request.match_info["resource"]
        try:
            query = state_query.parse_query(resource, request.query)
        except state_query.QueryError as exc:
            return _json(state_query.envelope(None, ok=False, message=str(exc)), status=400)
        rows = await self._rows(resource)
        return _json(state_query.envelope(state_query.list_response(query, rows)))

    async def summarize_tasks(self, _: web.Request) -> web.Response:
        rows = await self._rows(TASKS)
        return _json(state_query.envelope(_summary(len(rows), state_query.summarize_tasks(rows))))

    async def summarize_actors(self, _: web.Request) -> web.Response:
        rows = await self._rows(ACTORS)
        return _json(state_query.envelope(_summary(len(rows), state_query.summarize_actors(rows))))

    def stats(self) -> dict[str, int]:
        return {
            "posts": self.posts,
            "events_stored": self.events_stored,
            "duplicates": self.duplicates,
            "rejected_posts": self.rejected,
        }
