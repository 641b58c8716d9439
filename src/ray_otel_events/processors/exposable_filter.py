"""Which event types a destination may see (Ray's EXPOSABLE_EVENT_TYPES).

Ray maps each type number to its enum name and raises on a number its enum does not know, which
kills the publisher (ray_anchor §3.11). Here the check is on numbers: an unknown number is simply
not in an explicit list (filtered and counted), and passes when the list is ALL.
"""

from __future__ import annotations

from ray_otel_events.processors.event_buffer import EventBatch


class ExposableFilter:
    """`allowed=None` means ALL: every type, known to this schema or not."""

    def __init__(self, allowed: frozenset[int] | None) -> None:
        self.allowed = allowed

    def split(self, batch: EventBatch) -> tuple[EventBatch, EventBatch]:
        """(the events to publish, the events filtered out), order kept."""
        allowed = self.allowed
        if allowed is None or allowed.issuperset(batch.types):
            return batch, EventBatch()  # the common case: one C-level set check, no per-event Python
        kept = EventBatch()
        dropped = EventBatch()
        ids = batch.ids or [0] * len(batch.wires)
        for wire, etype, seq in zip(batch.wires, batch.types, ids, strict=True):
            target = kept if etype in allowed else dropped
            target.wires.append(wire)
            target.types.append(etype)
            if batch.ids:
                target.ids.append(seq)
        return kept, dropped
