"""The event store: one SQLite file (WAL) holding merged state rows and their transition history.

`ingest` takes a batch of RayEvents (JSON form, as Ray's aggregator POSTs them) in one
transaction: an event id already seen is skipped (duplicates from retries cost nothing), every
other event is folded into its row (`state_merge`), and its new state transitions are appended to
the history. Rows are keyed by session name as well, so several clusters (or one cluster's
restarts) stay apart. `prune` applies the retention: rows not updated within `max_age_s`, then the
oldest rows beyond `max_rows`. One connection, guarded by a lock: the server calls it from worker
threads.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_otel_events.store.state_merge import Row, apply, piece_of

_SCHEMA = """
CREATE TABLE IF NOT EXISTS seen_events (
    event_id TEXT PRIMARY KEY,
    received REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS seen_by_time ON seen_events(received);
CREATE TABLE IF NOT EXISTS state_rows (
    resource TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    session TEXT NOT NULL,
    state TEXT,
    job_id TEXT,
    updated REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (resource, entity_id, attempt, session)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS rows_by_update ON state_rows(resource, updated);
CREATE INDEX IF NOT EXISTS rows_by_job ON state_rows(resource, job_id);
CREATE TABLE IF NOT EXISTS transitions (
    resource TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    session TEXT NOT NULL,
    state TEXT NOT NULL,
    ts_ns INTEGER NOT NULL,
    PRIMARY KEY (resource, entity_id, attempt, session, ts_ns, state)
) WITHOUT ROWID;
"""


@dataclass
class IngestResult:
    stored: int = 0
    duplicates: int = 0
    ignored: int = 0  # event types with no state row (e.g. platform events)
    invalid: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StoredRow:
    session: str
    updated: float
    data: Row


class EventStore:
    """State rows and history in one SQLite file; see the module doc."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def ingest(self, events: Iterable[dict[str, Any]], *, now: float | None = None) -> IngestResult:
        """Fold a batch into the store in one transaction (see the module doc)."""
        result = IngestResult()
        received = time.time() if now is None else now
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                rows: dict[tuple[str, str, int, str], Row] = {}
                history: list[tuple[str, str, int, str, str, int]] = []
                for event in events:
                    event_id = event.get("eventId") if isinstance(event, dict) else None
                    if not event_id:
                        result.invalid.append("an event without eventId")
                        continue
                    try:
                        piece = piece_of(event)
                    except (ValueError, TypeError) as exc:
                        result.invalid.append(str(exc))
                        continue
                    inserted = db.execute(
                        "INSERT OR IGNORE INTO seen_events(event_id, received) VALUES (?, ?)",
                        (event_id, received),
                    ).rowcount
                    if not inserted:
                        result.duplicates += 1
                        continue
                    if piece is None:
                        result.ignored += 1
                        continue
                    session = str(event.get("sessionName", ""))
                    key = (piece.resource, piece.entity_id, piece.attempt, session)
                    row = rows.get(key)
                    if row is None:
                        found = db.execute(
                            "SELECT data FROM state_rows WHERE resource=? AND entity_id=? AND attempt=?"
                            " AND session=?",
                            key,
                        ).fetchone()
                        row = rows[key] = json.loads(found[0]) if found else {}
                    for state, ts_ns in apply(row, piece):
                        history.append((*key, state, ts_ns))
                    result.stored += 1
                db.executemany(
                    "INSERT INTO state_rows"
                    "(resource, entity_id, attempt, session, state, job_id, updated, data)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET state=excluded.state,"
                    " job_id=excluded.job_id, updated=excluded.updated, data=excluded.data",
                    [
                        (*key, row.get("state"), row.get("job_id"), received, json.dumps(row))
                        for key, row in rows.items()
                    ],
                )
                db.executemany(
                    "INSERT OR IGNORE INTO transitions(resource, entity_id, attempt, session, state, ts_ns)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    history,
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return result

    def rows(self, resource: str, *, session: str | None = None) -> Iterator[StoredRow]:
        """Every row of a resource, newest first (sessions mixed unless one is given)."""
        query = "SELECT session, updated, data FROM state_rows WHERE resource=?"
        params: tuple[Any, ...] = (resource,)
        if session is not None:
            query += " AND session=?"
            params += (session,)
        with self._lock:
            found = self._db.execute(query + " ORDER BY updated DESC", params).fetchall()
        for session_name, updated, data in found:
            yield StoredRow(session_name, updated, json.loads(data))

    def history(self, resource: str, entity_id: str) -> list[tuple[int, str, str, int]]:
        """(attempt, session, state, ts_ns) of every transition of one entity, in time order."""
        with self._lock:
            return list(
                self._db.execute(
                    "SELECT attempt, session, state, ts_ns FROM transitions WHERE resource=? AND entity_id=?"
                    " ORDER BY ts_ns",
                    (resource, entity_id),
                )
            )

    def sessions(self) -> list[str]:
        with self._lock:
            return [
                r[0] for r in self._db.execute("SELECT DISTINCT session FROM state_rows ORDER BY session")
            ]

    def prune(self, *, max_age_s: float | None, max_rows: int | None, now: float | None = None) -> int:
        """Apply the retention; returns the number of rows deleted (their history goes with them)."""
        current = time.time() if now is None else now
        deleted = 0
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                doomed: list[tuple[str, str, int, str]] = []
                if max_age_s is not None:
                    doomed += db.execute(
                        "SELECT resource, entity_id, attempt, session FROM state_rows WHERE updated < ?",
                        (current - max_age_s,),
                    ).fetchall()
                if max_rows is not None:
                    doomed += db.execute(
                        "SELECT resource, entity_id, attempt, session FROM state_rows"
                        " ORDER BY updated DESC LIMIT -1 OFFSET ?",
                        (max_rows,),
                    ).fetchall()
                unique = sorted(set(doomed))
                where = "resource=? AND entity_id=? AND attempt=? AND session=?"
                db.executemany(f"DELETE FROM state_rows WHERE {where}", unique)
                db.executemany(f"DELETE FROM transitions WHERE {where}", unique)
                if max_age_s is not None:
                    db.execute("DELETE FROM seen_events WHERE received < ?", (current - max_age_s,))
                deleted = len(unique)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return deleted
