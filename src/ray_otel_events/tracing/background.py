"""A queue drained in batches by one background thread, so span hooks cost an append.

Span processors run on the thread that ends a span, i.e. inside task submission. Everything slow
(JSON, protobuf, file writes, log records) is handed to `BatchingQueue.append` and done shortly
after on a daemon thread, in batches (the linger lets a burst collect). `flush()` drains on the
calling thread, which is what exit hooks and `force_flush` use. When the queue reaches its bound
the appending thread drains it itself: back-pressure rather than loss. After a fork the child gets
an empty queue and a new thread on first use: what the parent queued is the parent's to handle.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

logger = logging.getLogger("ray_otel_events.tracing")

T = TypeVar("T")


def at_fork_in_child(method: Callable[[], object]) -> None:
    """Calls a bound method in every child forked from now on, for as long as its object lives:
    the object is held weakly, as `os.register_at_fork` keeps what it is given for good."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()

    os.register_at_fork(after_in_child=call)


class BatchingQueue(Generic[T]):
    """Calls `handle(batch)` with queued items, in order, from one thread at a time."""

    def __init__(
        self,
        handle: Callable[[list[T]], None],
        *,
        name: str,
        linger_s: float = 0.05,
        max_pending: int = 10_000,
    ) -> None:
        self.handle = handle
        self.name = name
        self.linger_s = linger_s
        self.max_pending = max_pending
        self._closed = False
        self._init_process_state()
        at_fork_in_child(self._after_fork_in_child)

    def _init_process_state(self) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._urgent = False
        self._wake = threading.Event()
        self._drain_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _after_fork_in_child(self) -> None:
        self._init_process_state()

    def append(self, item: T, urgent: bool = False) -> bool:
        """Queue one item; `urgent` skips the linger. False (item not taken) once closed."""
        if self._closed:
            return False
        self._items.append(item)
        if urgent:
            self._urgent = True
        if len(self._items) >= self.max_pending:
            self.flush()
        elif self._thread is None:
            self._start_thread()
        elif urgent or not self._wake.is_set():
            self._wake.set()
        return True

    def _start_thread(self) -> None:
        with self._drain_lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        wake = self._wake
        while True:
            wake.wait()
            if self._closed:
                return
            if self.linger_s and not self._urgent:
                time.sleep(self.linger_s)
            self._urgent = False
            wake.clear()
            self.flush()

    def flush(self) -> None:
        """Handle everything queued, on this thread."""
        self._drain()

    def handle_now(self, *items: T) -> bool:
        """Handle everything queued and then `items`, on this thread, without waking the background
        thread (or starting it); False (items not taken) once closed."""
        if self._closed:
            return False
        self._drain(*items)
        return True

    def _drain(self, *extra: T) -> None:
        with self._drain_lock:
            items = self._items
            if items:
                batch: list[T] = []
                while items:
                    batch.append(items.popleft())
                batch.extend(extra)
            elif extra:
                batch = list(extra)
            else:
                return
            try:
                self.handle(batch)
            except Exception:  # a failing handler must not kill the thread or the caller
                logger.exception("ray_otel_events: %s failed on a batch of %d", self.name, len(batch))

    def pending(self) -> int:
        return len(self._items)

    def close(self) -> None:
        """Handle what is queued, then refuse new items and stop the thread."""
        self.flush()
        self._closed = True
        self._wake.set()
        self.flush()  # anything appended between the two checks


class PromptFlusher:
    """Runs `flush()` on its own thread soon after `request()`, at most once per `min_interval_s`.

    Requests made while a flush runs or during the pause after it are coalesced into one more
    flush, so a steady stream of requests costs at most 1/min_interval_s flushes a second.
    """

    def __init__(self, flush: Callable[[], object], *, name: str, min_interval_s: float = 0.1) -> None:
        self.flush = flush
        self.name = name
        self.min_interval_s = min_interval_s
        self._wanted = threading.Event()
        self._pid = -1

    def request(self) -> None:
        if self._pid != os.getpid():  # first use, or first use after a fork
            self._wanted = threading.Event()
            self._pid = os.getpid()
            threading.Thread(target=self._run, args=(self._wanted,), name=self.name, daemon=True).start()
        self._wanted.set()

    def _run(self, wanted: threading.Event) -> None:
        while True:
            wanted.wait()
            wanted.clear()
            try:
                self.flush()
            except Exception:
                logger.exception("ray_otel_events: %s failed", self.name)
            time.sleep(self.min_interval_s)
