"""A bounded window of recently seen event ids, so a retried batch is not counted twice.

Ray's producers retry a whole AddEvents batch when the reply is lost, and a restarted aggregator
replays what it had on disk: both deliver some events again. Ids are forgotten oldest first, so
memory stays bounded; a duplicate older than the window passes (at-least-once, never lost).
"""

from __future__ import annotations

from collections import OrderedDict


class RecentIds:
    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def first_sighting(self, event_id: bytes) -> bool:
        """True (and remembered) the first time an id is seen; events without an id always pass."""
        if not event_id or self.capacity == 0:
            return True
        seen = self._seen
        if event_id in seen:
            return False
        seen[event_id] = None
        if len(seen) > self.capacity:
            seen.popitem(last=False)
        return True

    def forget(self, event_ids: list[bytes]) -> None:
        for event_id in event_ids:
            self._seen.pop(event_id, None)
