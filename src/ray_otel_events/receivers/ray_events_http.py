"""`POST /v1/ray-events`: the JSON arrays of RayEvents a Ray cluster's aggregator posts.

Accepts exactly what Ray 2.60 sends (`Content-Type: application/json`, a JSON array of RayEvent
objects, lowerCamelCase or proto field names, base64 ids, enum names) plus gzip. Ray's publisher
retries any non-2xx answer forever, so an event that can never be read must not fail its batch
(retrying would block Ray's publisher for good): the good events are accepted and the answer (200)
says how many were rejected and why, even when that is all of them. Only a body that is not a JSON
array at all is a 400. Unknown fields are ignored, so a newer Ray's events still go through.

Each consumer chooses how an event is read (`parse_ray_event`): the bridge into a RayEvent
protobuf, the store into the JSON it folds.

Answers: 200 `{"accepted": n, "rejected": m, "errors": [...]}`;
400/413/415 `{"error": reason}`;
503 with `Retry-After` when the consumer's queue is full (Ray's publisher retries the batch).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sized
from typing import Any, Generic, Protocol, TypeVar

from aiohttp import web

from ray_otel_events.encoding.ray_json_posts import NotAnArrayError, parse_each, read_posted_items
from ray_otel_events.metrics import Counters
from ray_otel_events.receivers.json_answers import Refused, hand_over, read_post, refusal, taken

PATH = "/v1/ray-events"

EventT = TypeVar("EventT")


class RayEventsConsumer(abc.ABC, Generic[EventT]):
    """Takes the events of a POST, each first read by `parse_ray_event` into the form it wants."""

    @abc.abstractmethod
    def parse_ray_event(self, item: Any) -> EventT:
        """One event from its JSON value; ValueError names what is wrong with it."""

    def parse_ray_events(self, items: list[Any]) -> tuple[list[EventT], list[str]]:
        """A POST's items: the events read, and an error for each item that cannot be (`parse_each`
        with `parse_ray_event`; a consumer may read them all in one pass, to the same answers)."""
        return parse_each(items, self.parse_ray_event)

    def read_ray_events(self, body: bytes) -> tuple[list[EventT], list[str]]:
        """A POSTed body's events and an error for each item that is not one (`read_posted_items`
        with `parse_ray_events`; a consumer may read the text itself, to the same answers).
        NotAnArrayError (answered 400) when the body is not a JSON array."""
        return read_posted_items(body, self.parse_ray_events)[1:]

    @abc.abstractmethod
    async def consume_ray_events(self, events: list[EventT], body: bytes) -> None:
        """Take the events (returning means accepted), or raise QueueFullError. `body` is the
        POST's JSON text (decompressed), for a consumer that keeps what came as it came."""


def _release(*_objects: object) -> None:
    """Holds what it is given until the event loop runs it: then they are freed."""


BatchT = TypeVar("BatchT", bound=Sized)


class RayEventsReader(Protocol[BatchT]):
    """What the receiver needs of its consumer (a RayEventsConsumer is one, its batch a list): a
    body read into a batch of events (its length, the events accepted) and an error per item that
    cannot be read, then the batch taken. The store keeps a POST's text as its batch."""

    def read_ray_events(self, body: bytes) -> tuple[BatchT, list[str]]: ...

    async def consume_ray_events(self, events: BatchT, body: bytes) -> None: ...


class RayEventsHttpReceiver(Generic[BatchT]):
    def __init__(
        self,
        consumer: RayEventsReader[BatchT],
        max_body_bytes: int,
        decoded_by_server: bool = False,
        counters: Counters | None = None,
    ) -> None:
        self.consumer = consumer
        self.max_body_bytes = max_body_bytes
        self.decoded_by_server = decoded_by_server
        self.counters = counters if counters is not None else Counters("ray_events_receiver")

    def routes(self) -> list[web.RouteDef]:
        return [web.post(PATH, self.handle)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await read_post(
                request,
                self.counters,
                "application/json",
                "a JSON array",
                self.max_body_bytes,
                self.decoded_by_server,
            )
            events, errors = self.consumer.read_ray_events(body)
            if events:
                await hand_over(self.counters, self.consumer.consume_ray_events(events, body), "the events")
        except Refused as refused:
            return refused.response
        except NotAnArrayError as exc:
            return refusal(self.counters, 400, str(exc))
        # A POST of 1,000 events parses into some 20,000 objects, a couple of milliseconds to free:
        # freed once the answer is on its way, while the client makes its next request.
        asyncio.get_running_loop().call_soon(_release, events)
        return taken(self.counters, len(events), errors)
