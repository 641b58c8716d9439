"""A POSTed JSON array of RayEvents (what Ray's aggregator sends) read into events, item by item.

One item that cannot be read never fails the others: each reader returns the events it read and an
error naming each item it could not (`[index]: reason`). Only a body that is not a JSON array at all
is refused whole (NotAnArrayError). The HTTP receiver, the bridge's converter and the store read
POSTs through these functions, so their answers agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import orjson
from google.protobuf import json_format

from ray_otel_events.encoding.older_releases import as_current
from ray_otel_events.encoding.ray_json_decode import event_wires, read_event
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

EventT = TypeVar("EventT")


class NotAnArrayError(Exception):
    """A POSTed body that is not a JSON array: the whole request is refused (HTTP 400, this reason)."""


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
    current = as_current(item)  # an older Ray's event, by its JSON names, as 2.60 sends it
    try:
        event, whole = read_event(current, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(str(exc)) from None
    if event.event_type == RayEvent.EVENT_TYPE_UNSPECIFIED:
        # ignore_unknown_fields also passes unknown enum names; an event without a type is useless.
        given = item.get("eventType", item.get("event_type"))
        raise ValueError(f"eventType {given!r} is missing or unknown")
    return PostedEvent(event, item if whole and current is item else None)


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
    its items, and an error naming each item it cannot read. NotAnArrayError when the body is not
    a JSON array."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise NotAnArrayError(f"body is not valid JSON: {exc}") from None
    if not isinstance(value, list):
        raise NotAnArrayError(f"body must be a JSON array of RayEvents, got a JSON {type(value).__name__}")
    events, errors = parse_all(value)
    return value, events, errors


def read_posted_array(
    body: bytes, parse: Callable[[Any], EventT]
) -> tuple[list[Any], list[EventT], list[str]]:
    """`read_posted_items` reading one item at a time with `parse` (the store reads its spooled
    bodies again the same way)."""
    return read_posted_items(body, lambda items: parse_each(items, parse))
