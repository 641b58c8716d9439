"""The event store: one SQLite file (WAL) holding merged state rows, their history, spans and task logs.

`ingest` takes a batch of RayEvents (JSON form, as Ray's aggregator POSTs them) in one
transaction: every event is folded into its row (`state_merge`), which keeps its state transitions
as history. A row also keeps the ids of the events folded into it (as 8-byte hashes in a BLOB:
`kept_ids`; a TEXT of the ids joined by spaces in a row written before, read as it is), so an event
id it has seen is skipped (duplicates from retries cost nothing) with no second table to look up
and write.
Rows are keyed by session as well, so several clusters (or one cluster's restarts) stay
apart. The fields lists filter and sort on are copied into indexed columns, so `select` answers a
filtered page in SQL however many rows there are. What every row and index repeats is kept short:
the session as the number of its name in `sessions`, the resource as a small number
(`RESOURCE_NUMBERS`), and hex ids (an entity's, a node's and a worker's) as their bytes, half their
digits; reads and filters convert their values so (the dialect's `session_is`, `resource_value`,
`indexed`). Spans and task log lines
(from OTLP) are kept beside the rows, joined to a task by its id or by the span a line was
written in. Each accepted event is also kept as its text, compressed, per session (`raw_events`):
`rebuild` refolds the rows from it, and `new_fields` shows what a later Ray added. `prune` applies
the retention a whole session at a time, oldest first. The reads (`sql_reads`), the intake's
common parts (`sql_writes`, the fold loop in `row_fold`), retention and rebuild (`sql_upkeep`) are
what both backends share, in this file's dialect; what is here is SQLite's own: the schema, the
connections and the batch's transaction. One connection, guarded by a lock: the server calls it
from worker threads. Checkpoints (copying the WAL into the file, which waits on the disk) run on a
second connection in a background thread, so a write waits for neither. Where the compiled row
writer is built, a batch's rows are folded a chunk at a time and each chunk's upserts run on its
thread and connection (one transaction per batch) while the next chunk is folded: the SQL and the
Python work of one batch use two cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from ray_otel_events import config, native
from ray_otel_events.durable.wal_checkpointer import WalCheckpointer
from ray_otel_events.store import raw_events
from ray_otel_events.store.backend import IngestResult, StoreBusy, StoreError
from ray_otel_events.store.kept_ids import sqlite_hashes
from ray_otel_events.store.posted_body import Accepted, PostedBody, item_prepared
from ray_otel_events.store.row_fold import Pieces, StoredRow, fold_keys, group_pieces
from ray_otel_events.store.row_packing import ROW_DICTIONARY, id_value, pack_row, row_json
from ray_otel_events.store.sql_export import EXPORT_TABLE
from ray_otel_events.store.sql_reads import ROW_IDS, SESSION_NAME, SESSION_NUMBER, TEXT_COLUMNS, SqlDialect
from ray_otel_events.store.sql_upkeep import SqlUpkeep
from ray_otel_events.store.sqlite_library import (
    SqliteLibrary,
    compiled_library,
    compiled_writer_refusal,
    python_library,
)
from ray_otel_events.store.state_merge import (
    ACTORS,
    INDEXED_COLUMNS,
    JOBS,
    NODES,
    PLACEMENT_GROUPS,
    TASKS,
    WORKERS,
    Key,
    Prepared,
)

try:  # the upserts on a thread that needs no GIL (setup.py builds it where SQLite's headers are)
    from ray_otel_events.native import _row_writer
except ImportError:
    _row_writer = None  # type: ignore[assignment]
try:  # POSTs folded from their text, without the GIL (built beside the row writer)
    from ray_otel_events.native import _post_fold
except ImportError:
    _post_fold = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

# The SQLite each compiled module that opens the store calls, and Python's: the compiled writer
# runs only when they are one library (store/sqlite_library.py).
PYTHON_SQLITE = python_library()
COMPILED_SQLITE = {
    name: compiled_library(module)
    for name, module in (("_row_writer", _row_writer), ("_post_fold", _post_fold))
    if module is not None
}

SCHEMA_VERSION = 7
# The oldest schema this version opens: a schema-3 file differs only in its rows' JSON being text,
# which is read as it is (row_packing) and packed as each row is written again; schema 3 and 4 keep
# their node and worker ids as text, schema 5 as bytes; before 6, a row's session is its name and
# its entity id text. An older file opened to write is rewritten as schema 6 (`_TO_SCHEMA_6`), and
# read as it is when opened read-only (`_dialect_of`). Schema 7 writes rows PACKED_V2 (their
# dictionary ends with their ids, row_packing), which a version before reads as damaged: a schema-6
# file opened to write is marked 7 and nothing rewritten (its PACKED_V1 rows are read as they are),
# so such a version refuses the file as newer instead.
_OLDEST_OPENED = 3
_IDS_AS_BYTES_SINCE = 5
_KEYS_AS_NUMBERS_SINCE = 6
_IN_CHUNK = 500  # ids per `IN (...)` query
_WAL_KEPT_BYTES = 64 * 1024 * 1024  # a checkpointed WAL larger than this is truncated
# SQLite clamps this to its build's limit (2 GiB by default). Each commit of the row writer's
# connection empties the page cache of the store's own, which then reads back rows by key before a
# fold: through a map those pages cost no read() and copy.
_MMAP_BYTES = 2 * 1024**3
# Every writing connection's settings: no fsync per commit (WAL), 64 MiB of pages (the indexes stay
# in memory), the file mapped, checkpoints left to the checkpointer.
_WRITER_PRAGMAS = (
    "PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536; PRAGMA wal_autocheckpoint=0;"
    f" PRAGMA mmap_size={_MMAP_BYTES}; PRAGMA journal_size_limit={_WAL_KEPT_BYTES};"
    " PRAGMA busy_timeout=10000;"
)
# The compiled fold's own connection, which reads the rows it folds by key (mapped, as above).
_READER_PRAGMAS = f"PRAGMA cache_size=-16384; PRAGMA mmap_size={_MMAP_BYTES}; PRAGMA busy_timeout=10000;"
_FOLD_CHUNK = 128  # rows folded before their upserts are handed to the row writer
# A row's session is the number of its name in `sessions`, and a hex entity id is kept as its
# bytes: read back as the key the fold gives (lower-case hex, as `prepare` writes ids).
_ENTITY_TEXT = "CASE WHEN typeof(entity_id) = 'blob' THEN lower(hex(entity_id)) ELSE entity_id END"
# A row's resource kept as a small number (in the row, its key and every index: tasks' 1 takes no
# byte of a record), any other as its name. The number is part of the format: never renumber.
RESOURCE_NUMBERS = {TASKS: 1, ACTORS: 2, JOBS: 3, NODES: 4, WORKERS: 5, PLACEMENT_GROUPS: 6}
_RESOURCE_NAMES = {number: name for name, number in RESOURCE_NUMBERS.items()}


def resource_value(name: Any) -> Any:
    """A resource's name as state_rows.resource holds it (`_RESOURCE_VALUE` in SQL)."""
    return RESOURCE_NUMBERS.get(name, name) if isinstance(name, str) else name


def resource_name(value: Any) -> Any:
    """state_rows.resource read: the name its number stands for."""
    return _RESOURCE_NAMES.get(value, value) if isinstance(value, int) else value


# `resource_value` in SQL, of the parameter `{}` (written twice: give it a number, as ?1).
_RESOURCE_VALUE = (
    "CASE {} "
    + " ".join(f"WHEN '{name}' THEN {number}" for name, number in RESOURCE_NUMBERS.items())
    + " ELSE {} END"
)
# ROW_IDS (sql_reads): the upsert writes them with every `data` it writes (but for a text entity
# id, whose case NOCASE keeps, and which the dictionary reads case-blind), and nothing else changes
# them but the schema-6 rewrite of hex texts as their bytes, which the dictionary reads alike.
# The stored rows of some keys: by entity id (the compiled fold matches the whole key).
_SELECT_ROWS = (
    f"SELECT {_ENTITY_TEXT}, attempt, {SESSION_NAME}, data, event_ids, {ROW_IDS} FROM state_rows"
    f" WHERE resource = {_RESOURCE_VALUE.replace('{}', '?1')} AND entity_id IN ({{marks}})"
)
_SELECT_CHUNK = _SELECT_ROWS.format(marks=", ".join("?" * _FOLD_CHUNK))
_COLUMN_DEFS = ", ".join(
    f"{c} TEXT COLLATE NOCASE" if c in TEXT_COLUMNS else f"{c} INTEGER" for c in INDEXED_COLUMNS
)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS state_rows (
    resource NOT NULL,
    entity_id TEXT NOT NULL COLLATE NOCASE,
    attempt INTEGER NOT NULL,
    session INTEGER NOT NULL,
    updated REAL NOT NULL,
    data TEXT NOT NULL,
    event_ids TEXT NOT NULL,
    {_COLUMN_DEFS},
    PRIMARY KEY (resource, entity_id, attempt, session)
);
CREATE INDEX IF NOT EXISTS rows_by_update ON state_rows(resource, updated);
CREATE INDEX IF NOT EXISTS rows_by_state ON state_rows(resource, state, updated);
CREATE INDEX IF NOT EXISTS rows_by_job ON state_rows(resource, job, updated);
CREATE INDEX IF NOT EXISTS rows_by_func ON state_rows(resource, func, updated);
CREATE INDEX IF NOT EXISTS rows_by_node ON state_rows(resource, node, updated);
CREATE INDEX IF NOT EXISTS rows_by_name ON state_rows(resource, name, updated);
CREATE INDEX IF NOT EXISTS rows_by_kind ON state_rows(resource, kind);
CREATE TABLE IF NOT EXISTS spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    parent_span_id TEXT NOT NULL,
    task_id TEXT,
    name TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    received REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS spans_by_task ON spans(task_id);
CREATE INDEX IF NOT EXISTS spans_by_span ON spans(span_id);
CREATE INDEX IF NOT EXISTS spans_by_time ON spans(received);
CREATE TABLE IF NOT EXISTS log_lines (
    ts_ns INTEGER NOT NULL,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    task_id TEXT,
    received REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS lines_by_task ON log_lines(task_id, ts_ns);
CREATE INDEX IF NOT EXISTS lines_by_span ON log_lines(span_id);
CREATE INDEX IF NOT EXISTS lines_by_time ON log_lines(received);
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS raw_events (
    session TEXT NOT NULL,
    received REAL NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS raw_by_session ON raw_events(session, received);
CREATE TABLE IF NOT EXISTS store_notes (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_file_chunks (
    session TEXT NOT NULL,
    node TEXT NOT NULL,
    file TEXT NOT NULL,
    start INTEGER NOT NULL,
    received REAL NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (session, node, file, start)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS chunks_by_time ON log_file_chunks(received);
CREATE TABLE IF NOT EXISTS refused_events (
    digest TEXT PRIMARY KEY,
    received REAL NOT NULL,
    event_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    data BLOB NOT NULL
) WITHOUT ROWID;
{EXPORT_TABLE.format(real="REAL")};
"""
_SEEN = (
    "INSERT INTO sessions(name, first_seen, last_seen) VALUES (?, ?, ?)"
    " ON CONFLICT(name) DO UPDATE SET last_seen = max(last_seen, excluded.last_seen)"
)
# A row's session as its number (seen, as `_SEEN` records it, when it is new): the row writer's
# first statement for each session of a transaction (its `session` value).
_SESSION_ID = (
    "INSERT INTO sessions(name, first_seen, last_seen) VALUES (?1, ?2, ?2)"
    " ON CONFLICT(name) DO UPDATE SET last_seen = max(last_seen, excluded.last_seen) RETURNING id"
)
_KEEP_RAW = "INSERT INTO raw_events(session, received, data) VALUES (?, ?, ?)"

_UPSERT = (
    f"INSERT INTO state_rows(resource, entity_id, attempt, session, updated, data, event_ids,"
    f" {', '.join(INDEXED_COLUMNS)}) VALUES ({_RESOURCE_VALUE.replace('{}', '?1')}, ?, ?, ?, ?, ?, ?,"
    f" {', '.join('?' for _ in INDEXED_COLUMNS)})"
    " ON CONFLICT DO UPDATE SET updated=excluded.updated, data=excluded.data, event_ids=excluded.event_ids, "
    + ", ".join(f"{c}=excluded.{c}" for c in INDEXED_COLUMNS)
)
_UPSERT_VALUES = 7 + len(INDEXED_COLUMNS)
_ENTITY_VALUE = 1  # the upsert's `entity_id`
_SESSION_AT = 3  # the upsert's `session`: the session's name, stored as its number (`_SESSION_ID`)
_UPDATED_AT = 4  # the upsert's `updated`: when the batch was received
_DATA_VALUE = 5  # the upsert's `data`: the row's JSON, stored packed (row_packing)
# The ids kept as their bytes where they are hex (`id_value`): half their bytes in the rows and in
# the primary key (an entity's id: 48 hex digits of a task's) and rows_by_node (Ray's node and
# worker ids, 56 digits each). A filter's value is read so before it is compared.
_HEX_ID_COLUMNS = ("node", "worker")
_HEX_ID_VALUES = (_ENTITY_VALUE, *(7 + INDEXED_COLUMNS.index(column) for column in _HEX_ID_COLUMNS))
# The upsert's values of `ROW_IDS`, which end its packed JSON's dictionary as they are stored.
_ROW_ID_VALUES = (_ENTITY_VALUE, *(7 + INDEXED_COLUMNS.index(column) for column in ("node", "worker")))
_INDEXED_STATE_COLUMNS = ", ".join(INDEXED_COLUMNS)
_ROW_INDEXES = re.findall(r"CREATE INDEX IF NOT EXISTS (\w+) ON state_rows\(", _SCHEMA)
# A file of an older schema rewritten as schema 6, in one transaction: its rows copied into the new
# state_rows with their sessions as numbers and their hex ids as bytes (`id_value`), the sessions
# table given numbers (its sessions from the rows where it had none: a store written before they
# were kept).
_TO_SCHEMA_6 = (
    "ALTER TABLE state_rows RENAME TO state_rows_5;"
    + "".join(f" DROP INDEX IF EXISTS {name};" for name in _ROW_INDEXES)
    + " {rename_sessions}"
    + _SCHEMA
    + " {copy_sessions}"
    " INSERT INTO sessions(name, first_seen, last_seen)"
    " SELECT session, MIN(updated), MAX(updated) FROM state_rows_5 WHERE true GROUP BY session"
    " ON CONFLICT(name) DO NOTHING;"
    f" INSERT INTO state_rows(resource, entity_id, attempt, session, updated, data, event_ids,"
    f" {_INDEXED_STATE_COLUMNS})"
    f" SELECT {_RESOURCE_VALUE.replace('{}', 'resource')}, id_value(entity_id), attempt,"
    " (SELECT id FROM sessions WHERE sessions.name = state_rows_5.session), updated, data, event_ids, "
    + ", ".join(f"id_value({c})" if c in _HEX_ID_COLUMNS else c for c in INDEXED_COLUMNS)
    + " FROM state_rows_5 ORDER BY rowid;"
    " DROP TABLE state_rows_5;"
    " {drop_sessions}"
)
_SESSIONS_5 = "ALTER TABLE sessions RENAME TO sessions_5;"
_COPY_SESSIONS_5 = (
    "INSERT INTO sessions(name, first_seen, last_seen) SELECT name, first_seen, last_seen FROM sessions_5"
    " ORDER BY first_seen, name;"
)


def _packed(
    db: sqlite3.Connection, rows: list[tuple[Any, ...]], sessions: dict[str, int]
) -> list[tuple[Any, ...]]:
    """Upserts with their rows' JSON packed, their ids as bytes and their sessions as numbers
    (`sessions`: those of this transaction, by name), as the compiled writer writes them."""
    packed = []
    for row in rows:
        values = list(row)
        for at in _HEX_ID_VALUES:
            values[at] = id_value(values[at])
        values[_DATA_VALUE] = pack_row(values[_DATA_VALUE], [values[at] for at in _ROW_ID_VALUES])
        name = values[_SESSION_AT]
        if isinstance(name, str):
            number = sessions.get(name)
            if number is None:
                found = db.execute(_SESSION_ID, (name, values[_UPDATED_AT])).fetchall()
                number = sessions[name] = found[0][0]
            values[_SESSION_AT] = number
        packed.append(tuple(values))
    return packed


# SQLite's messages for a file it cannot write now (another writer, a full or failing disk): no
# event's fault, so the batch is tried again whole rather than searched for one (set_aside).
_NOT_NOW = re.compile(r"locked|busy|disk is full|disk I/O|readonly|unable to open", re.IGNORECASE)


@contextlib.contextmanager
def _store_busy() -> Iterator[None]:
    """SQLite's errors of the file, not of the events, raised as StoreBusy."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if _NOT_NOW.search(str(exc)):
            raise StoreBusy(f"SQLite cannot write the store now: {exc}") from None
        raise


def _python_writer_reason(compiled_sqlite: Mapping[str, SqliteLibrary]) -> str | None:
    """Why the store writes its rows in Python rather than with the compiled writer; None: it may not."""
    if _row_writer is None:
        return "the compiled row writer is not built (no C compiler or SQLite headers at install)"
    if not native.ENABLED:
        return f"{config.PURE_PYTHON}=1"
    refusal = compiled_writer_refusal(PYTHON_SQLITE, compiled_sqlite)
    return f"not the SQLite library Python's sqlite3 uses: {refusal}" if refusal else None


class EventStore(SqlUpkeep):
    """State rows, history, spans and task logs in one SQLite file; see the module doc."""

    dialect = SqlDialect(
        mark="?",
        id_mark="?",
        false="0",
        negated="NOT ({} IS 1)",
        like="LIKE",  # ignores case (ASCII), as the NOCASE columns compare
        text_out="{}",
        serial="rowid",
        row_ref="rowid",
        no_limit="LIMIT -1",
        byte_length="length",
        bytewise="",  # BINARY, SQLite's default collation
        missing_table=(sqlite3.OperationalError,),
        indexed=id_value,
        indexed_columns=(*_HEX_ID_COLUMNS, "entity_id"),
        is_indexed_form=lambda value: isinstance(value, bytes),
        session_value=SESSION_NUMBER,
        session_name=SESSION_NAME,
        entity_text=_ENTITY_TEXT,
        resource_value=resource_value,
        resource_name=resource_name,
    )
    # A file of an older schema opened read-only: its sessions and entity ids as they were given;
    # before schema 5, its node and worker ids too.
    _schema_5_dialect = dataclasses.replace(
        dialect,
        indexed_columns=_HEX_ID_COLUMNS,
        session_value="{}",
        session_name="session",
        entity_text="entity_id",
        resource_value=lambda name: name,
        resource_name=lambda value: value,
    )
    _text_ids_dialect = dataclasses.replace(
        _schema_5_dialect, indexed_columns=(), is_indexed_form=lambda _: False
    )

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        compiled_sqlite: Mapping[str, SqliteLibrary] = COMPILED_SQLITE,
    ) -> None:
        """`compiled_sqlite`: the SQLite each compiled module calls (by default as they report it
        at import); the compiled writer runs only where that is Python's (`writer`, `writer_reason`)."""
        super().__init__()
        self.path = Path(path)
        if read_only:
            if not self.path.exists():
                raise StoreError(f"no store at {self.path}")
            self._db = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
            )
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_WRITER_PRAGMAS)
        self._db.execute("PRAGMA busy_timeout=10000")
        self._lock = threading.Lock()
        self._generation = 0
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        known = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if version < _OLDEST_OPENED and "state_rows" in known:
            raise StoreError(
                f"{self.path} was written by an older ray-otel-events (schema {version or 1});"
                " move it away to start a new one"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema {version}, newer than this version's {SCHEMA_VERSION}")
        if read_only and version < _IDS_AS_BYTES_SINCE:
            self.dialect = self._text_ids_dialect
        elif read_only and version < _KEYS_AS_NUMBERS_SINCE:
            self.dialect = self._schema_5_dialect
        self._checkpointer: WalCheckpointer | None = None
        self._writer: _row_writer.RowWriter | None = None
        self._post_folder: _post_fold.Folder | None = None
        self.writer = "python"  # which code writes the rows: "compiled" or "python"
        self.writer_reason: str | None = "opened read-only"  # why not the compiled writer
        if not read_only:
            if version < _KEYS_AS_NUMBERS_SINCE and "state_rows" in known:
                self._to_schema_6("sessions" in known)
            else:
                self._db.executescript(_SCHEMA)
                with self._transaction() as db:
                    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._checkpointer = WalCheckpointer(self.path, name="store-checkpoint")
            self.writer_reason = _python_writer_reason(compiled_sqlite)
            if self.writer_reason is None:
                self.writer = "compiled"
                self._writer = _row_writer.RowWriter(
                    str(self.path),
                    _UPSERT,
                    _WRITER_PRAGMAS,
                    _UPSERT_VALUES,
                    sqlite3.DatabaseError,
                    packed=_DATA_VALUE,
                    dictionary=ROW_DICTIONARY,
                    hex_ids=bytes(_HEX_ID_VALUES),
                    row_ids=bytes(_ROW_ID_VALUES),
                    session=_SESSION_AT,
                    session_sql=_SESSION_ID,
                    received=_UPDATED_AT,
                )
                self._writer.prepare_keep(_KEEP_RAW, _SEEN, raw_events.RAW_DICTIONARY)
                if _post_fold is not None:
                    self._post_folder = _post_fold.Folder(
                        str(self.path),
                        _READER_PRAGMAS,
                        _SELECT_CHUNK,
                        self._writer,
                        sqlite3.DatabaseError,
                        dictionary=ROW_DICTIONARY,
                    )
                logger.info("store %s: rows written by the compiled writer", self.path)
            else:
                logger.warning("store %s: rows written in Python: %s", self.path, self.writer_reason)

    def _to_schema_6(self, had_sessions: bool) -> None:
        """An older file rewritten as schema 6 (`_TO_SCHEMA_6`), in one transaction."""
        self._db.create_function("id_value", 1, id_value, deterministic=True)
        script = (
            _TO_SCHEMA_6.replace("{rename_sessions}", _SESSIONS_5 if had_sessions else "")
            .replace("{copy_sessions}", _COPY_SESSIONS_5 if had_sessions else "")
            .replace("{drop_sessions}", "DROP TABLE sessions_5;" if had_sessions else "")
        )
        with self._committing():
            try:
                self._db.executescript(f"BEGIN IMMEDIATE; {script} PRAGMA user_version={SCHEMA_VERSION};")
                if not had_sessions:
                    self._note_raw_incomplete(self._db, "rows were stored before raw events were kept")
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        logger.info("store %s: rewritten as schema %d", self.path, SCHEMA_VERSION)

    def close(self) -> None:
        if self._writer is not None:
            with self._lock:
                if self._post_folder is not None:
                    self._post_folder.close()
                self._writer.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
        with self._lock:
            if self._checkpointer is not None:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()

    # -- writing -------------------------------------------------------------------------------

    def _ingest(self, events: list[Prepared], received: float, texts: dict[str, list[bytes]]) -> IngestResult:
        with _store_busy():
            return self._ingest_rows(events, received, texts)

    def _ingest_rows(
        self, events: list[Prepared], received: float, texts: dict[str, list[bytes]]
    ) -> IngestResult:
        result = IngestResult()
        pieces, result.ignored = group_pieces(events)
        if pieces or texts:
            with self._row_writes(texts, received) as write:
                if pieces:
                    self._fold(pieces, received, result, write)
        unkept = {key[3] for key in pieces} - texts.keys()
        if unkept:
            with self._transaction() as db:
                db.executemany(_SEEN, [(name, received, received) for name in unkept])
        return result

    def _ingest_posted(
        self, posts: list[Accepted], received: float, texts: dict[str, list[bytes]]
    ) -> IngestResult:
        """Those kept as their text (PostedBody) are folded from it by the compiled fold, all but
        the rows it hands back, which are folded here as `ingest_prepared` folds them: the same
        rows."""
        folder = self._post_folder
        if folder is None or not any(isinstance(post, PostedBody) for post in posts):
            return super()._ingest_posted(posts, received, texts)
        with _store_busy():
            return self._fold_posted(folder, posts, received, texts)

    def _fold_posted(
        self, folder: _post_fold.Folder, posts: list[Accepted], received: float, texts: dict[str, list[bytes]]
    ) -> IngestResult:
        result = IngestResult()
        with self._row_writes(texts, received) as write:
            result.by_type, result.duplicates, result.ignored, leftovers = folder.fold(posts, received)
            if leftovers:
                pieces: Pieces = {}
                for position, prepared, post, start, end in leftovers:
                    if prepared is None:  # read by the compiled fold: read as Python reads it
                        posted = posts[post]
                        assert isinstance(posted, PostedBody)
                        prepared = item_prepared(posted, start, end)
                    event_id, key, piece = prepared
                    assert key is not None and piece is not None  # events without a row are not handed back
                    pieces.setdefault(key, []).append((position, event_id, piece))
                self._fold(pieces, received, result, write)
        return result

    @property
    def folds_posted(self) -> bool:
        """Whether `ingest_posted` folds a PostedBody from its text (else it reads it in Python)."""
        return self._post_folder is not None

    def _fold(
        self,
        pieces: Pieces,
        received: float,
        result: IngestResult,
        write: Callable[[list[tuple[Any, ...]]], Any],
    ) -> None:
        """Fold each row's pieces (`row_fold`) and `write` the changed rows, a chunk of rows at a
        time."""
        keys = list(pieces)
        for start in range(0, len(keys), _FOLD_CHUNK):
            chunk = keys[start : start + _FOLD_CHUNK]
            changed, duplicates = fold_keys(
                chunk,
                pieces,
                self._rows_for(set(chunk)),
                received,
                result.by_type,
                result.refused,
                self._row_for,
            )
            result.duplicates += duplicates
            write(changed)

    def _in_chunks(self, sql: str, ids: Sequence[Any], *leading: Any) -> Iterator[Any]:
        """The rows of `sql`, whose `IN ({marks})` takes `ids` a bounded number at a time."""
        for i in range(0, len(ids), _IN_CHUNK):
            chunk = ids[i : i + _IN_CHUNK]
            yield from self._db.execute(sql.format(marks=",".join("?" * len(chunk))), [*leading, *chunk])

    def _rows_for(self, keys: set[Key]) -> dict[Key, StoredRow]:
        """The stored rows for these keys (fetched by entity id, a few IN queries), empty for new ones."""
        by_resource: dict[str, set[str]] = {}
        for resource, entity_id, _, _ in keys:
            by_resource.setdefault(resource, set()).add(entity_id)
        found: dict[Key, StoredRow] = {}
        for resource, entity_ids in by_resource.items():
            for entity_id, attempt, session, data, ids, *row_ids in self._in_chunks(
                _SELECT_ROWS, [id_value(entity_id) for entity_id in entity_ids], resource
            ):
                key = (resource, entity_id, attempt, session)
                if key in keys:
                    found[key] = StoredRow(orjson.loads(row_json(data, row_ids)), sqlite_hashes(ids))
        for key in keys - found.keys():
            found[key] = StoredRow({}, [])
        return found

    def _row_for(self, key: Key) -> StoredRow:
        return self._rows_for({key})[key]

    @contextlib.contextmanager
    def _committing(self) -> Iterator[None]:
        """A write under the lock; once it is committed, the generation moves and the checkpointer
        is woken."""
        with self._lock:
            yield
            self._generation += 1
        if self._checkpointer is not None:
            self._checkpointer.wake()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the store's connection."""
        with self._committing():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def _row_writes(
        self, texts: dict[str, list[bytes]], received: float
    ) -> Iterator[Callable[[list[tuple[Any, ...]]], Any]]:
        """One transaction of state-row upserts, yielding what writes a chunk of them: the row
        writer's `add` where it is built, else `executemany` on the store's connection. `texts`
        (POST bodies by session) are kept as raw events in the same transaction: compressed on the
        row writer's thread where it is built (the caller neither compresses nor gives up the GIL
        for it), else here."""
        writer = self._writer
        if writer is None:
            with self._transaction() as db:
                sessions: dict[str, int] = {}
                yield lambda rows: db.executemany(_UPSERT, _packed(db, rows, sessions))
                kept = [(session, received, raw_events.compress(parts)) for session, parts in texts.items()]
                db.executemany(_KEEP_RAW, kept)
                db.executemany(_SEEN, [(session, received, received) for session in texts])
            return
        with self._committing():
            try:
                yield writer.add
                for session, parts in texts.items():
                    writer.keep(session, received, parts)
            except BaseException:
                writer.rollback()
                raise
            writer.commit()

    def _see_session(self, db: Any, name: str, received: float) -> None:
        db.execute(_SEEN, (name, received, received))

    def _write_many(self, sql: str, rows: list[tuple[Any, ...]]) -> int:
        with self._transaction() as db:
            db.executemany(sql, rows)
        return len(rows)

    # -- reading -------------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """Bumped by every write: pages poll it to know when to refresh."""
        return self._generation

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def _stored_bytes(self) -> int:
        """The file's bytes, its WAL included."""
        wal = Path(str(self.path) + "-wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    # -- retention -----------------------------------------------------------------------------

    def used_bytes(self) -> int:
        """The file's pages in use (freed pages are reused, not returned: the file does not shrink)."""
        pages, free, size = (
            self._query(f"PRAGMA {name}")[0][0] for name in ("page_count", "freelist_count", "page_size")
        )
        return int((pages - free) * size)
