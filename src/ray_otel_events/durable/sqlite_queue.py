"""Accepted events on disk until a destination has them: SQLite in WAL mode, one file per server.

The receiver appends a request's events (one transaction) before it answers, so an acknowledged
event is on disk; the publisher deletes events once their outcome is final (delivered, refused for
good, filtered); what is left is replayed on the next start. WAL with `synchronous=NORMAL` makes a
committed transaction survive the process being killed (kill -9, OOM); only an OS crash or power
loss can take the last transactions back, as with the Collector's file_storage default. The log
is copied into the file by a checkpointer thread, not inside a request's commit.

One file (`QueueDatabase`) holds one table per queue, so a server that moves items between queues
(the bridge: an accepted piece becomes a log record now and part of a span later) does it in one
transaction. A file SQLite cannot read is moved aside (never deleted) with a clear log line and
every row still readable is carried over, so a corrupt queue never causes a crash loop.
"""

from __future__ import annotations

import itertools
import logging
import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from ray_otel_events.config import ConfigError
from ray_otel_events.durable.wal_checkpointer import WalCheckpointer

logger = logging.getLogger(__name__)

FILE_NAME = "events.sqlite3"
_TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(slots=True)
class Stored:
    """Rows in queue order: `seqs[i]` holds `wires[i]` of type `types[i]` (and `keys[i]`)."""

    seqs: list[int]
    wires: list[bytes]
    types: list[int]
    keys: list[bytes]


class QueueOpenError(ConfigError):
    """The queue directory cannot be used at all (not writable, not a directory...)."""


class QueueDatabase:
    """The SQLite file of one server and its transactions (re-entrant: inner ones join the outer)."""

    def __init__(self, directory: str | Path, tables: Sequence[str]) -> None:
        for table in tables:
            if not _TABLE_NAME.match(table):
                raise ValueError(f"bad queue table name {table!r}")
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self.tables = tuple(tables)
        self.recovered_from: Path | None = None  # the corrupt file moved aside, if any
        self.salvaged = 0  # rows carried over from it
        self._depth = 0
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise QueueOpenError(f"cannot create queue directory {self.directory}: {exc}") from None
        self.db = self._open_or_recover()
        try:  # SQLite's JSON functions are built in since 3.38; older ones insert row by row
            self.json_each = self.db.execute("SELECT count(*) FROM json_each('[1]')").fetchone()[0] == 1
        except sqlite3.OperationalError:
            self.json_each = False
        self._checkpointer = WalCheckpointer(self.path, name="queue-checkpoint")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's job
        db.execute("PRAGMA busy_timeout=10000")  # its RESTART, rarely, makes a commit wait
        for table in self.tables:
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {table} "
                "(seq INTEGER PRIMARY KEY, type INTEGER NOT NULL, key BLOB NOT NULL, wire BLOB NOT NULL)"
            )
            db.execute(f"CREATE INDEX IF NOT EXISTS {table}_key ON {table} (key) WHERE key != x''")
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
        rows = {table: _salvage(self.path, table) for table in self.tables}
        for suffix in ("", "-wal", "-shm"):
            part = Path(str(self.path) + suffix)
            if part.exists():
                part.rename(Path(str(aside) + suffix))
        db = self._connect()
        db.execute("BEGIN")
        for table, table_rows in rows.items():
            db.executemany(f"INSERT INTO {table} (seq, type, key, wire) VALUES (?, ?, ?, ?)", table_rows)
        db.execute("COMMIT")
        self.recovered_from = aside
        self.salvaged = sum(map(len, rows.values()))
        logger.error(
            "queue file %s is unreadable (%s): moved to %s, %d events recovered from it",
            self.path,
            reason,
            aside,
            self.salvaged,
        )
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Commit at the end of the outermost block; roll everything back on an exception."""
        if self._depth == 0:
            self.db.execute("BEGIN")
        self._depth += 1
        try:
            yield self.db
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                self.db.execute("ROLLBACK")
            raise
        self._depth -= 1
        if self._depth == 0:
            self.db.execute("COMMIT")
            self._checkpointer.wake()

    def close(self) -> None:
        self._checkpointer.close()
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self.db.close()


class SqliteEventQueue:
    """One queue (table) of a QueueDatabase. Sizes are tracked in memory (read once at open)."""

    def __init__(self, database: QueueDatabase, table: str, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        if table not in database.tables:
            raise ValueError(f"table {table!r} is not one of {database.tables}")
        self.database = database
        self.table = table
        self.max_bytes = max_bytes
        row = database.db.execute(
            f"SELECT COALESCE(MAX(seq), 0), COUNT(*), COALESCE(SUM(LENGTH(wire)), 0) FROM {table}"
        ).fetchone()
        self._next_seq = int(row[0]) + 1
        self.count = int(row[1])
        self.size_bytes = int(row[2])

    @classmethod
    def single(cls, directory: str | Path, max_bytes: int) -> SqliteEventQueue:
        """A file holding just one queue (the aggregator's)."""
        return cls(QueueDatabase(directory, ["events"]), "events", max_bytes)

    @property
    def path(self) -> Path:
        return self.database.path

    def append(
        self, wires: Sequence[bytes], types: Sequence[int], keys: Sequence[bytes] | None = None
    ) -> list[int]:
        """Store items durably (in the current transaction, or one of their own); returns their
        sequence numbers. `keys` group items for `delete_keys` (the bridge's open entities)."""
        first = self._next_seq
        seqs = list(range(first, first + len(wires)))
        sizes = list(map(len, wires))
        with self.database.transaction() as db:
            packed = _packed_rows(sizes, types) if keys is None and self.database.json_each else None
            if packed is not None:
                db.execute(_INSERT_PACKED.format(table=self.table), (first, b"".join(wires), packed))
            else:
                rows = zip(seqs, types, keys if keys is not None else [b""] * len(wires), wires, strict=True)
                db.executemany(f"INSERT INTO {self.table} (seq, type, key, wire) VALUES (?, ?, ?, ?)", rows)
        self._next_seq += len(wires)
        self.count += len(wires)
        self.size_bytes += sum(sizes)
        return seqs

    def delete(self, seqs: Sequence[int]) -> None:
        """Forget items whose outcome is final. Contiguous runs are deleted as ranges."""
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
        with self.database.transaction() as db:
            for low, high in runs:
                count, size = db.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(LENGTH(wire)), 0) FROM {self.table} "
                    "WHERE seq BETWEEN ? AND ?",
                    (low, high),
                ).fetchone()
                db.execute(f"DELETE FROM {self.table} WHERE seq BETWEEN ? AND ?", (low, high))
                self.count -= int(count)
                self.size_bytes -= int(size)

    def delete_through(self, seq: int) -> None:
        """Forget every item up to and including `seq` (trimming a bounded history)."""
        with self.database.transaction() as db:
            db.execute(f"DELETE FROM {self.table} WHERE seq <= ?", (seq,))
            count, size = db.execute(
                f"SELECT COUNT(*), COALESCE(SUM(LENGTH(wire)), 0) FROM {self.table}"
            ).fetchone()
        self.count, self.size_bytes = int(count), int(size)

    def delete_keys(self, keys: Sequence[bytes]) -> None:
        """Forget every item stored under these keys."""
        with self.database.transaction() as db:
            for key in keys:
                count, size = db.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(LENGTH(wire)), 0) FROM {self.table} WHERE key = ?", (key,)
                ).fetchone()
                if count:
                    db.execute(f"DELETE FROM {self.table} WHERE key = ?", (key,))
                    self.count -= int(count)
                    self.size_bytes -= int(size)

    def read_all(self) -> Stored:
        """Everything still queued, oldest first (what a restart replays)."""
        stored = Stored([], [], [], [])
        for seq, etype, key, wire in self.database.db.execute(
            f"SELECT seq, type, key, wire FROM {self.table} ORDER BY seq"
        ):
            stored.seqs.append(int(seq))
            stored.types.append(int(etype))
            stored.keys.append(bytes(key))
            stored.wires.append(bytes(wire))
        return stored

    def close(self) -> None:
        self.database.close()


# A batch's rows in one statement: SQLite reads each row's offset, length and type from a JSON array
# of packed integers and cuts its wire from one blob of them all. Python's sqlite3 binds each row
# of an executemany on its own, which costs more an event (bench/HISTORY.md).
_INSERT_PACKED = (
    "INSERT INTO {table} (seq, type, key, wire) SELECT ?1 + key, value & 255, x'',"
    " substr(?2, (value >> 32) + 1, (value >> 8) & 16777215) FROM json_each(?3)"
)


def _packed_rows(sizes: Sequence[int], types: Sequence[int]) -> bytes | None:
    """[offset << 32 | size << 8 | type, ...] for wires of these sizes, as JSON; None when a value
    does not fit its bits."""
    if len(sizes) != len(types):
        raise ValueError(f"{len(sizes)} wires but {len(types)} types")
    if sum(sizes) >= 1 << 31 or max(sizes, default=0) >= 1 << 24 or any(not 0 <= t < 256 for t in types):
        return None
    offsets = itertools.accumulate(sizes, initial=0)  # one more than sizes: the end
    rows = zip(offsets, sizes, types, strict=False)
    return orjson.dumps([(offset << 32) | (size << 8) | etype for offset, size, etype in rows])


def _salvage(path: Path, table: str) -> list[tuple[int, int, bytes, bytes]]:
    """Every row of one table of a damaged file that can still be read, in order; [] if none."""
    rows: list[tuple[int, int, bytes, bytes]] = []
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.DatabaseError:
        return rows
    try:
        cursor = db.execute(f"SELECT seq, type, key, wire FROM {table} ORDER BY seq")
        while True:
            try:
                row = cursor.fetchone()
            except sqlite3.DatabaseError:
                break
            if row is None:
                break
            rows.append((int(row[0]), int(row[1]), bytes(row[2]), bytes(row[3])))
    except sqlite3.DatabaseError:
        pass
    finally:
        db.close()
    return rows
