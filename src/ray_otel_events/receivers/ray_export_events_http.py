"""`POST /v1/ray-export-events`: Ray's Export API events, as the per-node collector ships them
(`encoding.ray_export_events` reads the body).

Answered as `/v1/ray-events` answers (the collector retries what is not a 200, at least once): 200
`{"accepted": n, "rejected": m, "errors": [...]}` once the consumer has taken the events (`serve`:
stored; the bridge: handed to its exporter), an event that cannot be read rejected and named, the
rest taken; 400/413/415 `{"error": reason}` for a body that is not the collector's object; 503 with
`Retry-After` when the consumer cannot take them now.
"""

from __future__ import annotations

import abc
import logging

import orjson
from aiohttp import web

from ray_otel_events.encoding.ray_export_events import BadExportPost, ExportPost, read_export_post
from ray_otel_events.metrics import Counters
from ray_otel_events.receivers.http_body import BodyError, media_type, read_body
from ray_otel_events.receivers.json_refusals import (
    body_refusal,
    queue_full_refusal,
    refusal,
)
from ray_otel_events.receivers.otlp_http import QueueFullError
from ray_otel_events.receivers.ray_events_http import (
    ACCEPTED_EVENTS,
    MAX_ERRORS_LISTED,
    REJECTED_EVENTS,
    REQUESTS,
)

logger = logging.getLogger(__name__)

PATH = "/v1/ray-export-events"


class ExportEventsConsumer(abc.ABC):
    @abc.abstractmethod
    async def consume_export_events(self, post: ExportPost) -> None:
        """Take the POST's entities (returning means taken for good), or raise QueueFullError."""


class RayExportEventsHttpReceiver:
    def __init__(
        self, consumer: ExportEventsConsumer, max_body_bytes: int, decoded_by_server: bool = False
    ) -> None:
        self.consumer = consumer
        self.max_body_bytes = max_body_bytes
        self.decoded_by_server = decoded_by_server
        self.counters = Counters("ray_export_events_receiver")

    def routes(self) -> list[web.RouteDef]:
        return [web.post(PATH, self.handle)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.counters.add(REQUESTS)
        kind = media_type(request)
        if kind != "application/json":
            return refusal(
                self.counters, 415, f"unsupported Content-Type {kind!r}: post the collector's JSON object"
            )
        try:
            body = await read_body(request, self.max_body_bytes, self.decoded_by_server)
            post = read_export_post(body)
        except BodyError as exc:
            return body_refusal(self.counters, exc)
        except BadExportPost as exc:
            return refusal(self.counters, 400, str(exc))
        if post.entities:
            try:
                await self.consumer.consume_export_events(post)
            except QueueFullError as exc:
                return queue_full_refusal(self.counters, exc)
            except Exception:
                logger.exception("export-event consumer failed")
                return refusal(self.counters, 500, "internal error while handling the events")
        self.counters.add(ACCEPTED_EVENTS, len(post.entities))
        self.counters.add(REJECTED_EVENTS, len(post.errors))
        answer = {
            "accepted": len(post.entities),
            "rejected": len(post.errors),
            "errors": post.errors[:MAX_ERRORS_LISTED],
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")
