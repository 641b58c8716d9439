"""The event store on PostgreSQL: the same rows, answers and retention as sqlite_store.EventStore,
in a database several `serve` processes share. The reads (`sql_reads`), retention and rebuild
(`sql_upkeep`) are the SQL both backends share, in this file's dialect; what is here is
PostgreSQL's own: the schema and its migrations, the connections, the locks and the write path.

Why its own module: the SQLite store folds with compiled code that calls SQLite itself; here the
fold runs in Python (`row_fold`, as under RAY_OTEL_EVENTS_PURE_PYTHON) and the rows are written
with `INSERT ... ON CONFLICT DO UPDATE` in one transaction per batch. Two processes may fold pieces
of one row at once: each transaction first takes PostgreSQL's transaction-scoped advisory locks on
its rows' buckets (in one order, so two never wait on each other), then reads, folds and writes
them, so the second reads what the first committed. A row keeps the ids of the events folded into
it, so an event id is skipped whichever process folded it before. `generation` is a sequence moved
after each commit, so a page served by one process sees another's writes.

The schema is created and migrated on open by numbered steps recorded in `schema_migrations`,
under a lock, so processes starting together apply each step once. Text columns are `citext`
(compared ignoring case, ordered bytewise once lowered), as SQLite's `COLLATE NOCASE` does.

Sessions (a `sessions` table, each batch's names upserted in name order so two writers never wait
on each other) and raw events (compressed blocks per session, read back by `rebuild`)
are kept as sqlite_store keeps them, in the fold's transaction.

A connection lost (server restarted, network) raises StoreUnavailable; the next call connects
again, so `serve` comes back by itself when the server does.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
import psycopg

from ray_otel_events.store import raw_events
from ray_otel_events.store.backend import IngestResult, StoreError, StoreUnavailable
from ray_otel_events.store.posted_body import Accepted, accepted_events
from ray_otel_events.store.row_fold import (
    Pieces,
    StoredRow,
    count_folded,
    fold_row,
    fold_rows,
    group_pieces,
    upsert_values,
)
from ray_otel_events.store.sql_reads import TEXT_COLUMNS, SqlDialect
from ray_otel_events.store.sql_upkeep import RAW_INCOMPLETE, SqlUpkeep
from ray_otel_events.store.sqlite_store import log_line_row, span_row
from ray_otel_events.store.state_merge import INDEXED_COLUMNS, Key, Prepared, prepare

_LOCK_SPACE = 0x52_4F_45_53  # the first key of every advisory lock this store takes
_MIGRATION_LOCK = -1  # its second key while migrating; row buckets are 0.._BUCKETS-1
# Rows hash to this many advisory locks: a batch takes at most this many, whatever its size
# (PostgreSQL's shared lock table holds about 64 per connection).
_BUCKETS = 1024
_FOLD_CHUNK = 500  # rows read, folded and written together
_CONNECT_TIMEOUT_S = 5
_COLUMN_DEFS = ", ".join(
    f'{c} citext COLLATE "C"' if c in TEXT_COLUMNS else f"{c} bigint" for c in INDEXED_COLUMNS
)

_SEEN = (
    "INSERT INTO sessions(name, first_seen, last_seen) VALUES (%s, %s, %s)"
    " ON CONFLICT (name) DO UPDATE SET last_seen = GREATEST(sessions.last_seen, excluded.last_seen)"
)
_KEEP_RAW = "INSERT INTO raw_events(session, received, data) VALUES (%s, %s, %s)"
# The data that counts against `max_bytes`: the text (and compressed blocks) each table holds.
_DATA_BYTES = (
    "SELECT (SELECT COALESCE(SUM(octet_length(data) + octet_length(event_ids)), 0) FROM state_rows)"
    " + (SELECT COALESCE(SUM(octet_length(data)), 0) FROM spans)"
    " + (SELECT COALESCE(SUM(octet_length(data)), 0) FROM log_lines)"
    " + (SELECT COALESCE(SUM(octet_length(data)), 0) FROM raw_events)"
)

# Numbered steps, applied in order and recorded in schema_migrations; never edit a released one:
# append the next.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        f"""
CREATE EXTENSION IF NOT EXISTS citext;
CREATE TABLE state_rows (
    resource text NOT NULL,
    entity_id citext COLLATE "C" NOT NULL,
    attempt bigint NOT NULL,
    session text NOT NULL,
    updated double precision NOT NULL,
    data text NOT NULL,
    event_ids text NOT NULL,
    {_COLUMN_DEFS},
    PRIMARY KEY (resource, entity_id, attempt, session)
);
CREATE INDEX rows_by_update ON state_rows(resource, updated);
CREATE INDEX rows_by_state ON state_rows(resource, state, updated);
CREATE INDEX rows_by_job ON state_rows(resource, job, updated);
CREATE INDEX rows_by_func ON state_rows(resource, func, updated);
CREATE INDEX rows_by_node ON state_rows(resource, node, updated);
CREATE INDEX rows_by_name ON state_rows(resource, name, updated);
CREATE INDEX rows_by_kind ON state_rows(resource, kind);
CREATE TABLE spans (
    trace_id text NOT NULL,
    span_id text NOT NULL,
    parent_span_id text NOT NULL,
    task_id text,
    name text NOT NULL,
    start_ns bigint NOT NULL,
    end_ns bigint NOT NULL,
    received double precision NOT NULL,
    data text NOT NULL,
    PRIMARY KEY (trace_id, span_id)
);
CREATE INDEX spans_by_task ON spans(task_id);
CREATE INDEX spans_by_span ON spans(span_id);
CREATE INDEX spans_by_time ON spans(received);
CREATE TABLE log_lines (
    id bigserial PRIMARY KEY,
    ts_ns bigint NOT NULL,
    trace_id text NOT NULL,
    span_id text NOT NULL,
    task_id text,
    received double precision NOT NULL,
    data text NOT NULL
);
CREATE INDEX lines_by_task ON log_lines(task_id, ts_ns);
CREATE INDEX lines_by_span ON log_lines(span_id);
CREATE INDEX lines_by_time ON log_lines(received);
CREATE SEQUENCE store_generation;
""",
    ),
    (
        2,
        f"""
CREATE TABLE sessions (
    name text PRIMARY KEY,
    first_seen double precision NOT NULL,
    last_seen double precision NOT NULL
);
INSERT INTO sessions(name, first_seen, last_seen)
    SELECT session, MIN(updated), MAX(updated) FROM state_rows GROUP BY session;
CREATE TABLE raw_events (
    id bigserial PRIMARY KEY,
    session text NOT NULL,
    received double precision NOT NULL,
    data bytea NOT NULL
);
CREATE INDEX raw_by_session ON raw_events(session, received);
CREATE TABLE store_notes (key text PRIMARY KEY, value text NOT NULL);
INSERT INTO store_notes(key, value)
    SELECT '{RAW_INCOMPLETE}', 'rows were stored before raw events were kept'
    WHERE EXISTS (SELECT 1 FROM state_rows);
""",
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

_KEY_COLUMNS = "resource, entity_id, attempt, session"
_UPSERT = (
    f"INSERT INTO state_rows({_KEY_COLUMNS}, updated, data, event_ids, {', '.join(INDEXED_COLUMNS)})"
    f" VALUES ({', '.join(['%s'] * (7 + len(INDEXED_COLUMNS)))})"
    f" ON CONFLICT ({_KEY_COLUMNS}) DO UPDATE SET updated=excluded.updated, data=excluded.data,"
    " event_ids=excluded.event_ids, " + ", ".join(f"{c}=excluded.{c}" for c in INDEXED_COLUMNS)
)


# PostgreSQL's text cannot hold NUL, which SQLite's can: a string holding one (or the escape
# character itself) is stored with NUL as ESC "0" and ESC as ESC ESC, and read back, so equality and
# every answer stay as on SQLite. (The rows' JSON never holds one: orjson writes it as \\u0000.)
_ESC = "\ue000"


def _enc(value: Any) -> Any:
    if isinstance(value, str) and ("\x00" in value or _ESC in value):
        return value.replace(_ESC, _ESC + _ESC).replace("\x00", _ESC + "0")
    return value


def _dec(value: Any) -> Any:
    if not isinstance(value, str) or _ESC not in value:
        return value
    out, escaped = [], False
    for char in value:
        if escaped:
            out.append("\x00" if char == "0" else char)
            escaped = False
        elif char == _ESC:
            escaped = True
        else:
            out.append(char)
    return "".join(out)


def _encoded(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(_enc(v) for v in row) for row in rows]


def _bucket(key: Key) -> int:
    """The advisory lock a row's folds take (its entity id ignoring case, as the key compares)."""
    resource, entity_id, attempt, session = key
    text = f"{resource}\0{entity_id.lower()}\0{attempt}\0{session}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") % _BUCKETS


class PostgresStore(SqlUpkeep):
    """State rows, history, spans and task logs in a PostgreSQL database; see the module doc."""

    dialect = SqlDialect(
        mark="%s",
        id_mark="%s::citext",  # a text parameter would compare the column as text: case and index lost
        false="false",
        negated="NOT COALESCE(({}), false)",
        like="ILIKE",  # spans' and logs' text columns are plain text; the citext ones ignore case anyway
        text_out="{}::text",  # citext has no client type
        serial="id",
        row_ref="ctid",
        no_limit="LIMIT ALL",
        byte_length="octet_length",
        bytewise=' COLLATE "C"',
        enc=_enc,
        dec=_dec,
    )

    writer = "python"
    writer_reason: str | None = "PostgreSQL: the compiled row writer writes SQLite only"

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        super().__init__()
        self.url = url
        self.read_only = read_only
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._writer: psycopg.Connection[Any] | None = None
        self._reader: psycopg.Connection[Any] | None = None
        with self._reading() as db:
            if read_only:
                self._check_version(db)
            else:
                self._migrate(db)

    # -- connections ---------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(
                f"cannot reach PostgreSQL at {self._where()}: {_first_line(exc)}"
            ) from None

    def _where(self) -> str:
        """The URL without its password, for messages."""
        info = psycopg.conninfo.conninfo_to_dict(self.url)
        return f"{info.get('host', '')}:{info.get('port', 5432)}/{info.get('dbname', '')}"

    @contextlib.contextmanager
    def _using(self, lock: threading.Lock, which: str) -> Iterator[psycopg.Connection[Any]]:
        """The connection `which` under its lock, connected if need be; a lost one is dropped (the
        next call connects again) and reported as StoreUnavailable. A transaction the server rolled
        back on a live connection (a deadlock with another writer's retention, say) is a StoreError:
        the fold tries its batch again."""
        with lock:
            db = getattr(self, which)
            if db is None or db.closed or db.broken:
                db = self._connect()
                setattr(self, which, db)
            try:
                yield db
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not (db.closed or db.broken):
                    raise StoreError(f"PostgreSQL refused the transaction: {_first_line(exc)}") from None
                with contextlib.suppress(Exception):
                    db.close()
                setattr(self, which, None)
                raise StoreUnavailable(f"lost PostgreSQL at {self._where()}: {_first_line(exc)}") from None

    def _reading(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        return self._using(self._read_lock, "_reader")

    def _writing(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        if self.read_only:
            raise StoreError("the store was opened read-only")
        return self._using(self._write_lock, "_writer")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One write transaction; the generation moves once it is committed."""
        with self._writing() as db:
            with db.transaction():
                yield db
            self._committed(db)

    def close(self) -> None:
        for lock, which in ((self._write_lock, "_writer"), (self._read_lock, "_reader")):
            with lock:
                db = getattr(self, which)
                if db is not None:
                    with contextlib.suppress(psycopg.Error):
                        db.close()
                setattr(self, which, None)

    # -- schema --------------------------------------------------------------------------------

    def _applied(self, db: psycopg.Connection[Any]) -> int:
        exists = db.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return 0
        row = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
        return int(row[0]) if row else 0

    def _check_version(self, db: psycopg.Connection[Any]) -> None:
        version = self._applied(db)
        if version == 0:
            raise StoreError(f"no store in the database at {self._where()} (no `serve` has written it)")
        if version > SCHEMA_VERSION:
            raise StoreError(f"the database has schema {version}, newer than this version's {SCHEMA_VERSION}")

    def _migrate(self, db: psycopg.Connection[Any]) -> None:
        """Applies the steps the database lacks, each in its transaction, under a lock."""
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, _MIGRATION_LOCK))
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            version = self._applied(db)
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the database has schema {version}, newer than this version's {SCHEMA_VERSION}"
                )
            for number, sql in MIGRATIONS:
                if number > version:
                    with db.transaction():
                        db.execute(sql)
                        db.execute("INSERT INTO schema_migrations(version) VALUES (%s)", (number,))

    # -- writing -------------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """The sequence every writer moves after its commit (see the module doc)."""
        found = self._query(
            "SELECT last_value + (CASE WHEN is_called THEN 1 ELSE 0 END) FROM store_generation"
        )
        return int(found[0][0])

    def _committed(self, db: psycopg.Connection[Any]) -> None:
        db.execute("SELECT nextval('store_generation')")

    def ingest(self, events: Iterable[Any], *, now: float | None = None) -> IngestResult:
        """As EventStore.ingest: events that cannot be read are listed in `invalid`; the batch is
        kept as raw events."""
        events = events if isinstance(events, list) else list(events)
        prepared: list[Prepared] = []
        invalid: list[str] = []
        for event in events:
            try:
                prepared.append(prepare(event))
            except ValueError as exc:
                invalid.append(str(exc))
        texts, unwritten = raw_events.event_texts(events)
        result = self._ingest(prepared, time.time() if now is None else now, texts)
        if unwritten:
            self._note_raw_incomplete(f"{unwritten} events could not be kept as JSON text")
        result.invalid = invalid + [refusal.reason for refusal in result.refused]
        return result

    def ingest_posted(
        self, posts: list[Accepted], *, now: float | None = None, bodies: Sequence[bytes] | None = None
    ) -> IngestResult:
        """Several POSTs' events, in order, in one transaction (read in Python here); `bodies` are
        kept as raw events in it."""
        texts = raw_events.merge_bodies(raw_events.by_session(body) for body in bodies or ())
        events = [event for post in posts for event in accepted_events(post)]
        return self._ingest(events, time.time() if now is None else now, texts)

    def ingest_prepared(self, events: Iterable[Prepared], *, now: float | None = None) -> IngestResult:
        """Folds a batch in one transaction (its sessions recorded, no raw text kept)."""
        return self._ingest(events, time.time() if now is None else now, {})

    def _ingest(
        self, events: Iterable[Prepared], received: float, texts: dict[str, list[bytes]]
    ) -> IngestResult:
        """One transaction: the rows' advisory locks, the fold, the raw texts and the sessions seen
        (in name order, so two writers never wait on each other's session records)."""
        result = IngestResult()
        pieces, result.ignored = group_pieces(events if isinstance(events, list) else list(events))
        if not pieces and not texts:
            return result
        buckets = sorted({_bucket(key) for key in pieces})
        seen = sorted({key[3] for key in pieces} | texts.keys())
        with self._writing() as db:
            with db.transaction():
                db.execute(
                    "SELECT pg_advisory_xact_lock(%s, b) FROM unnest(%s::integer[]) AS b",
                    (_LOCK_SPACE, buckets),
                )
                self._fold(db, pieces, received, result)
                with db.cursor() as cursor:
                    kept = [
                        (_enc(session), received, raw_events.compress(parts))
                        for session, parts in texts.items()
                    ]
                    if kept:
                        cursor.executemany(_KEEP_RAW, kept)
                    cursor.executemany(_SEEN, [(_enc(name), received, received) for name in seen])
            self._committed(db)
        return result

    def _fold(
        self, db: psycopg.Connection[Any], pieces: Pieces, received: float, result: IngestResult
    ) -> None:
        """As EventStore._fold: each row's pieces folded into what is stored, a chunk at a time;
        a row whose fold fails is folded again piece by piece, leaving out (naming) the bad ones."""
        keys = list(pieces)
        for start in range(0, len(keys), _FOLD_CHUNK):
            chunk = keys[start : start + _FOLD_CHUNK]
            rows = self._rows_for(db, set(chunk))
            changed: list[tuple[Any, ...]] = []
            done = 0
            while done < len(chunk):
                done, duplicates = fold_rows(chunk, done, pieces, rows, received, result.by_type, changed)
                result.duplicates += duplicates
                if done == len(chunk):
                    break
                key = chunk[done]
                rows[key] = self._rows_for(db, {key})[key]
                columns, duplicates, folded = fold_row(key[0], rows[key], pieces[key], result.refused)
                result.duplicates += duplicates
                count_folded(result.by_type, folded)
                if columns is not None:
                    changed.append(upsert_values(key, received, rows[key], columns))
                done += 1
            if changed:
                with db.cursor() as cursor:
                    cursor.executemany(_UPSERT, _encoded(changed))

    def _rows_for(self, db: psycopg.Connection[Any], keys: set[Key]) -> dict[Key, StoredRow]:
        """The stored rows for these keys (by entity id), empty for new ones."""
        by_resource: dict[str, set[str]] = {}
        for resource, entity_id, _, _ in keys:
            by_resource.setdefault(resource, set()).add(entity_id)
        lowered = {(r, e.lower(), a, s): (r, e, a, s) for r, e, a, s in keys}
        found: dict[Key, StoredRow] = {}
        for resource, entity_ids in by_resource.items():
            for entity_id, attempt, session, data, ids in db.execute(
                "SELECT entity_id::text, attempt, session, data, event_ids FROM state_rows"
                " WHERE resource = %s AND entity_id = ANY(%s::citext[])",
                (resource, [_enc(e) for e in entity_ids]),
            ):
                key = lowered.get((resource, _dec(entity_id).lower(), attempt, _dec(session)))
                if key is not None:
                    found[key] = StoredRow(orjson.loads(data), _dec(ids).split())
        for key in keys - found.keys():
            found[key] = StoredRow({}, [])
        return found

    def _write_many(self, sql: str, rows: list[tuple[Any, ...]]) -> int:
        if rows:
            with self._writing() as db:
                with db.transaction(), db.cursor() as cursor:
                    cursor.executemany(sql, _encoded(rows))
                self._committed(db)
        return len(rows)

    def add_spans(self, spans: Sequence[dict[str, Any]], *, now: float | None = None) -> int:
        """As EventStore.add_spans: a span sent twice is stored once (the later copy)."""
        received = time.time() if now is None else now
        columns = ("parent_span_id", "task_id", "name", "start_ns", "end_ns", "received", "data")
        return self._write_many(
            "INSERT INTO spans(trace_id, span_id, parent_span_id, task_id, name, start_ns, end_ns,"
            " received, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (trace_id, span_id) DO UPDATE SET "
            + ", ".join(f"{c}=excluded.{c}" for c in columns),
            [span_row(s, received) for s in spans],
        )

    def add_log_lines(self, lines: Sequence[dict[str, Any]], *, now: float | None = None) -> int:
        """As EventStore.add_log_lines."""
        received = time.time() if now is None else now
        return self._write_many(
            "INSERT INTO log_lines(ts_ns, trace_id, span_id, task_id, received, data)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            [log_line_row(line, received) for line in lines],
        )

    # -- reading -------------------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._reading() as db:
            return db.execute(sql, params).fetchall()

    def _stored_bytes(self) -> int:
        """The database's bytes."""
        return int(self._query("SELECT pg_database_size(current_database())")[0][0])

    def _note_raw_incomplete(self, reason: str) -> None:
        with self._writing() as db:
            db.execute(
                "INSERT INTO store_notes(key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (RAW_INCOMPLETE, reason),
            )

    # -- retention -----------------------------------------------------------------------------

    def used_bytes(self) -> int:
        """The bytes of the data stored (rows, spans, lines, raw blocks): PostgreSQL's files keep
        freed space until VACUUM, so their size would not fall as retention deletes."""
        return int(self._query(_DATA_BYTES)[0][0])


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
