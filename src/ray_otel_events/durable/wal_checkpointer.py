"""Copies a SQLite file's write-ahead log into the file off the writer's path (the event store's,
the durable queues').

SQLite's own checkpoint runs inside the commit that crosses `wal_autocheckpoint`, so every few
batches one request waits for pages to be copied and the file synced, a large share of the store's
ingest time and of the durable queue's (bench/HISTORY.md), nearly all of it waiting on the disk
rather than using a CPU. Here the writer turns that off and this thread checkpoints on its
own connection a moment after writes (PASSIVE: it never blocks the writer or readers). Waiting a
moment means a page rewritten by many batches is copied once.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

logger = logging.getLogger(__name__)


class WalCheckpointer:
    def __init__(self, path: Path, *, name: str, delay_s: float = 0.5, restart_frames: int = 32768) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout=10000")
        self._delay_s = delay_s
        self._restart_frames = restart_frames
        self._written = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """A write was committed."""
        self._written.set()

    def _run(self) -> None:
        # `close` may land between the delay and the clear below, whose clear would swallow its
        # wake: the loop's test catches that case, the waits every other.
        while not self._closing.is_set():
            self._written.wait()
            if self._closing.wait(self._delay_s):
                return
            self._written.clear()
            try:
                _, frames, _ = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if frames > self._restart_frames:
                    # A steady stream of writes never leaves the log fully copied at the moment the
                    # next write starts, so it would grow for good: make writers wait for the rest
                    # once, and the log starts over.
                    self._db.execute("PRAGMA wal_checkpoint(RESTART)")
            except sqlite3.Error as exc:  # the next write wakes us to try again
                logger.warning("checkpoint of %s failed: %s", self._thread.name, exc)

    def close(self) -> None:
        self._closing.set()
        self._written.set()
        self._thread.join()
        self._db.close()
