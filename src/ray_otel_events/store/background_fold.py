"""Folds accepted POSTs into the store on a thread of its own, several POSTs to a transaction.

Why: Ray's publisher (and ours) posts one batch at a time and waits for its answer. When a POST
was answered only once folded, the client, the parse, the fold and the SQL took turns on two
cores. Now a POST is answered once its body is in the intake spool (on disk: a 200 still survives
`kill -9`), so the client and the parse of the next POST run while the previous ones are folded,
and a busy stream folds several POSTs per transaction (an attempt's pieces, which Ray sends in
different POSTs, are then often written once). Reads wait for `settled()`: whoever got a 200 for
an event and then asks the state API sees it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from ray_otel_events.encoding.newer_releases import unknown_type_events
from ray_otel_events.security.client_errors import log_text
from ray_otel_events.store.backend import (
    IngestResult,
    SetAside,
    Store,
    StoreBusy,
    StoreUnavailable,
    first_line,
)
from ray_otel_events.store.intake_spool import IntakeSpool, Position
from ray_otel_events.store.posted_body import Accepted
from ray_otel_events.store.set_aside import fold_apart, refused_texts

logger = logging.getLogger(__name__)

BATCH_EVENTS = 10_000  # events folded in one transaction, at most (one POST may be larger)
MAX_PENDING_EVENTS = 200_000  # accepted, not yet folded: beyond this a POST waits for room
# ...and the bytes of their bodies (config.STORE_MAX_PENDING_BYTES): what bounds serve's memory
# while the fold is behind, whatever the size of an event.
MAX_PENDING_BYTES = 64 * 1024 * 1024
LOGGED_REFUSALS = 10  # set-aside events logged per batch, each with its id and reason; the rest counted
RETRY_S = 1.0  # after the store failed a batch (it is kept, and tried again)
# How long the first POST of a batch waits for more (config.STORE_FOLD_LINGER): Ray sends an
# attempt's pieces from its owner and from its worker, each about once a second, so a batch that
# spans that second writes most rows once instead of two or three times (an update leaves a dead
# row version and a new entry in every index). A read waiting for `settled()` ends the wait.
LINGER_S = 1.0


class _Accepted(NamedTuple):
    ticket: int
    events: Accepted
    body: bytes  # the POST's text, kept as raw events when folded
    position: Position  # in the spool, the end of this POST's body
    at: float  # time.monotonic() when it was queued


class BackgroundFold:
    """The queue between the POST handler (`put`) and the folding thread; see the module doc."""

    def __init__(
        self,
        store: Store,
        spool: IntakeSpool,
        on_result: Callable[[IngestResult], None],
        read_spooled: Callable[[bytes], Accepted],
        *,
        batch_events: int = BATCH_EVENTS,
        max_pending_events: int = MAX_PENDING_EVENTS,
        max_pending_bytes: int = MAX_PENDING_BYTES,
        linger_s: float = LINGER_S,
    ) -> None:
        self._store = store
        self._spool = spool
        self._on_result = on_result
        self._read_spooled = read_spooled  # a spooled body's events, as its POST read them
        self._batch_events = batch_events
        self._max_pending = max_pending_events
        self._max_pending_bytes = max_pending_bytes
        self._linger_s = linger_s
        self._hurried = 0  # readers waiting for `settled()`: the batch is folded without lingering
        self._queue: collections.deque[_Accepted] = collections.deque()
        self._pending_events = 0
        self._pending_bytes = 0
        self._put_ticket = 0
        self._folded_ticket = 0
        self._closing = False
        self._changed = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.batches = 0  # transactions folded
        self.failures = 0  # folds the store refused (each tried again)
        self.set_aside = 0  # events whose fold failed, kept apart (`Store.set_aside`)
        self.stuck: str | None = None  # why folding waits for the store, while it does
        self._thread = threading.Thread(target=self._run, name="store-fold", daemon=True)

    def start(self) -> int:
        """Queues the bodies a previous run accepted but did not fold, then starts folding; returns
        how many events were queued again."""
        again = 0
        for body, position in self._spool.pending():
            events = self._read_spooled(body)
            again += len(events)
            self._enqueue(events, body, position)
        self._thread.start()
        return again

    def put(self, events: Accepted, body: bytes) -> None:
        """Accept a POST's events: its body is spooled before this returns."""
        self._enqueue(events, body, self._spool.append(body))

    def _enqueue(self, events: Accepted, body: bytes, position: Position) -> None:
        with self._changed:
            self._put_ticket += 1
            self._queue.append(_Accepted(self._put_ticket, events, body, position, time.monotonic()))
            self._pending_events += len(events)
            self._pending_bytes += len(body)
            self._changed.notify()

    @property
    def pending_events(self) -> int:
        return self._pending_events

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    async def room(self) -> None:
        """Waits while the accepted, unfolded events, or their bodies' bytes, are over their bound
        (a body larger than the byte bound still goes in once nothing else is pending)."""
        await self._wait_until(
            lambda: self._pending_events < self._max_pending and self._pending_bytes < self._max_pending_bytes
        )

    async def settled(self) -> None:
        """Waits until every event accepted before this call is folded."""
        target = self._put_ticket
        with self._changed:
            self._hurried += 1
            self._changed.notify()
        try:
            await self._wait_until(lambda: self._folded_ticket >= target)
        finally:
            with self._changed:
                self._hurried -= 1

    async def _wait_until(self, done: Callable[[], bool]) -> None:
        """Waits for `done()`, checked under the lock the folding thread updates under, so a batch
        that ends between the check and the wait still wakes it."""
        loop = asyncio.get_running_loop()
        while True:
            with self._changed:
                if done():
                    return
                future: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, future))
            await future

    def _wake_waiters(self) -> None:
        with self._changed:
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_resolve, future)

    def _take(self) -> list[_Accepted] | None:
        """The next POSTs to fold together (None once closing and empty)."""
        with self._changed:
            while True:
                if not self._queue:
                    if self._closing:
                        return None
                    self._changed.wait()
                    continue
                left = self._queue[0].at + self._linger_s - time.monotonic()
                if left <= 0 or self._closing or self._hurried or self._full():
                    break
                self._changed.wait(left)
            taken = [self._queue.popleft()]
            count = len(taken[0].events)
            while self._queue and count + len(self._queue[0].events) <= self._batch_events:
                taken.append(self._queue.popleft())
                count += len(taken[-1].events)
            return taken

    def _full(self) -> bool:
        """A batch's worth is pending, or a POST waits for room (`room`)."""
        return self._pending_events >= self._batch_events or self._pending_bytes >= self._max_pending_bytes

    def _run(self) -> None:
        while (taken := self._take()) is not None:
            count = sum(len(accepted.events) for accepted in taken)
            while True:
                try:
                    result = self._fold(taken)
                    break
                except Exception as exc:  # kept in the spool and here: tried again, never dropped
                    self.failures += 1
                    if self.stuck is None:  # once per stop, not once per try
                        logger.warning(
                            "folding %d events failed; trying again every %.0f s: %s",
                            count,
                            RETRY_S,
                            first_line(exc),
                        )
                    self.stuck = _why_stuck(exc)
                    if self._closing:  # a stop is not held up for good: the next start folds them
                        logger.warning("folding %d events failed; left in the intake spool", count)
                        return
                    time.sleep(RETRY_S)
            if self.stuck is not None:
                logger.warning("folding again after %d failed tries", self.failures)
                self.stuck = None
            self._on_result(result)
            try:
                self._spool.mark_folded(taken[-1].position)
            except OSError as exc:  # the mark lags: the next start folds these again, a no-op
                logger.warning("cannot mark the intake spool folded: %s", exc)
            with self._changed:
                self._pending_events -= count
                self._pending_bytes -= sum(len(accepted.body) for accepted in taken)
                self._folded_ticket = taken[-1].ticket
            self.batches += 1
            self._wake_waiters()

    def _fold(self, taken: list[_Accepted]) -> IngestResult:
        """The POSTs folded in one transaction; if that fails for a reason of theirs, folded again
        apart (`set_aside.fold_apart`) and each event that fails alone set aside. Events the fold
        refused one by one are set aside too. Each set-aside event is logged once with its reason."""
        bodies = [accepted.body for accepted in taken]
        try:
            result = self._store.ingest_posted([accepted.events for accepted in taken], bodies=bodies)
            failed: list[SetAside] = []
        except (StoreUnavailable, StoreBusy):
            raise
        except Exception as exc:  # one of its events, maybe: found by halving the batch
            if self.stuck is None:  # (tried again each second while stuck: said once)
                logger.warning(
                    "folding %d POSTs failed (%s); folding them apart", len(taken), first_line(exc)
                )
            result, failed = fold_apart(self._store, bodies)
        self.keep_aside(failed + refused_texts(result.refused, bodies))
        if result.ignored:  # rows for none of them: a type with no state, or one we cannot name
            result.unknown_types = unknown_type_events(bodies)
        return result

    def keep_aside(self, aside: list[SetAside]) -> None:
        """Sets events aside in the store, each logged once (up to LOGGED_REFUSALS a batch) and
        counted in `set_aside`."""
        if not aside:
            return
        self._store.set_aside(aside)
        for event in aside[:LOGGED_REFUSALS]:
            logger.warning(
                "event %s set aside, its fold failed: %s", log_text(event.event_id), log_text(event.reason)
            )
        if len(aside) > LOGGED_REFUSALS:
            logger.warning("and %d more events set aside", len(aside) - LOGGED_REFUSALS)
        with self._changed:  # counted from the fold thread and from OTLP requests' threads
            self.set_aside += len(aside)

    def close(self) -> None:
        """Folds everything accepted, then stops."""
        with self._changed:
            self._closing = True
            self._changed.notify()
        if self._thread.is_alive():
            self._thread.join()
        self._wake_waiters()


def _why_stuck(exc: Exception) -> str:
    """Why folding waits, as /readyz says it: the kind of failure, never the store's file, host or
    database (the log has the whole message)."""
    if isinstance(exc, StoreUnavailable):
        return "the store's database cannot be reached; folding waits for it"
    if isinstance(exc, StoreBusy):
        return "the store's database is busy or cannot be written now; folding tries again"
    return f"the store cannot take what it folds ({type(exc).__name__}); folding tries again"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
