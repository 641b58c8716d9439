"""Events of Ray releases newer than our protos (Ray 2.60's): types we cannot name.

Ray's main branch after 2.60 adds autoscaler events (types 18-20, `AUTOSCALER_..._EVENT`). Its
aggregator posts their type by name; ours, passing on a number our protos lack, by number. Such an
event is folded into no row and misread as nothing: `serve` keeps it raw with every event and
counts and lists it (`UnknownTypes`, `GET /unrecognized`), the bridge carries it as it came.
Their names are the sender's, so a count by name is bounded: the first MAX_NAMES names are counted
apart, any later one under OTHER.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import orjson

from ray_otel_events.encoding.older_releases import RAY_2_49
from ray_otel_events.events.registry import REGISTRY, event_type_name

MAX_NAMES = 64
OTHER = "other"  # the label of the names beyond MAX_NAMES
KEPT = 1000  # the newest such events listed
KEPT_BYTES = 16 * 1024 * 1024  # ...and their JSON text at most: the oldest go first
EVENT_BYTES = 1024 * 1024  # an event larger than this is listed without its body (`bytes` says)

# The queue type of an event carried as its posted JSON text (the bridge's, for a type our protos
# cannot name): the JSON publisher posts that text as it is (`with_posted_texts`).
POSTED_JSON_TYPE = -1

KNOWN_TYPE_NAMES = frozenset({*(event_type_name(number) for number in REGISTRY), RAY_2_49.event_type})
_TYPE_KEYS = ("eventType", "event_type")  # the names Ray posts and the proto's, both read
_TYPE_VALUE = re.compile(rb'"(?:eventType|event_type)"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9]+)')


def unknown_type(value: Any) -> str | None:
    """An event's type (its `eventType` value) as text when our protos do not know it: a name
    (string) they lack, or a positive number they lack; None for a known type or no type at all."""
    if type(value) is int:
        return str(value) if value > 0 and value not in REGISTRY else None
    return value if isinstance(value, str) and value and value not in KNOWN_TYPE_NAMES else None


def type_of(item: Any) -> Any:
    """An event's `eventType` value, by either name."""
    if not isinstance(item, dict):
        return None
    return next((item[key] for key in _TYPE_KEYS if key in item), None)


def unknown_type_events(bodies: Iterable[bytes]) -> list[tuple[str, dict[str, Any]]]:
    """The events of unknown type in POSTed JSON arrays, with their type as text: each body's type
    values looked at first (one regular expression), and only a body naming an unknown one read."""
    found: list[tuple[str, dict[str, Any]]] = []
    for body in bodies:
        if all(_known(text) for text in set(_TYPE_VALUE.findall(body))):
            continue
        try:
            items = orjson.loads(body)
        except orjson.JSONDecodeError:
            continue
        found += unknown_type_items(items if isinstance(items, list) else [])
    return found


def _known(text: bytes) -> bool:
    """Whether a type value's JSON text is a type our protos know (or no type at all)."""
    try:
        return unknown_type(orjson.loads(text)) is None
    except orjson.JSONDecodeError:  # a number past 64 bits: read with its item, and rejected there
        return True


def unknown_type_items(items: Iterable[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The events of unknown type among accepted events (JSON objects), with their type as text."""
    found: list[tuple[str, dict[str, Any]]] = []
    for item in items:
        name = unknown_type(type_of(item))
        if name is not None and item.get("eventId"):  # one without an id was rejected
            found.append((name, item))
    return found


class UnknownTypes:
    """Events of unknown type: counted by name (bounded, see the module doc) and the newest KEPT
    listed whole, within KEPT_BYTES (the events are the sender's, and a POST may be 64 MiB).
    Added to from any thread."""

    def __init__(self, max_names: int = MAX_NAMES, kept: int = KEPT, kept_bytes: int = KEPT_BYTES) -> None:
        self.max_names = max_names
        self._counts: dict[str, int] = {}
        self._kept = kept
        self._kept_bytes = kept_bytes
        self._newest: deque[tuple[int, dict[str, Any]]] = deque()  # (its text's bytes, entry)
        self._bytes = 0
        self._lock = threading.Lock()

    def _label(self, name: str) -> str:
        """The count `name` goes to."""
        return name if name in self._counts or len(self._counts) < self.max_names else OTHER

    def add(self, found: Iterable[tuple[str, dict[str, Any]]]) -> None:
        now = time.time()
        entries = []
        for name, event in found:
            try:
                size = len(orjson.dumps(event))
            except TypeError:  # not JSON as it stands (the store keeps it anyway): listed without it
                size = EVENT_BYTES + 1
            entry = {"event_type": name, "received": now, "event": event if size <= EVENT_BYTES else None}
            if size > EVENT_BYTES:
                entry["bytes"] = size
                size = 0
            entries.append((name, size, entry))
        with self._lock:
            for name, size, entry in entries:
                label = self._label(name)
                self._counts[label] = self._counts.get(label, 0) + 1
                self._newest.append((size, entry))
                self._bytes += size
                while len(self._newest) > self._kept or self._bytes > self._kept_bytes:
                    self._bytes -= self._newest.popleft()[0]

    def by_name(self) -> dict[str, int]:
        """The counts by name, a copy (the fold thread adds while a scrape reads)."""
        with self._lock:
            return dict(self._counts)

    def listing(self) -> dict[str, Any]:
        """What `GET /unrecognized` answers: the counts by name and the newest events, oldest first."""
        with self._lock:
            return {"event_types": dict(self._counts), "events": [entry for _, entry in self._newest]}


def with_posted_texts(array: bytes, texts: list[bytes]) -> bytes:
    """A JSON array's text with the JSON texts of more items after its own."""
    if not texts:
        return array
    inner = array.strip()[1:-1].strip()
    return b"[" + b",".join([inner, *texts] if inner else texts) + b"]"
