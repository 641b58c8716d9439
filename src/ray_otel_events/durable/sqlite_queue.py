"""Accepted events on disk until a destination has them: SQLite in WAL mode, one file per server.

The receiver appends a request's events (one transaction) before it answers, so an acknowledged
event is on disk; the publisher deletes events once their outcome is final (delivered, refused for
good, filtered); what is left is replayed on the next start. WAL with `synchronous=NORMAL` makes a
committed transaction survive the process being killed (kill -9, OOM); only an OS crash or power
loss can take the last transactions back, as with the Collector's file_storage default.

Bounded by bytes: when full, the oldest events are deleted and reported to the caller, which counts
them as dropped. A file that SQLite cannot read is moved aside (never deleted) with a clear log line
and whatever rows could still be read are carried over, so a corrupt queue never causes a crash loop.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ray_otel_events.config import ConfigError

logger = logging.getLogger(__name__)

FILE_NAME = "events.sqlite3"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, type INTEGER NOT NULL, wire BLOB NOT NULL)"
)


@dataclass(slots=True)
class Stored:
    """Rows in queue order: `seqs[i]` holds `wires[i]` of type `types[i]`."""

    seqs: list[int]
    wires: list[bytes]
    types: list[int]


class QueueOpenError(ConfigError):
    """The queue directory cannot be used at all (not writable, not a directory...)."""


class SqliteEventQueue:
    def __init__(self, directory: str | Path, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.path = self.directory / FILE_NAME
        self.recovered_from: Path | None = None  # the corrupt file moved aside, if any
        self.salvaged = 0  # rows carried over from it
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise QueueOpenError(f"cannot create queue directory {self.directory}: {exc}") from None
        self._db = self._open_or_recover()
        row = self._db.execute(
            "SELECT COALESCE(MAX(seq), 0), COUNT(*), COALESCE(SUM(LENGTH(wire)), 0) FROM events"
        ).fetchone()
        self._next_seq = int(row[0]) + 1
        self.count = int(row[1])
        self.size_bytes = int(row[2])

    # -- opening -------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(_SCHEMA)
        return db

    def _open_or_recover(self) -> sqlite3.Connection:
        try:
            db = self._connect()
            status = db.execute("PRAGMA quick_check").fetchone()[0]
            if status == "ok":
                return db
            db.close()
            reason = f"integrity check failed: {status}"
        except sqlite3.DatabaseError as exc:
            reason = str(exc)
        except OSError as exc:
            raise QueueOpenError(f"cannot open queue {self.path}: {exc}") from None
        return self._recover(reason)

    def _recover(self, reason: str) -> sqlite3.Connection:
        """Move the unreadable file aside, start a new one holding every row still readable."""
        aside = self.path.with_name(f"{FILE_NAME}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        rows = _salvage(self.path)
        for suffix in ("", "-wal", "-shm"):
            part = Path(str(self.path) + suffix)
            if part.exists():
                part.rename(Path(str(aside) + suffix))
        db = self._connect()
        with db:
            db.execute("BEGIN")
            db.executemany("INSERT INTO events (seq, type, wire) VALUES (?, ?, ?)", rows)
            db.execute("COMMIT")
        self.recovered_from = aside
        self.salvaged = len(rows)
        logger.error(
            "queue file %s is unreadable (%s): moved to %s, %d events recovered from it",
            self.path,
            reason,
            aside,
            len(rows),
        )
        return db

    # -- the queue -----------------------------------------------------------------------------

    def append(self, wires: Sequence[bytes], types: Sequence[int]) -> list[int]:
        """Store events durably (one transaction); returns their sequence numbers."""
        first = self._next_seq
        seqs = list(range(first, first + len(wires)))
        self._db.execute("BEGIN")
        try:
            self._db.executemany(
                "INSERT INTO events (seq, type, wire) VALUES (?, ?, ?)", zip(seqs, types, wires, strict=True)
            )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._next_seq += len(wires)
        self.count += len(wires)
        self.size_bytes += sum(map(len, wires))
        return seqs

    def overflow(self) -> Stored:
        """Delete the oldest events beyond `max_bytes`; returns what was deleted (to count it)."""
        if self.size_bytes <= self.max_bytes:
            return Stored([], [], [])
        excess = self.size_bytes - self.max_bytes
        seqs: list[int] = []
        types: list[int] = []
        freed = 0
        for seq, etype, size in self._db.execute("SELECT seq, type, LENGTH(wire) FROM events ORDER BY seq"):
            seqs.append(int(seq))
            types.append(int(etype))
            freed += int(size)
            if freed >= excess:
                break
        self.delete(seqs, freed)
        return Stored(seqs, [], types)

    def delete(self, seqs: Sequence[int], size_hint: int | None = None) -> None:
        """Forget events whose outcome is final. Contiguous runs are deleted as ranges."""
        if not seqs:
            return
        ordered = sorted(seqs)
        runs: list[tuple[int, int]] = []
        start = prev = ordered[0]
        for seq in ordered[1:]:
            if seq != prev + 1:
                runs.append((start, prev))
                start = seq
            prev = seq
        runs.append((start, prev))
        self._db.execute("BEGIN")
        freed = 0
        count = 0
        for low, high in runs:
            row = (
                self._db.execute(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(wire)), 0) FROM events WHERE seq BETWEEN ? AND ?",
                    (low, high),
                ).fetchone()
                if size_hint is None
                else None
            )
            if row is not None:
                count += int(row[0])
                freed += int(row[1])
            self._db.execute("DELETE FROM events WHERE seq BETWEEN ? AND ?", (low, high))
        self._db.execute("COMMIT")
        if size_hint is not None:
            count, freed = len(ordered), size_hint
        self.count -= count
        self.size_bytes -= freed

    def read_all(self) -> Stored:
        """Everything still queued, oldest first (what a restart replays)."""
        stored = Stored([], [], [])
        for seq, etype, wire in self._db.execute("SELECT seq, type, wire FROM events ORDER BY seq"):
            stored.seqs.append(int(seq))
            stored.types.append(int(etype))
            stored.wires.append(bytes(wire))
        return stored

    def close(self) -> None:
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self._db.close()


def _salvage(path: Path) -> list[tuple[int, int, bytes]]:
    """Every row of a damaged queue file that can still be read, in order; [] if none."""
    rows: list[tuple[int, int, bytes]] = []
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.DatabaseError:
        return rows
    try:
        cursor = db.execute("SELECT seq, type, wire FROM events ORDER BY seq")
        while True:
            try:
                row = cursor.fetchone()
            except sqlite3.DatabaseError:
                break
            if row is None:
                break
            rows.append((int(row[0]), int(row[1]), bytes(row[2])))
    except sqlite3.DatabaseError:
        pass
    finally:
        db.close()
    return rows
