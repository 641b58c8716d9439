"""One shared, bounded copy of the received events, read by several consumers at their own pace.

Same contract as Ray's MultiConsumerEventBuffer (each named consumer sees every event once, in
insertion order; when the buffer is full the oldest event goes, and an eviction of an event a
consumer had not read yet is counted for that consumer and event type), with three differences:

* Bounded by bytes as well as by count: a slow sink cannot grow memory past `max_bytes` (Ray #60826).
* O(1) amortised per event: records sit in two parallel lists read by slicing, positions are
  absolute sequence numbers, so adding or evicting never rewrites every consumer's cursor.
* `close()` makes every `wait_for_batch` return what is left without waiting, so publishers can
  flush the buffer at shutdown instead of losing it.

A record is the event's wire bytes plus its event type number: about 50 bytes of overhead on top
of the serialized event, and ready to be written to disk as it is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ray_otel_events.events.registry import event_type_label
from ray_otel_events.metrics import Counters

# Approximate CPython cost of one record besides its payload: the bytes object header (33) and
# one slot in each of the two lists (2 x 8); small ints are shared.
RECORD_OVERHEAD_BYTES = 49

EVICTED = "evicted"
EVICTION_LOG_INTERVAL_S = 10.0

logger = logging.getLogger(__name__)


class BufferClosedError(RuntimeError):
    """The buffer is shutting down and takes no more events."""


@dataclass(slots=True)
class EventBatch:
    """Events in buffer order: `wires[i]` is the serialized RayEvent whose type number is `types[i]`."""

    wires: list[bytes] = field(default_factory=list)
    types: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)  # durable-queue sequence numbers (durable buffers only)

    def __len__(self) -> int:
        return len(self.wires)


@dataclass(slots=True)
class _Consumer:
    name: str
    cursor: int  # absolute sequence number of the next event this consumer has not read


class MultiConsumerEventBuffer:
    """asyncio-only (not thread-safe): all calls must come from the event loop that owns it."""

    def __init__(
        self,
        max_events: int,
        max_bytes: int,
        counters: Counters | None = None,
        on_evicted: Callable[[list[int]], None] | None = None,
    ) -> None:
        """`on_evicted`: set for a buffer mirroring a durable queue; every record then carries
        its queue sequence number, and evicted records' numbers are passed to it (to delete)."""
        if max_events <= 0 or max_bytes <= 0:
            raise ValueError(f"buffer bounds must be > 0, got max_events={max_events} max_bytes={max_bytes}")
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.counters = counters if counters is not None else Counters("buffer")
        # Live records are _wires[_head:], _types[_head:]; record index i has sequence _start + i.
        self._wires: list[bytes] = []
        self._types: list[int] = []
        self._on_evicted = on_evicted
        self._ids: list[int] = []  # parallel to _wires when on_evicted is set, else empty
        self._head = 0
        self._start = 0
        self._bytes = 0
        self._consumers: dict[str, _Consumer] = {}
        self._last_eviction_log = -EVICTION_LOG_INTERVAL_S
        self._evicted_since_log = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._closed = False

    # -- state ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._wires) - self._head

    @property
    def payload_bytes(self) -> int:
        """The events' own bytes, without the per-record overhead."""
        return self._bytes

    @property
    def size_bytes(self) -> int:
        """Payload bytes plus the per-record overhead, the figure `max_bytes` bounds."""
        return self._bytes + len(self) * RECORD_OVERHEAD_BYTES

    def _end(self) -> int:
        return self._start + len(self._wires)

    def _consumer(self, name: str) -> _Consumer:
        try:
            return self._consumers[name]
        except KeyError:
            raise KeyError(f"unknown consumer {name!r}") from None

    def register_consumer(self, name: str) -> None:
        """A new consumer starts at the oldest event still held."""
        if name in self._consumers:
            raise ValueError(f"consumer {name!r} is already registered")
        self._consumers[name] = _Consumer(name, self._start + self._head)

    # -- adding --------------------------------------------------------------------------------

    def add(self, wire: bytes, event_type: int) -> None:
        self.add_many([wire], [event_type])

    def add_many(self, wires: list[bytes], types: list[int], ids: list[int] | None = None) -> None:
        """Append events in order, evicting the oldest ones beyond either bound."""
        if self._closed:
            raise BufferClosedError("event buffer is closed")
        if len(wires) != len(types):
            raise ValueError(f"{len(wires)} events but {len(types)} event types")
        if (ids is not None) != (self._on_evicted is not None) or (
            ids is not None and len(ids) != len(wires)
        ):
            raise ValueError("a durable buffer takes one queue id per event; a plain one takes none")
        if not wires:
            return
        self._wires.extend(wires)
        self._types.extend(types)
        if ids is not None:
            self._ids.extend(ids)
        self._bytes += sum(map(len, wires))
        self._evict_overflow()
        self._wake()

    def _evict_overflow(self) -> None:
        over = len(self) - self.max_events
        evict_to = self._head + max(0, over)
        if self.size_bytes > self.max_bytes or over > 0:
            # Count-bound first (cheap, sliced), then walk the oldest records for the byte bound.
            removed_bytes = sum(map(len, self._wires[self._head : evict_to]))
            live = len(self._wires) - evict_to
            payload = self._bytes - removed_bytes
            while live > 0 and payload + live * RECORD_OVERHEAD_BYTES > self.max_bytes:
                payload -= len(self._wires[evict_to])
                evict_to += 1
                live -= 1
            self._drop_front(evict_to, count_unread=True)

    def _drop_front(self, new_head: int, count_unread: bool) -> None:
        """Forget records [_head, new_head), counting the ones a consumer had not read."""
        head = self._head
        if new_head <= head:
            return
        new_head_seq = self._start + new_head
        if count_unread and self._on_evicted is not None:
            self._on_evicted(self._ids[head:new_head])
        if count_unread:
            self._log_eviction(new_head - head)
            for consumer in self._consumers.values():
                if consumer.cursor < new_head_seq:
                    first = consumer.cursor - self._start
                    for etype, n in Counter(self._types[first:new_head]).items():
                        self.counters.add(
                            EVICTED, n, consumer=consumer.name, event_type=event_type_label(etype)
                        )
                    consumer.cursor = new_head_seq
        self._bytes -= sum(map(len, self._wires[head:new_head]))
        dropped = new_head - head
        self._wires[head:new_head] = [b""] * dropped  # release the payloads now
        self._head = new_head
        if self._head * 2 >= len(self._wires):
            # Compact once the dead prefix is at least as long as the live part: amortised O(1).
            del self._wires[: self._head]
            del self._types[: self._head]
            del self._ids[: self._head]
            self._start += self._head
            self._head = 0

    def _log_eviction(self, count: int) -> None:
        """One warning per EVICTION_LOG_INTERVAL_S at most: a full buffer evicts on every add."""
        self._evicted_since_log += count
        now = time.monotonic()
        if now - self._last_eviction_log >= EVICTION_LOG_INTERVAL_S:
            logger.warning(
                "buffer full (%d events, %d bytes bound): %d oldest events evicted since the last report",
                self.max_events,
                self.max_bytes,
                self._evicted_since_log,
            )
            self._last_eviction_log = now
            self._evicted_since_log = 0

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _changed(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        await fut

    # -- reading -------------------------------------------------------------------------------

    async def wait_for_batch(self, consumer: str, max_events: int, timeout_s: float) -> EventBatch:
        """Ray's semantics: block (without limit) until one unread event exists, then top the batch
        up until `max_events` or until `timeout_s` has passed since then.

        After `close()` it never blocks and returns what is left (an empty batch when nothing is).
        Cancel-safe: the cursor only moves when the batch is returned.
        """
        state = self._consumer(consumer)
        if max_events <= 0:
            raise ValueError(f"max_events must be > 0, got {max_events}")
        while self._end() - state.cursor == 0 and not self._closed:
            await self._changed()
        if self._end() - state.cursor < max_events and timeout_s > 0 and not self._closed:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            try:
                async with asyncio.timeout_at(deadline):
                    while self._end() - state.cursor < max_events and not self._closed:
                        await self._changed()
            except TimeoutError:
                pass
        return self.take(consumer, max_events)

    def take(self, consumer: str, max_events: int) -> EventBatch:
        """Up to `max_events` unread events for `consumer`, without waiting."""
        state = self._consumer(consumer)
        first = state.cursor - self._start
        last = min(first + max_events, len(self._wires))
        batch = EventBatch(self._wires[first:last], self._types[first:last], self._ids[first:last])
        state.cursor = self._start + last
        self._drop_read()
        return batch

    def _drop_read(self) -> None:
        """Free the events every consumer has read (Ray #57018: without this memory grew to GBs)."""
        if not self._consumers:
            return
        oldest_cursor = min(c.cursor for c in self._consumers.values())
        self._drop_front(oldest_cursor - self._start, count_unread=False)

    def discard_unread(self, consumer: str) -> Counter[int]:
        """Give up on what `consumer` has not read; returns the discarded events per type number."""
        state = self._consumer(consumer)
        first = state.cursor - self._start
        counts = Counter(self._types[first:])
        state.cursor = self._end()
        self._drop_read()
        return counts

    def close(self) -> None:
        """Take no more events and stop blocking readers, so consumers can drain what is held."""
        self._closed = True
        self._wake()
