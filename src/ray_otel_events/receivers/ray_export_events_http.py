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

from aiohttp import web

from ray_otel_events.encoding.ray_export_events import BadExportPost, ExportPost, read_export_post
from ray_otel_events.metrics import Counters
from ray_otel_events.receivers.json_answers import Refused, hand_over, read_post, refusal, taken

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
        try:
            body = await read_post(
                request,
                self.counters,
                "application/json",
                "the collector's JSON object",
                self.max_body_bytes,
                self.decoded_by_server,
            )
            post = read_export_post(body)
            if post.entities:
                await hand_over(self.counters, self.consumer.consume_export_events(post), "the events")
        except Refused as refused:
            return refused.response
        except BadExportPost as exc:
            return refusal(self.counters, 400, str(exc))
        return taken(self.counters, len(post.entities), post.errors)
