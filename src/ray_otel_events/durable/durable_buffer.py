"""The in-memory buffer with every accepted event also on disk: what the receiver writes to when
`--queue-dir` is set. Memory stays the working copy the publishers read; the disk copy is what a
restart replays, so the two share one bound (the buffer's), and an event evicted from memory is
deleted from disk in the same step (counted once, as evicted)."""

from __future__ import annotations

from ray_otel_events.durable.recent_ids import RecentIds
from ray_otel_events.durable.sqlite_queue import SqliteEventQueue
from ray_otel_events.processors.event_buffer import MultiConsumerEventBuffer
from ray_otel_events.protobuf.add_events_views_pb2 import EventTypeView


class DurableBuffer:
    def __init__(self, queue: SqliteEventQueue, buffer: MultiConsumerEventBuffer) -> None:
        self.queue = queue
        self.buffer = buffer
        self._memory_bound = buffer.max_bytes
        self.replayed = 0

    def add_many(self, wires: list[bytes], types: list[int]) -> None:
        """On disk first (committed), then in memory: an acknowledged event survives kill -9."""
        self._bound_memory_by_disk()  # before the append: what is on disk now and not in memory
        seqs = self.queue.append(wires, types)
        self.buffer.add_many(wires, types, seqs)

    def _bound_memory_by_disk(self) -> None:
        """The file holds the buffer plus the batches publishers are sending; give the buffer what
        is left of the disk bound, so evicting its oldest events keeps the file within bound."""
        in_flight = max(0, self.queue.size_bytes - self.buffer.payload_bytes)
        self.buffer.max_bytes = max(1, min(self._memory_bound, self.queue.max_bytes - in_flight))

    def replay(self, recent: RecentIds | None) -> int:
        """Load what a previous run left on disk into the buffer (and its ids into the de-dup
        window, so a producer's retry of the same batch is recognised). Call before serving."""
        stored = self.queue.read_all()
        if recent is not None:
            for wire in stored.wires:
                recent.first_sighting(EventTypeView.FromString(wire).event_id)
        self.buffer.max_bytes = min(self._memory_bound, self.queue.max_bytes)  # nothing in flight yet
        self.buffer.add_many(stored.wires, stored.types, stored.seqs)
        self.replayed = len(stored.wires)
        return self.replayed
