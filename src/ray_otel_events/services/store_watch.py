"""Whether the store's database answers, probed in the background.

Why: a store on a database server can be lost while `serve` runs. While it is, intake answers 503
with Retry-After (Ray's publisher and ours retry the batch later) instead of piling answered POSTs
onto disk, reads answer 503 at once instead of waiting on the fold, and /readyz turns false so a
load balancer sends the traffic to a `serve` that can write. The store reconnects by itself on its
next call; the next probe that succeeds lifts all three. A SQLite file never goes away: the probe
there is reading a counter.
"""

from __future__ import annotations

import asyncio
import logging

from ray_otel_events.store.backend import Store, StoreError

logger = logging.getLogger(__name__)

PROBE_INTERVAL_S = 1.0
RETRY_AFTER_S = 2.0  # what a refused client is told to wait


class StoreWatch:
    """`unavailable`: why the store cannot be reached (None while it can), updated by `run`."""

    def __init__(self, store: Store, interval_s: float = PROBE_INTERVAL_S) -> None:
        self.store = store
        self.interval_s = interval_s
        self.unavailable: str | None = None
        self.losses = 0  # times the store went from reachable to not

    def probe(self) -> None:
        """One probe (on a worker thread: it may wait for a connection)."""
        try:
            _ = self.store.generation
        except StoreError as exc:
            if self.unavailable is None:
                self.losses += 1
                logger.warning("store unavailable: %s", exc)
            self.unavailable = str(exc)
            return
        if self.unavailable is not None:
            logger.warning("store reachable again")
        self.unavailable = None

    def failed(self, reason: str) -> None:
        """A call found the store gone before the probe did."""
        if self.unavailable is None:
            self.losses += 1
            logger.warning("store unavailable: %s", reason)
        self.unavailable = reason

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.probe)
            await asyncio.sleep(self.interval_s)
