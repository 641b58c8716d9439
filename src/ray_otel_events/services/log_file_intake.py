"""What `serve` takes in of a node's log files (`ray-otel-events collect`): chunks into the store.

While the store's database cannot be reached (`StoreWatch`), or SQLite is busy, the answer is 503
with Retry-After, and the collector keeps its offset until the chunk is stored.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from ray_otel_events.receivers.otlp_http import QueueFullError
from ray_otel_events.receivers.ray_log_files_http import (
    ACCEPTED_BYTES,
    LogChunkConsumer,
    RayLogFilesHttpReceiver,
)
from ray_otel_events.services.store_watch import RETRY_AFTER_S, StoreWatch
from ray_otel_events.store.backend import Store, StoreBusy, StoreUnavailable


class LogFileIntake(LogChunkConsumer):
    def __init__(self, store: Store, watch: StoreWatch | None = None) -> None:
        self.store = store
        self.watch = watch
        self.receiver = RayLogFilesHttpReceiver(self)

    def routes(self) -> list[web.RouteDef]:
        return self.receiver.routes()

    @property
    def stored_bytes(self) -> int:
        return self.receiver.counters.get(ACCEPTED_BYTES)

    async def consume_log_chunk(self, session: str, node: str, file: str, start: int, data: bytes) -> None:
        reason = self.watch.unavailable if self.watch is not None else None
        if reason is not None:
            raise QueueFullError(f"the store is unavailable: {reason}", RETRY_AFTER_S)
        try:
            await asyncio.to_thread(self.store.add_log_chunk, session, node, file, start, data)
        except StoreUnavailable as exc:
            if self.watch is not None:
                self.watch.failed(str(exc))
            raise QueueFullError(f"the store is unavailable: {exc}", RETRY_AFTER_S) from None
        except StoreBusy as exc:
            raise QueueFullError(f"the store is busy: {exc}", RETRY_AFTER_S) from None
