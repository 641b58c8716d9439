"""The batch loop shared by every destination: read from the buffer, filter, encode, send, retry.

One `EventPublisher` per destination, each a consumer of the shared buffer, so a slow destination
only holds back itself. What differs per destination (the payload and how it is sent) sits behind
`PublisherClient`; the HTTP JSON client is one, a binary dashboard-head or OTLP client slots in the
same way.

Backoff follows Ray's RayEventPublisher (initial 0.01 s, doubled per failure from n=1, capped, with
uniform jitter, -1 = forever); what is retried follows the Collector (exporters/retry.py). Unlike
Ray, an event never disappears without a counter: every event the publisher reads ends in exactly
one of PUBLISHED, FILTERED, ENCODE_FAILED, DROPPED_AFTER_RETRIES, DROPPED_AT_SHUTDOWN or REJECTED,
and on shutdown the publisher flushes what the buffer still holds.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ray_otel_events.events.registry import event_type_label
from ray_otel_events.exporters.retry import RetryPolicy, failure_status, is_retryable
from ray_otel_events.metrics import Counters
from ray_otel_events.processors.event_buffer import EventBatch, MultiConsumerEventBuffer
from ray_otel_events.processors.exposable_filter import ExposableFilter

logger = logging.getLogger(__name__)

# Counter names, each labelled publisher=<name>, event_type=<type name> (a number as text if unknown).
PUBLISHED = "published"
FILTERED = "filtered"
ENCODE_FAILED = "encode_failed"
DROPPED_AFTER_RETRIES = "dropped_after_retries"
DROPPED_AT_SHUTDOWN = "dropped_at_shutdown"
REJECTED = "rejected"  # the destination refused the batch for good (a non-retryable status)
SEND_FAILURES = "send_failures"  # events in failed attempts (an event retried 3 times counts 3)
# Labelled publisher=<name> only.
REQUESTS_SENT = "requests_sent"
FAILED_ATTEMPTS = "failed_attempts"
# Labelled publisher=<name>, status=<HTTP status or "connection">.
FAILURES_BY_STATUS = "failures_by_status"

__all__ = ["RetryPolicy"]  # re-exported: callers configure retries where they build publishers

OUTCOMES = (PUBLISHED, FILTERED, ENCODE_FAILED, DROPPED_AFTER_RETRIES, DROPPED_AT_SHUTDOWN, REJECTED)

PayloadT = TypeVar("PayloadT")


@dataclass(slots=True)
class PreparedBatch(Generic[PayloadT]):
    """A batch turned into one destination request, made once and re-sent as is on every retry."""

    payload: PayloadT
    sent_types: list[int]  # type numbers of the events the payload carries
    failed_types: list[int] = field(default_factory=list)  # events that could not be encoded


class PublisherClient(abc.ABC, Generic[PayloadT]):
    """How one destination encodes and receives a batch."""

    # How many batches may be encoded at once (a client encoding in worker processes raises it).
    concurrency: int = 1

    @abc.abstractmethod
    def prepare(self, batch: EventBatch) -> PreparedBatch[PayloadT]:
        """Encode a batch; events that cannot be encoded are reported in `failed_types`."""

    async def prepare_async(self, batch: EventBatch) -> PreparedBatch[PayloadT]:
        """What the publisher awaits: `prepare` on the loop, unless a client encodes elsewhere."""
        return self.prepare(batch)

    @abc.abstractmethod
    async def send(self, payload: PayloadT) -> None:
        """Deliver one payload; raise on any failure (it will be retried)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; called once when the publisher stops."""


class EventPublisher(Generic[PayloadT]):
    """Consumes the buffer as consumer `name` and publishes to one destination until shut down."""

    def __init__(
        self,
        name: str,
        buffer: MultiConsumerEventBuffer,
        client: PublisherClient[PayloadT],
        event_filter: ExposableFilter,
        retry: RetryPolicy,
        max_batch_size: int,
        send_interval_s: float,
        counters: Counters | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.counters = counters if counters is not None else Counters(f"publisher:{name}")
        self._buffer = buffer
        self._client = client
        self._filter = event_filter
        self._retry = retry
        self._max_batch_size = max_batch_size
        self._send_interval_s = send_interval_s
        self._rng = rng if rng is not None else random.Random()
        self._deadline: float | None = None  # loop time by which the shutdown flush must end
        self._shutdown_started = asyncio.Event()
        # Type numbers of prepared batches whose outcome is not counted yet, by batch number: what
        # a cancelled flush must count as dropped.
        self._unsettled: dict[int, list[int]] = {}
        # Durable-queue ids of those batches, and who deletes them once their outcome is final
        # (a batch cut short by shutdown stays on disk and is replayed on the next start).
        self._unsettled_ids: dict[int, list[int]] = {}
        self.on_settled: Callable[[list[int]], None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.consecutive_failures = 0
        self.last_success: float | None = None  # time.monotonic() of the last delivered batch
        # Called with the seconds every send attempt took (a metrics histogram's observe).
        self.observe_attempt: Callable[[float], None] | None = None
        buffer.register_consumer(name)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name=f"publisher:{self.name}")
        return self._task

    async def run(self) -> None:
        """Publish batches until the buffer is closed and drained (or the flush deadline passes).

        Two stages joined by a queue of encodings in progress (as many as the client can run at
        once): while one batch is on the wire, the next ones are read and encoded, so encoding
        overlaps the destination's response time. One sender awaits them in buffer order.
        """
        ready: asyncio.Queue[tuple[int, asyncio.Future[PreparedBatch[PayloadT] | None]] | None]
        ready = asyncio.Queue(maxsize=max(1, self._client.concurrency))
        stages = [
            asyncio.ensure_future(self._prepare_loop(ready)),
            asyncio.ensure_future(self._send_loop(ready)),
        ]
        try:
            done, _ = await asyncio.wait(stages, return_when=asyncio.FIRST_EXCEPTION)
            for stage in done:
                if not stage.cancelled() and stage.exception() is not None:
                    logger.error("publisher %s stage failed", self.name, exc_info=stage.exception())
        finally:
            for stage in stages:
                stage.cancel()
            await asyncio.gather(*stages, return_exceptions=True)
            # Whatever was not delivered by now is lost; say so in the counters.
            for types in self._unsettled.values():
                self._count(DROPPED_AT_SHUTDOWN, types)
            self._unsettled.clear()
            self._unsettled_ids.clear()
            self._count_dropped_unread()
            await self._client.close()

    async def _prepare_loop(
        self, ready: asyncio.Queue[tuple[int, asyncio.Future[PreparedBatch[PayloadT] | None]] | None]
    ) -> None:
        number = 0
        while True:
            remaining = self._remaining()
            if remaining is not None and remaining <= 0:
                break  # flush time is over: what is left is counted, not encoded
            batch = await self._buffer.wait_for_batch(self.name, self._max_batch_size, self._send_interval_s)
            if not batch:
                break  # only after close(): nothing left to flush
            kept, filtered = self._filter.split(batch)
            self._count(FILTERED, filtered.types)
            self._settle(filtered.ids)
            if not kept:
                continue  # like Ray: an all-filtered batch is a success with no request
            number += 1
            self._unsettled[number] = kept.types
            self._unsettled_ids[number] = kept.ids
            await ready.put((number, asyncio.ensure_future(self._prepare(number, kept))))
        await ready.put(None)

    async def _send_loop(
        self, ready: asyncio.Queue[tuple[int, asyncio.Future[PreparedBatch[PayloadT] | None]] | None]
    ) -> None:
        pending: asyncio.Future[PreparedBatch[PayloadT] | None] | None = None
        try:
            while (item := await ready.get()) is not None:
                number, pending = item
                prepared = await pending
                if prepared is None:
                    continue
                outcome = await self._attempt_until_outcome(prepared.payload, prepared.sent_types)
                self._count(outcome, self._unsettled.pop(number))
                ids = self._unsettled_ids.pop(number, [])
                if outcome != DROPPED_AT_SHUTDOWN:
                    self._settle(ids)
        finally:
            # Encodings still queued are abandoned on shutdown; their events count as dropped.
            if pending is not None:
                pending.cancel()
            while not ready.empty():
                left = ready.get_nowait()
                if left is not None:
                    left[1].cancel()

    def _count_dropped_unread(self) -> None:
        for etype, n in self._buffer.discard_unread(self.name).items():
            self.counters.add(DROPPED_AT_SHUTDOWN, n, publisher=self.name, event_type=event_type_label(etype))

    async def shutdown(self, timeout_s: float) -> None:
        """Flush for at most `timeout_s`, then stop. The buffer's owner closes the buffer first, so
        the run loop drains it instead of waiting for new events."""
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + timeout_s
        self._shutdown_started.set()
        task = self._task
        if task is None:
            # Never started: everything it holds counts as dropped, and the client still closes.
            self._count_dropped_unread()
            await self._client.close()
            return
        # A send in progress is bounded by the remaining time; a little grace for the finally block.
        done, _ = await asyncio.wait({task}, timeout=timeout_s + 1.0)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        elif not task.cancelled() and task.exception() is not None:
            logger.error("publisher %s stopped with an error", self.name, exc_info=task.exception())

    # -- publishing ----------------------------------------------------------------------------

    def _settle(self, ids: list[int]) -> None:
        if ids and self.on_settled is not None:
            self.on_settled(ids)

    def _remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return self._deadline - asyncio.get_running_loop().time()

    def _count(self, counter: str, types: Iterable[int]) -> None:
        for etype, n in Counter(types).items():
            self.counters.add(counter, n, publisher=self.name, event_type=event_type_label(etype))

    async def _prepare(self, number: int, kept: EventBatch) -> PreparedBatch[PayloadT] | None:
        """Encode; None when nothing is left to send (counted as failed)."""
        try:
            prepared = await self._client.prepare_async(kept)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("publisher %s could not encode a batch of %d events", self.name, len(kept))
            self._count(ENCODE_FAILED, self._unsettled.pop(number))
            self._settle(self._unsettled_ids.pop(number, []))
            return None
        self._count(ENCODE_FAILED, prepared.failed_types)
        if not prepared.sent_types:
            self._unsettled.pop(number)
            self._settle(self._unsettled_ids.pop(number, []))
            return None
        self._unsettled[number] = prepared.sent_types
        return prepared

    async def _attempt_until_outcome(self, payload: PayloadT, types: list[int]) -> str:
        n_events = len(types)
        failures = 0
        while True:
            remaining = self._remaining()
            if remaining is not None and remaining <= 0:
                return DROPPED_AT_SHUTDOWN
            started = time.monotonic()
            try:
                if remaining is None:
                    await self._client.send(payload)
                else:
                    async with asyncio.timeout(remaining):
                        await self._client.send(payload)
            except Exception as exc:
                self._observe(started)
                self._count(SEND_FAILURES, types)
                self.counters.add(FAILED_ATTEMPTS, publisher=self.name)
                self.counters.add(FAILURES_BY_STATUS, publisher=self.name, status=failure_status(exc))
                self.consecutive_failures += 1
                if not is_retryable(exc):
                    logger.error(
                        "publisher %s: destination refused %d events for good: %s", self.name, n_events, exc
                    )
                    return REJECTED
                if self._retry.gives_up(failures):
                    logger.error(
                        "publisher %s: dropping %d events after %d attempts: %s",
                        self.name,
                        n_events,
                        failures + 1,
                        exc,
                    )
                    return DROPPED_AFTER_RETRIES
                failures += 1
                delay = self._retry.delay_s(failures, exc, self._rng)
                logger.warning(
                    "publisher %s: send failed (attempt %d), retrying in %.2fs: %s",
                    self.name,
                    failures,
                    delay,
                    exc,
                )
                await self._sleep(delay)
                continue
            self._observe(started)
            self.consecutive_failures = 0
            self.last_success = time.monotonic()
            self.counters.add(REQUESTS_SENT, publisher=self.name)
            return PUBLISHED

    def _observe(self, started: float) -> None:
        if self.observe_attempt is not None:
            self.observe_attempt(time.monotonic() - started)

    async def _sleep(self, delay_s: float) -> None:
        """A backoff wait that ends early when shutdown starts, so the flush retries at once."""
        remaining = self._remaining()
        if remaining is not None:
            delay_s = min(delay_s, max(0.0, remaining))
        if self._shutdown_started.is_set():
            await asyncio.sleep(delay_s)
            return
        try:
            async with asyncio.timeout(delay_s):
                await self._shutdown_started.wait()
        except TimeoutError:
            pass
