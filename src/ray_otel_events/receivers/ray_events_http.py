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
import logging
import math
from collections.abc import Callable, Sized
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import orjson
from aiohttp import web
from google.protobuf import json_format

from ray_otel_events.encoding.ray_json_decode import event_wires, read_event
from ray_otel_events.metrics import Counters
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.receivers.http_body import BodyError, media_type, read_body
from ray_otel_events.receivers.otlp_http import QueueFullError

logger = logging.getLogger(__name__)

PATH = "/v1/ray-events"
MAX_ERRORS_LISTED = 10

# Counter names.
REQUESTS = "requests"
ACCEPTED_EVENTS = "accepted_events"
REJECTED_EVENTS = "rejected_events"
REFUSED_REQUESTS = "refused_requests"  # labelled status=<HTTP status>


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
        BodyError (400) when the body is not a JSON array."""
        return read_posted_items(body, self.parse_ray_events)[1:]

    @abc.abstractmethod
    async def consume_ray_events(self, events: list[EventT], body: bytes) -> None:
        """Take the events (returning means accepted), or raise QueueFullError. `body` is the
        POST's JSON text (decompressed), for a consumer that keeps what came as it came."""


def parse_event(item: Any) -> RayEvent:
    """One RayEvent from its JSON object; ValueError names the problem."""
    return parse_posted_event(item).event


class PostedEvent(NamedTuple):
    """A RayEvent and the JSON object it was read from, when that object holds the event and
    nothing else (`read_event`): a consumer that needs the event's JSON takes it as it is."""

    event: RayEvent
    json: dict[str, Any] | None


def parse_posted_event(item: Any) -> PostedEvent:
    """`parse_event`, keeping the object when it stands for the event."""
    if not isinstance(item, dict):
        raise ValueError(f"expected a RayEvent object, got {type(item).__name__}")
    try:
        event, whole = read_event(item, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(str(exc)) from None
    if event.event_type == RayEvent.EVENT_TYPE_UNSPECIFIED:
        # ignore_unknown_fields also passes unknown enum names; an event without a type is useless.
        given = item.get("eventType", item.get("event_type"))
        raise ValueError(f"eventType {given!r} is missing or unknown")
    return PostedEvent(event, item if whole else None)


def parse_posted_events(items: list[Any]) -> tuple[list[PostedEvent], list[str]]:
    """`parse_each(items, parse_posted_event)`, the compiled reader run over all items in one loop
    (`event_wires`); the items it does not read whole go through `parse_posted_event`."""
    posted: list[PostedEvent] = []
    errors: list[str] = []
    for index, (item, wire) in enumerate(zip(items, event_wires(items), strict=True)):
        try:
            posted.append(_posted(item, wire))
        except ValueError as exc:
            errors.append(f"[{index}]: {exc}")
    return posted, errors


def parse_posted_item(item: Any) -> PostedEvent:
    """One item of `parse_posted_events` on its own."""
    return _posted(item, event_wires([item])[0])


def _posted(item: Any, wire: bytes | None) -> PostedEvent:
    if wire is not None:
        event = RayEvent.FromString(wire)
        if event.event_type:  # else: parse_posted_event names the missing type
            return PostedEvent(event, item)
    return parse_posted_event(item)


def parse_each(items: list[Any], parse: Callable[[Any], EventT]) -> tuple[list[EventT], list[str]]:
    """The events `parse` reads from items, and an error naming each item it cannot read."""
    events: list[EventT] = []
    errors: list[str] = []
    for index, item in enumerate(items):
        try:
            events.append(parse(item))
        except ValueError as exc:
            errors.append(f"[{index}]: {exc}")
    return events, errors


def read_posted_items(
    body: bytes, parse_all: Callable[[list[Any]], tuple[list[EventT], list[str]]]
) -> tuple[list[Any], list[EventT], list[str]]:
    """A POSTed body as this receiver reads it: the JSON array, the events `parse_all` reads from
    its items, and an error naming each item it cannot read. BodyError (400) when the body is not
    a JSON array."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BodyError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(value, list):
        raise BodyError(400, f"body must be a JSON array of RayEvents, got a JSON {type(value).__name__}")
    events, errors = parse_all(value)
    return value, events, errors


def read_posted_array(
    body: bytes, parse: Callable[[Any], EventT]
) -> tuple[list[Any], list[EventT], list[str]]:
    """`read_posted_items` reading one item at a time with `parse` (the store reads its spooled
    bodies again the same way)."""
    return read_posted_items(body, lambda items: parse_each(items, parse))


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
        self.counters.add(REQUESTS)
        kind = media_type(request)
        if kind != "application/json":
            return self._refuse(
                415, f"unsupported Content-Type {kind!r}: post a JSON array (application/json)"
            )
        try:
            body = await read_body(request, self.max_body_bytes, self.decoded_by_server)
            events, errors = self.consumer.read_ray_events(body)
        except BodyError as exc:
            return self._refuse(exc.status, exc.reason)
        if events:
            try:
                await self.consumer.consume_ray_events(events, body)
            except QueueFullError as exc:
                retry_after = str(max(1, math.ceil(exc.retry_after_s)))
                return self._refuse(503, exc.reason, {"Retry-After": retry_after})
            except Exception:
                logger.exception("RayEvent consumer failed")
                return self._refuse(500, "internal error while handling the events")
        self.counters.add(ACCEPTED_EVENTS, len(events))
        self.counters.add(REJECTED_EVENTS, len(errors))
        answer = {"accepted": len(events), "rejected": len(errors), "errors": errors[:MAX_ERRORS_LISTED]}
        # A POST of 1,000 events parses into some 20,000 objects, a couple of milliseconds to free:
        # freed once the answer is on its way, while the client makes its next request.
        asyncio.get_running_loop().call_soon(_release, events)
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    def _refuse(self, status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
        self.counters.add(REFUSED_REQUESTS, status=str(status))
        return web.Response(
            status=status,
            body=orjson.dumps({"error": reason}),
            content_type="application/json",
            headers=headers,
        )
