"""PostgreSQL's state rows vacuumed as the fold leaves dead versions behind, not minutes later.

Why: each update of a row leaves its old version in the table (none is HOT: `updated` is in every
index). Autovacuum looks at a table once a minute (`autovacuum_naptime`) and only once a fifth of
it is dead (`autovacuum_vacuum_scale_factor`), so during a busy stream each new version went to the
table's end: on a live Ray stream state_rows took ~1,050 bytes of heap per task attempt for ~750 of
live row. A VACUUM as soon as the writer's updates since the last one pass a bound frees that
space for the next inserts (~900). It runs on a connection and a thread of its own: the fold is
not held (VACUUM takes no lock that inserts or updates wait for), and a second process's VACUUM
of the same table is waited for at most `_LOCK_WAIT`, then left to the next round.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from ray_otel_events.store.backend import StoreUnavailable, first_line

logger = logging.getLogger(__name__)

MIN_DEAD = 1_000  # dead versions that call for a VACUUM, at least...
DEAD_FRACTION = 0.05  # ...and this share of the table's rows (VACUUM's last count)
MIN_INTERVAL_S = 5.0  # between two VACUUMs of this writer: what bounds their cost on a busy stream
_LOCK_WAIT = "1s"
_ROWS = "SELECT reltuples FROM pg_class WHERE oid = 'state_rows'::regclass"


class DeadRowVacuum:
    """Counts the row versions the fold left dead (`count`) and VACUUMs state_rows past the bound."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        *,
        min_dead: int = MIN_DEAD,
        min_interval_s: float = MIN_INTERVAL_S,
    ) -> None:
        self._connect = connect  # an autocommit connection (VACUUM cannot run in a transaction)
        self._min_dead = min_dead
        self._min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._dead = 0
        self._rows = 0.0
        self._due = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self.vacuums = 0  # VACUUMs done

    def count(self, dead: int) -> None:
        """The fold updated or deleted `dead` rows (in a committed transaction)."""
        with self._lock:
            self._dead += dead
            due = self._dead >= max(self._min_dead, DEAD_FRACTION * self._rows) and not self._stop.is_set()
            if due and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="state-rows-vacuum", daemon=True)
                self._thread.start()
        if due:
            self._due.set()

    def _run(self) -> None:
        db: psycopg.Connection[Any] | None = None
        try:
            while True:
                self._due.wait()
                if self._stop.is_set():
                    return
                self._due.clear()
                with self._lock:
                    self._dead = 0
                db = self._vacuum(db)
                if self._stop.wait(self._min_interval_s):
                    return
        finally:
            if db is not None:
                with contextlib.suppress(psycopg.Error):
                    db.close()

    def _vacuum(self, db: psycopg.Connection[Any] | None) -> psycopg.Connection[Any] | None:
        """One VACUUM of state_rows; the connection to use next (None: connect again)."""
        try:
            if db is None or db.closed or db.broken:
                db = self._connect()
                db.execute(f"SET lock_timeout = '{_LOCK_WAIT}'")
            db.execute("VACUUM state_rows")
            found = db.execute(_ROWS).fetchone()
            with self._lock:
                self._rows = max(0.0, float(found[0])) if found else 0.0
            self.vacuums += 1
            if self._failing:
                logger.info("state_rows vacuumed again")
                self._failing = False
            return db
        except psycopg.errors.LockNotAvailable:  # another process vacuums it now: enough
            return db
        except (psycopg.Error, StoreUnavailable) as exc:  # said once, until a VACUUM is done again
            if not self._failing:
                logger.warning("cannot vacuum state_rows (autovacuum still will): %s", first_line(exc))
                self._failing = True
            with contextlib.suppress(psycopg.Error):
                if db is not None:
                    db.close()
            return None

    def close(self) -> None:
        """Stops the thread (a VACUUM under way is let finish)."""
        self._stop.set()
        self._due.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
