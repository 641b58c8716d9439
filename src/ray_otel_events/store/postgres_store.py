"""The event store on PostgreSQL: the same rows, answers and retention as sqlite_store.EventStore,
in a database several `serve` processes share. The reads (`sql_reads`), the intake's common parts
(`sql_writes`, the fold loop in `row_fold`), retention and rebuild (`sql_upkeep`) are what both
backends share, in this file's dialect; what is here is PostgreSQL's own: the schema and its
migrations, the connections, the locks and the batch's transaction.

Why its own module: the SQLite store folds with compiled code that calls SQLite itself; here the
fold runs in Python (`row_fold`, compiled where built, as everywhere) once per batch, and the database
sees a few statements per batch, not one per row. Each batch is one transaction: one
`SELECT ... FOR UPDATE` reads and locks the stored rows of all its keys (in key order, so two
writers never wait on each other in a cycle; a row another writer is folding is read once that
writer has committed), the rows are folded, then the new ones are inserted and the others updated
with one statement each from one array per column (sent in binary). A row that another writer
inserted between the read and the insert is left out by `ON CONFLICT DO NOTHING` (which waits for
that writer's commit), then read, locked and folded again onto that writer's row; the rare
deadlock this late lock can meet is broken by PostgreSQL and the batch done again. A row keeps
the ids of the events folded into it, so an event id is skipped whichever process folded it before.
`generation` is a sequence moved after each commit, so a page served by one process sees another's
writes.

The schema is created and migrated on open by numbered steps recorded in `schema_migrations`,
under a lock, so processes starting together apply each step once. Text columns are `citext`
(compared ignoring case, ordered bytewise once lowered), as SQLite's `COLLATE NOCASE` does; a
row's entity id, node and worker are `bytea` since step 13, a hex id as its bytes (`_ID_COLUMNS`).

Sessions (a `sessions` table) and raw events (compressed blocks per session, read back by
`rebuild`) are kept as sqlite_store keeps them, in the fold's transaction. A state row names its
session by the number of its record (since schema step 11, as SQLite's schema 6 does), so each
batch reads its sessions' records first (in name order), holding them until it commits with a lock
other writers do not wait for but `drop_session` does (`_held_sessions`); before that, each
session's advisory lock, shared, which a drop takes exclusive, so that writers arriving without
pause cannot keep a drop waiting (`_hold_session_alone`).

A connection lost (server restarted, network) raises StoreUnavailable; the next call connects
again, so `serve` comes back by itself when the server does.

Every update of a row adds an entry to each of state_rows' indexes (none is HOT: `updated` is in
them all), and the pages left behind stay part empty: upkeep (`prune`, each minute in `serve`)
rebuilds concurrently those grown past 1.5 times their packed size (`repack_indexes`). The dead row
versions updates leave are vacuumed as they pile up (postgres_vacuum), so later rows reuse their
space.
"""

from __future__ import annotations

import binascii
import contextlib
import dataclasses
import decimal
import hashlib
import itertools
import logging
import math
import string
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import orjson
import psycopg
import zstandard  # noqa: F401  # its raw events (raw_events.compress_zstd): missing, open_store says so
from psycopg.sql import SQL, Identifier

from ray_otel_events.store import raw_events
from ray_otel_events.store.backend import (
    IngestResult,
    Retention,
    StoreBusy,
    StoreError,
    StoreUnavailable,
    first_line,
)
from ray_otel_events.store.kept_ids import HASHED, event_hash, unpacked
from ray_otel_events.store.postgres_vacuum import MIN_DEAD, DeadRowVacuum
from ray_otel_events.store.row_fold import Pieces, StoredRow, fold_keys, group_pieces
from ray_otel_events.store.row_packing import id_value, pack_row, row_json
from ray_otel_events.store.sql_export import EXPORT_TABLE
from ray_otel_events.store.sql_reads import ROW_IDS, SESSION_NAME, SESSION_NUMBER, TEXT_COLUMNS, SqlDialect
from ray_otel_events.store.sql_upkeep import SqlUpkeep
from ray_otel_events.store.sql_writes import RAW_INCOMPLETE
from ray_otel_events.store.state_merge import INDEXED_COLUMNS, Key, Prepared

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

_LOCK_SPACE = 0x52_4F_45_53  # the first key of every advisory lock this store takes
_MIGRATION_LOCK = -1  # its second key while migrating
_REPACK_LOCK = -2  # its second key while rebuilding state_rows' indexes (`repack_indexes`)
_CONNECT_TIMEOUT_S = 5
_COLUMN_DEFS = ", ".join(
    f'{c} citext COLLATE "C"' if c in TEXT_COLUMNS else f"{c} bigint" for c in INDEXED_COLUMNS
)

_SEEN = (
    "INSERT INTO sessions(name, first_seen, last_seen) VALUES (%s, %s, %s)"
    " ON CONFLICT (name) DO UPDATE SET last_seen = GREATEST(sessions.last_seen, excluded.last_seen)"
)
# A batch's sessions, before its rows are locked (in name order): each one's record read and held
# with a KEY SHARE lock until the batch commits, which other writers' locks (theirs, and the
# last_seen update's NO KEY UPDATE) do not wait for, while `drop_session`'s FOR UPDATE does: the
# id stays that session's until the batch's rows are committed. A record missing (one dropped
# meanwhile) is inserted in the batch's transaction (`_NEW_SESSION`), which another writer of that
# session waits for; so a session this store has not recorded yet is recorded in a transaction of
# its own first (`_RECORD_SESSION`), and its first batch holds no other writer of it (a batch that
# then fails leaves the record, without rows).
_SESSION_HELD = "SELECT id, last_seen FROM sessions WHERE name = %s FOR KEY SHARE"
_NEW_SESSION = (
    "INSERT INTO sessions(name, first_seen, last_seen) VALUES (%s, %s, %s)"
    " ON CONFLICT (name) DO NOTHING RETURNING id, last_seen"
)
# After the batch's rows, in name order: a session's last event seen (a NO KEY UPDATE lock).
_RECORD_SESSION = _NEW_SESSION.removesuffix(" RETURNING id, last_seen")
_SESSION_SEEN = "UPDATE sessions SET last_seen = %s WHERE id = %s AND last_seen < %s"
_KEEP_RAW = "INSERT INTO raw_events(session, received, data) VALUES (%s, %s, %s)"
# The data that counts against `max_bytes`: the text (and compressed blocks) each table holds.
_DATA_BYTES = (
    "SELECT (SELECT COALESCE(SUM(octet_length(data) + octet_length(event_ids)), 0) FROM state_rows)"
    " + (SELECT COALESCE(SUM(octet_length(data)), 0) FROM spans)"
    " + (SELECT COALESCE(SUM(octet_length(data)), 0) FROM log_lines)"
    " + (SELECT COALESCE(SUM(octet_length(data)), 0) FROM raw_events)"
    " + (SELECT COALESCE(SUM(octet_length(data)), 0) FROM refused_events)"
    " + (SELECT COALESCE(SUM(octet_length(data)), 0) FROM log_file_chunks)"
    " + (SELECT COALESCE(SUM(octet_length(data)), 0) FROM export_entities)"
)

# The indexed text columns with an index on them: a value longer than _WHOLE_CHARS is stored there
# as its first _PREFIX_CHARS characters, an ellipsis and a hash of the whole (ASCII letters
# lowered, as the column compares): an index entry stays small, and a filter given the whole value
# compares its form, so it finds exactly the rows holding that value. The row's JSON keeps it whole.
_INDEXED_TEXT = ("state", "job", "name", "func", "node", "kind")
_WHOLE_CHARS = 160
_PREFIX_CHARS = 120
_HASH_CHARS = 32
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_INDEXED_SQL = (  # `_indexed` in SQL, of column {0}
    f"left({{0}}::text, {_PREFIX_CHARS}) || '\u2026' || left(encode(sha256(convert_to(translate({{0}}::text,"
    f" '{string.ascii_uppercase}', '{string.ascii_lowercase}'), 'UTF8')), 'hex'), {_HASH_CHARS})"
)


def _indexed(value: Any) -> Any:
    """A value as its index column holds it (see _INDEXED_TEXT); given as stored (`_enc`)."""
    if isinstance(value, str) and len(value) > _WHOLE_CHARS:
        digest = hashlib.sha256(value.translate(_ASCII_LOWER).encode()).hexdigest()[:_HASH_CHARS]
        return f"{value[:_PREFIX_CHARS]}\u2026{digest}"
    return value


def _is_indexed_form(value: Any) -> bool:
    """Whether a value read from an _INDEXED_TEXT column is `_indexed`'s form of a longer one."""
    return (
        isinstance(value, str)
        and len(value) == _PREFIX_CHARS + 1 + _HASH_CHARS
        and value[_PREFIX_CHARS] == "\u2026"
    )


# PostgreSQL's text cannot hold NUL, which SQLite's can: a string holding one (or the escape
# character itself) is stored with NUL as ESC "0" and ESC as ESC ESC, and read back, so equality and
# every answer stay as on SQLite. (The rows' JSON never holds one: orjson writes it as \\u0000.)
_ESC = "\ue000"


# Ray's enum names a state or kind column holds most (task states, actor states, and every kind:
# task, worker and job types), each kept there as one control character: an index entry carrying
# them (every index of state_rows but one has the state, the kind or both) takes 16 bytes less
# (bench/store_bytes_live_postgres.py). Part of the stored format: append, never reorder (chr(1)
# to chr(31) at most). Any other value is kept as it is, but for one that is itself a single
# control character of the codes' (from outside: no enum name is one), kept escaped (_ESC then it,
# which _dec reads back). The kind column is plain text since (not citext, which B-tree entries
# cannot deduplicate): rows_by_kind (resource, kind) keeps one entry per kind and a list of rows,
# ~8 bytes a row instead of 24 packed and ~67 as updates left it between repacks. Its filters keep
# citext's case-blind equality for every coded name (sql_reads' `condition`).
_CODED_NAMES = (
    *("NIL", "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "PENDING_OBJ_STORE_MEM_AVAIL"),
    *("PENDING_ARGS_FETCH", "SUBMITTED_TO_WORKER", "PENDING_ACTOR_TASK_ARGS_FETCH"),
    *("PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", "RUNNING", "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT"),
    *("FINISHED", "FAILED", "GETTING_AND_PINNING_ARGS"),
    *("NORMAL_TASK", "ACTOR_CREATION_TASK", "ACTOR_TASK", "DRIVER_TASK"),
    *("DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"),
    *("WORKER", "DRIVER", "SPILL_WORKER", "RESTORE_WORKER", "SUBMISSION"),
)
_CODES = {name: chr(1 + number) for number, name in enumerate(_CODED_NAMES)}
_NAMES = {code: name for name, code in _CODES.items()}
_CODED_TEXT = ("state", "kind")
_CODES_SINCE = 12  # the schema step since which they hold codes


def _coded(value: Any) -> Any:
    """A value as a _CODED_TEXT column holds it, given as stored (`_enc`); itself when not coded."""
    if isinstance(value, str):
        code = _CODES.get(value)
        if code is not None:
            return code
        if value in _NAMES:  # a single control character from outside, which would read as a name
            return _ESC + value
    return value


def _uncoded(value: Any) -> Any:
    """A _CODED_TEXT column's value read, as stored (`_enc`) before it was coded."""
    return _NAMES.get(value, value) if isinstance(value, str) else value


def _coding_sql(column: str) -> str:
    """`_coded` of a column in SQL (exact case, as `_coded`: citext's = would ignore it)."""
    cases = " ".join(f"WHEN '{name}' THEN chr({ord(code)})" for name, code in _CODES.items())
    escapes = " ".join(f"WHEN chr({ord(code)}) THEN chr({ord(_ESC)}) || chr({ord(code)})" for code in _NAMES)
    return f"CASE {column}::text {cases} {escapes} ELSE {column}::text END"


# What `_coding_sql` changes: the names and the single characters of the codes.
_CODED_ARRAY = (
    "ARRAY[" + ", ".join([*(f"'{name}'" for name in _CODES), *(f"chr({ord(code)})" for code in _NAMES)]) + "]"
)


def _named_sql(column: str) -> str:
    """A _CODED_TEXT column read as stored (`_uncoded` in SQL), comparing and sorting as the column."""
    cases = " ".join(f"WHEN chr({ord(code)}) THEN '{name}'" for code, name in _NAMES.items())
    return f'(CASE {column}::text {cases} ELSE {column}::text END)::citext COLLATE "C"'


# Since step 13 state_rows' entity_id, node and worker are bytea (`_ID_COLUMNS`): a hex text of 1 to
# 512 bytes (an entity's id, 48 digits of a task's; Ray's node and worker ids, 56) as its bytes, as
# SQLite keeps them (row_packing.id_value), half its digits in the row and in the primary key and
# rows_by_node; any other text (a malformed id, a node's name, `_indexed`'s form of a long one) as
# the byte 0x00 then its UTF-8, ASCII letters lowered (the columns compared ignoring case as citext
# did, as SQLite's NOCASE does). An id whose first byte is 0x00 is kept as 0x00 0xFF then its other
# bytes: 0xFF is never a byte of UTF-8, so no text's form equals an id's (`_id_stored` is one to
# one), and the forms sort as on SQLite (texts before ids, ids in the order of their hex).
_ID_COLUMNS = ("entity_id", "node", "worker")
_IDS_AS_BYTES_SINCE = 13  # the schema step since which they are bytea
_TEXT_FORM = b"\x00"
_ZERO_ID = b"\x00\xff"  # what an id's first byte 0x00 is kept as


def _id_stored(value: str) -> bytes:
    """A text (as stored: `_enc`, and `_indexed` in an _INDEXED_TEXT column) as an id column holds
    it (see _ID_COLUMNS)."""
    raw = id_value(value)
    if isinstance(raw, bytes):
        return raw if raw[0] else _ZERO_ID + raw[1:]
    return _TEXT_FORM + value.translate(_ASCII_LOWER).encode()


def _id_text(stored: bytes) -> str:
    """An id column's value read (`_id_stored`) as text: an id as lower-case hex, a text as stored
    (`_enc`'s form, ASCII letters lowered)."""
    if stored[:1] != _TEXT_FORM:
        return stored.hex()
    if stored[1:2] == b"\xff":
        return "00" + stored[2:].hex()
    return stored[1:].decode()


def _read(value: Any) -> Any:
    """A value read as it was given (`_dec`), an id column's (bytes) as its text (`_id_text`)."""
    if isinstance(value, bytes):
        return _dec(_id_text(value))
    return _dec(value)


def _id_or_indexed_form(value: Any) -> bool:
    """Whether a value read from an id column is a text's form (its whole text, in the case given,
    is read from a row's JSON, as SQLite reads its ids), or from another _INDEXED_TEXT column
    `_indexed`'s form of a longer one."""
    if isinstance(value, bytes):
        return value[:1] == _TEXT_FORM and value[1:2] != b"\xff"
    return _is_indexed_form(value)


# An id column `{0}` as the values a PACKED_V2 row's dictionary is made of (row_ids_text): an id's
# bytes, NULL for a text (which adds nothing to it, nor did it as the text stored before step 13).
_ID_BYTES_SQL = (
    "CASE WHEN substring({0} for 1) <> '\\x00'::bytea THEN {0}"
    " WHEN substring({0} from 2 for 1) = '\\xff'::bytea THEN '\\x00'::bytea || substring({0} from 3) END"
)
# An id column `{0}` as text (`_id_text`): what a search's LIKE matches of state_rows.entity_id.
_ID_TEXT_SQL = (
    "CASE WHEN substring({0} for 1) <> '\\x00'::bytea THEN encode({0}, 'hex')"
    " WHEN substring({0} from 2 for 1) = '\\xff'::bytea THEN '00' || encode(substring({0} from 3), 'hex')"
    " ELSE convert_from(substring({0} from 2), 'UTF8') END"
)
_ROW_ID_BYTES = ", ".join(_ID_BYTES_SQL.format(c) for c in ROW_IDS.split(", "))
# `_id_stored` in SQL, of a text column `{0}` (step 13 converts the stored texts with it).
_ID_STORED_SQL = (
    "CASE WHEN {0} ~ '^[0-9a-fA-F]+$' AND mod(length({0}), 2) = 0 AND length({0}) <= 1024 THEN"
    " CASE WHEN left({0}, 2) = '00' THEN '\\x00ff'::bytea || decode(substr({0}, 3), 'hex')"
    " ELSE decode({0}, 'hex') END"
    f" ELSE '\\x00'::bytea || convert_to(translate({{0}}, '{string.ascii_uppercase}',"
    f" '{string.ascii_lowercase}'), 'UTF8') END"
)


_TEXT_ID = 0x80  # in a row's kept event ids: an id kept as its text (see _packed_ids)


def _base64_bytes(event_id: str) -> bytes | None:
    """The bytes an event id is the canonical base64 of (as Ray's are), if 1 to 127 of them."""
    try:
        raw = binascii.a2b_base64(event_id, strict_mode=True)
    except (binascii.Error, ValueError):  # not base64, or not ASCII
        return None
    if 0 < len(raw) < _TEXT_ID and binascii.b2a_base64(raw, newline=False) == event_id.encode():
        return raw
    return None


def _packed_ids(joined: str) -> bytes:
    """A row's event ids (as the fold joins them) as the row keeps them: each id that is base64 as
    its byte count and bytes (Ray's 40 characters in 29 bytes), any other as _TEXT_ID, its UTF-8
    length (4 bytes, little-endian) and text."""
    out = bytearray()
    for event_id in joined.split():
        raw = _base64_bytes(event_id)
        if raw is None:
            text = event_id.encode("utf-8", "surrogatepass")
            out += bytes((_TEXT_ID, *len(text).to_bytes(4, "little"))) + text
        else:
            out += bytes((len(raw),)) + raw
    return bytes(out)


def _event_ids(stored: bytes) -> list[str]:
    """The event ids a row written before keeps (`_packed_ids`), as the fold gave them."""
    ids: list[str] = []
    at = 0
    while at < len(stored):
        size = stored[at]
        if size == _TEXT_ID:
            length = int.from_bytes(stored[at + 1 : at + 5], "little")
            ids.append(stored[at + 5 : at + 5 + length].decode("utf-8", "surrogatepass"))
            at += 5 + length
        else:
            ids.append(binascii.b2a_base64(stored[at + 1 : at + 1 + size], newline=False).decode())
            at += 1 + size
    return ids


def _kept_hashes(stored: bytes) -> list[int]:
    """A row's kept event ids as their hashes (kept_ids): `HASHED` and the hashes, or, in a row
    written before, the ids themselves (`_event_ids`), hashed."""
    stored = bytes(stored)
    if stored[:1] == HASHED:
        return unpacked(stored[1:])
    return [event_hash(event_id) for event_id in _event_ids(stored)]


def _stored(row: tuple[Any, ...], sessions: dict[str, int]) -> tuple[Any, ...]:
    """A folded row's upsert values as its columns will hold them, in this order: its session as
    the id of its record (`sessions`: the batch's, by name), each text value in its stored form
    (`_enc`, then `_coded` in a _CODED_TEXT column or `_indexed` in an _INDEXED_TEXT one), then its
    JSON packed PACKED_V2 with the stored values of its key columns (`_ROW_IDS_AT`: entity id,
    node, worker, as a reader reads them back beside it; row_packing.row_ids_text) and its kept ids' hashes
    (kept_ids.packed) after `HASHED`. Packed after, not before, those forms: a node value past
    _WHOLE_CHARS is stored as its prefix and hash, and the dictionary is made of what is stored.
    The dictionary reads the ids case-blind (a hex id as its bytes; a text not hex adds nothing),
    as on SQLite. Those three are then kept as their id columns hold them (`_id_stored`: bytes).
    A row with an id of another type than text (a number where a worker id belongs) keeps it as
    the text PostgreSQL wrote for it before step 13 (`_sql_text`), and is packed PACKED_V1, without
    ids, as it was then."""
    values = list(row)
    values[_SESSION_AT] = sessions[row[_SESSION_AT]]
    for i in _ENC_AT:
        value = values[i]
        if isinstance(value, str):
            value = _enc(value)
            if i in _CODED_AT and (code := _coded(value)) is not value:
                values[i] = code
            else:
                values[i] = _indexed(value) if i in _INDEXED_AT else value
    ids = [values[i] for i in _ROW_IDS_AT]
    texts = all(value is None or isinstance(value, str) for value in ids)
    values[_DATA_AT] = pack_row(values[_DATA_AT], ids if texts else None)
    values[_DATA_AT + 1] = HASHED + values[_DATA_AT + 1]
    for i, value in zip(_ROW_IDS_AT, ids, strict=True):
        if value is not None:
            values[i] = _id_stored(value if isinstance(value, str) else _sql_text(value))
    return tuple(values)


def _sql_text(value: bool | int | float) -> str:
    """A number (or boolean) as PostgreSQL writes it as text (float8out's shortest form)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    exact = decimal.Decimal(repr(value)).normalize()  # repr: the shortest digits that read back
    sign, digits, exponent = exact.as_tuple()
    assert isinstance(exponent, int)
    power = len(digits) + exponent - 1
    if -4 <= power < 15:
        return format(exact, "f")
    mantissa = "".join(map(str, digits))
    mantissa = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'+' if power >= 0 else '-'}{abs(power):02d}"


_REPACK_CHUNK = 2000  # rows read and written again at a time by migration 7


def _pack_stored_rows(db: psycopg.Connection[Any]) -> None:
    """Migration 7: every row's JSON packed (PACKED_V1, as rows were written until step 10) and
    its event ids kept as bytes (`_packed_ids`), read in chunks through a cursor (which does not
    see the rows written since it opened)."""
    db.execute(
        "ALTER TABLE state_rows ALTER COLUMN data TYPE bytea USING convert_to(data, 'UTF8'),"
        " ALTER COLUMN event_ids TYPE bytea USING convert_to(event_ids, 'UTF8')"
    )
    update = (
        "UPDATE state_rows s SET data = v.data, event_ids = v.event_ids"
        " FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::text[], %b::bytea[], %b::bytea[])"
        " AS v(resource, entity_id, attempt, session, data, event_ids) WHERE s.resource = v.resource"
        " AND s.entity_id = v.entity_id::citext AND s.attempt = v.attempt AND s.session = v.session"
    )
    with db.cursor(name="pack_rows") as rows:
        rows.execute("SELECT resource, entity_id::text, attempt, session, data, event_ids FROM state_rows")
        while chunk := rows.fetchmany(_REPACK_CHUNK):
            keys = [list(column) for column in zip(*(row[:4] for row in chunk), strict=True)]
            data = [pack_row(bytes(row[4])) for row in chunk]
            ids = [_packed_ids(_dec(bytes(row[5]).decode())) for row in chunk]
            db.execute(update, [*keys, data, ids])


# Numbered steps, applied in order and recorded in schema_migrations; never edit a released one:
# append the next. A step is SQL, or a function of the connection where SQL cannot do it.
MIGRATIONS: tuple[tuple[int, str | Callable[[psycopg.Connection[Any]], None]], ...] = (
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
    (
        # A task list filtered by state and by job, function, name or node (`ray list tasks
        # --filter state!=FINISHED --filter job_id=...`, to which Ray's API adds "not the driver")
        # counts its matches: with the state and kind in these indexes the count reads the index
        # alone, not a heap page per row (400 ms over a job's 50,000 attempts of 1,000,000,
        # against 25). Rebuilt here: a large store takes a while on this first start.
        3,
        "\n".join(
            f"DROP INDEX rows_by_{c};"
            f" CREATE INDEX rows_by_{c} ON state_rows(resource, {c}, updated) INCLUDE ({included});"
            for c, included in (
                ("job", "state, kind"),
                ("func", "state, kind"),
                ("node", "state, kind"),
                ("name", "state, kind"),
                ("state", "kind"),
            )
        ),
    ),
    (
        # A btree entry holds at most about 2.7 KB: a longer task or actor name (or function, node,
        # state) failed its batch's insert, for ever. Such text is now kept whole in the row's JSON
        # and, in its index column, as `_indexed` gives it (a prefix and a hash); the rows written
        # before are given that form here. Events that still fail (a key past the limit) are set
        # aside in refused_events, kept whole, listed and folded again by `store refold-refused`.
        4,
        "CREATE TABLE refused_events (digest text PRIMARY KEY, received double precision NOT NULL,"
        " event_id text NOT NULL, reason text NOT NULL, data bytea NOT NULL);\n"
        + "\n".join(
            f"UPDATE state_rows SET {c} = {_INDEXED_SQL.format(c)} WHERE char_length({c}) > {_WHOLE_CHARS};"
            for c in _INDEXED_TEXT
        ),
    ),
    (
        # A node's log files as `ray-otel-events collect` ships them: a chunk a POST, kept once by
        # its file and offset (a resend is harmless); a file is its chunks in offset order.
        5,
        """
CREATE TABLE log_file_chunks (
    session text NOT NULL,
    node text NOT NULL,
    file text NOT NULL,
    start bigint NOT NULL,
    received double precision NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (session, node, file, start)
);
CREATE INDEX chunks_by_time ON log_file_chunks(received);
""",
    ),
    # Ray's Export API entities: datasets, Train runs and attempts, submitted jobs, one row
    # each per session (`sql_export`).
    (6, EXPORT_TABLE.format(real="double precision")),
    # A row's JSON was most of the store's bytes (~1.6 KB of ~4.1 KB per task attempt): it is
    # kept packed as on SQLite (row_packing: deflated against a fixed dictionary), and its event
    # ids as bytes (`_packed_ids`). The rows stored before are packed here (a large store takes a
    # while on this first start, and its table keeps the old versions' space until VACUUM FULL).
    (7, _pack_stored_rows),
    # Rows written since keep their event ids as 8-byte hashes (store/kept_ids.py: a format byte
    # 0x00, then the hashes); rows from before are read either way, so nothing is rewritten. The
    # step marks the database so that a version from before it, which would read the hashes as
    # ids, refuses the database as newer instead of folding a repeated event twice.
    (
        8,
        "COMMENT ON COLUMN state_rows.event_ids IS"
        " 'the folded events'' ids: 0x00 then 8-byte BLAKE2b hashes; before step 8, length-prefixed ids'",
    ),
    # Raw event blobs written since start with a format byte and are deflated against a fixed
    # dictionary (store/raw_events.py); those from before are read as they are. A marker, as step
    # 8: a version from before it, whose rebuild could not read the new blobs, refuses the database.
    (
        9,
        "COMMENT ON COLUMN raw_events.data IS"
        " 'raw deflate of a JSON array of events; since step 9 a 0x06 format byte then a stream"
        " primed with raw_events.dict'",
    ),
    # Rows written since are PACKED_V2 (row_packing: deflate primed with the fixed dictionary and
    # the row's entity id, node and worker as their columns hold them, `_stored`): a live Ray
    # stream's row JSON 380 -> 298 bytes a task attempt (bench/store_bytes_live_postgres.py).
    # PACKED_V1 rows from before are read as they are, so nothing is rewritten. A marker, as step
    # 8: a version from before it, which reads every packed row without its ids, refuses the
    # database as newer instead of failing on the new rows.
    (
        10,
        "COMMENT ON COLUMN state_rows.data IS"
        " 'the row''s JSON packed (row_packing): PACKED_V1 (0x01) deflated against a fixed dictionary;"
        " since step 10 may be PACKED_V2 (0x02), its dictionary followed by the row''s entity_id, node"
        " and worker as stored'",
    ),
    # A row's session as the number of its record in `sessions` (as SQLite's schema 6 keeps it), not
    # its name: the ~41 bytes of "session_2026-12-02_22-31-05_123456_12345" were in every row and
    # every primary-key entry. Every session a row names gets a record if it lacks one; the column
    # is converted in place (the table and its indexes rewritten, packed): a USING expression takes
    # no subquery, so the lookup is a function, dropped after. Reads name the session through the
    # dialect (`session_value`, `session_name`); the other tables keep the name.
    (
        11,
        """
ALTER TABLE sessions ADD COLUMN id integer GENERATED BY DEFAULT AS IDENTITY;
ALTER TABLE sessions ADD CONSTRAINT sessions_id_key UNIQUE (id);
INSERT INTO sessions(name, first_seen, last_seen)
    SELECT session, MIN(updated), MAX(updated) FROM state_rows GROUP BY session
    ON CONFLICT (name) DO NOTHING;
CREATE FUNCTION ray_otel_events_session_id(text) RETURNS integer
    LANGUAGE sql STABLE AS 'SELECT id FROM sessions WHERE name = $1';
ALTER TABLE state_rows ALTER COLUMN session TYPE integer USING ray_otel_events_session_id(session);
DROP FUNCTION ray_otel_events_session_id(text);
COMMENT ON COLUMN state_rows.session IS 'the id of the row''s session in sessions (before step 11, its name)';
""",
    ),
    # A state or kind that is one of Ray's commonest enum names as its code (`_CODED_NAMES`), and
    # the kind as plain text: the rows written before are given that form here (their table and
    # indexes rewritten once, at the first start). A version from before it would read the codes
    # as states: it refuses the database.
    (
        _CODES_SINCE,
        'ALTER TABLE state_rows ALTER COLUMN kind TYPE text COLLATE "C";\n'
        "UPDATE state_rows SET "
        + ", ".join(f"{c} = {_coding_sql(c)}" for c in _CODED_TEXT)
        + " WHERE "
        + " OR ".join(f"{c}::text = ANY({_CODED_ARRAY})" for c in _CODED_TEXT)
        + ";\nCOMMENT ON COLUMN state_rows.state IS 'one of Ray''s enum names as its code since step 12"
        " (chr(1) for NIL...: postgres_store._CODED_NAMES)'",
    ),
    # A row's entity id, node and worker as bytea (`_ID_COLUMNS`): a hex id as its bytes, half its
    # digits (a task attempt's row, primary-key entry and rows_by_node entry held ~180 bytes of
    # hex), any other text in a form no id takes. Converted in place (the table and its indexes
    # rewritten, packed). A PACKED_V2 row's dictionary is read from an id's bytes as it was from
    # its hex (row_packing.row_ids_text), so no row is repacked. A marker too, as step 8: a version
    # from before it refuses the database as newer.
    (
        _IDS_AS_BYTES_SINCE,
        "ALTER TABLE state_rows "
        + ", ".join(
            f"ALTER COLUMN {c} TYPE bytea USING {_ID_STORED_SQL.format(f'({c}::text)')}" for c in _ID_COLUMNS
        )
        + ";\n"
        + "\n".join(
            f"COMMENT ON COLUMN state_rows.{c} IS 'a hex id as its bytes (a first byte 0x00 as 0x00 0xff),"
            f" any other text as 0x00 then its UTF-8 with ASCII letters lowered (before step 13, citext)';"
            for c in _ID_COLUMNS
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]
_SESSION_IDS_SINCE = 11  # the schema step since which state_rows.session is a sessions.id

_KEY_COLUMNS = "resource, entity_id, attempt, session"
_ROW_COLUMNS = (*_KEY_COLUMNS.split(", "), "updated", "data", "event_ids", *INDEXED_COLUMNS)
_ROW_TYPES = {
    "attempt": "bigint",
    "session": "integer",  # the id of its record in `sessions` (step 11)
    **dict.fromkeys(_ID_COLUMNS, "bytea"),  # `_id_stored` (step 13)
    "updated": "float8",
    "data": "bytea",
    "event_ids": "bytea",
    "start_ms": "bigint",
    "end_ms": "bigint",
}
# A batch's rows as one array per column: one statement writes them all. The arrays are sent in
# PostgreSQL's binary form (`%b`): as text, the server spent more time parsing them than writing.
_ROW_ARRAYS = (
    "unnest("
    + ", ".join(f"%b::{_ROW_TYPES.get(c, 'text')}[]" for c in _ROW_COLUMNS)
    + f") AS v({', '.join(_ROW_COLUMNS)})"
)
_KEY_MATCH = (
    "s.resource = k.resource AND s.entity_id = k.entity_id AND s.attempt = k.attempt"
    " AND s.session = k.session"
)
# The stored rows of a batch's keys, locked in one order (so two writers never wait on each other
# in a cycle), each the newest committed version once a writer holding it has committed.
_LOCKED_IDS = ", ".join(_ID_BYTES_SQL.format(f"s.{c}") for c in ROW_IDS.split(", "))
_LOCK_ROWS = (
    f"SELECT k.n, s.data, s.event_ids, {_LOCKED_IDS}"
    " FROM state_rows s JOIN unnest(%b::text[], %b::bytea[], %b::bigint[], %b::integer[]) WITH ORDINALITY"
    f" AS k(resource, entity_id, attempt, session, n) ON {_KEY_MATCH}"
    f" ORDER BY s.resource, s.entity_id, s.attempt, s.session FOR UPDATE OF s"
)
# Rows read absent: one another writer inserted since is left as it is (and named by its absence
# from what the insert returns).
_INSERT_ROWS = (
    f"INSERT INTO state_rows({', '.join(_ROW_COLUMNS)}) SELECT * FROM {_ROW_ARRAYS}"
    f" ORDER BY {_KEY_COLUMNS} ON CONFLICT DO NOTHING RETURNING {_KEY_COLUMNS}"
)
# Rows read present (and locked since).
_UPDATE_ROWS = (
    "UPDATE state_rows s SET "
    + ", ".join(f"{c} = v.{c}" for c in _ROW_COLUMNS[4:])
    + f" FROM {_ROW_ARRAYS} WHERE "
    + _KEY_MATCH.replace("k.", "v.")
)
# A row with a value of a type its column does not take as it is (an indexed field that is a
# number where text belongs, say): written alone, PostgreSQL converting it as it does a parameter.
_INSERT_ROW = (
    f"INSERT INTO state_rows({', '.join(_ROW_COLUMNS)}) VALUES ({', '.join(['%s'] * len(_ROW_COLUMNS))})"
    " ON CONFLICT DO NOTHING"
)
_UPDATE_ROW = (
    "UPDATE state_rows SET "
    + ", ".join(f"{c} = %s" for c in _ROW_COLUMNS[4:])
    + " WHERE resource = %s AND entity_id = %s AND attempt = %s AND session = %s"
)
# state_rows' valid indexes: name, bytes, and the bytes of their entries' columns in an average row
# (ANALYZE's widths, NULLs counted as nothing; NULL while a column has no statistics yet).
_INDEX_SIZES = """
SELECT c.relname, pg_relation_size(c.oid),
       (SELECT CASE WHEN COUNT(s.avg_width) = COUNT(*) THEN SUM(s.avg_width * (1 - s.null_frac)) END
        FROM unnest(i.indkey::int2[]) AS k(attnum)
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        LEFT JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = 'state_rows'
             AND s.attname = a.attname)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.indrelid = 'state_rows'::regclass AND i.indisvalid
ORDER BY c.relname
"""
# What REINDEX CONCURRENTLY leaves of state_rows when it is stopped midway: its invalid copies.
_LEFT_OVER = (
    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " WHERE i.indrelid = 'state_rows'::regclass AND NOT i.indisvalid AND c.relname ~ '_cc(new|old)[0-9]*$'"
)
_BUILDING = "SELECT 1 FROM pg_stat_progress_create_index WHERE relid = 'state_rows'::regclass"
_REPACK_WAIT_S = 60  # how long a rebuild waits for a lock (an older transaction to end)
_ENTRY_OVERHEAD = 16  # bytes an index entry takes besides its columns: header, line pointer, alignment
_LEAF_FILL = 0.9  # what REINDEX fills a B-tree leaf to (its default fillfactor)
# SQLSTATE classes of a server that cannot write now (out of disk or memory, shutting down, an I/O
# error): no event's fault, so a failed batch is tried again whole, not searched for one
# (set_aside). Any other error of a live connection (an index entry too large, say) is the batch's.
_NOT_NOW = ("53", "57", "58")
_ROLLBACK_TRIES = 5  # a batch's transaction rolled back by PostgreSQL (a deadlock), then it fails
_UPSERT_ROW = (
    _INSERT_ROW.removesuffix(" DO NOTHING")
    + f" ({_KEY_COLUMNS}) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _ROW_COLUMNS[4:])
)
_DATA_AT = _ROW_COLUMNS.index("data")
_SESSION_AT = _ROW_COLUMNS.index("session")
_ENC_AT = tuple(  # (str: `_enc`)
    i for i in range(len(_ROW_COLUMNS)) if i not in (_DATA_AT, _DATA_AT + 1, _SESSION_AT)
)
_ROW_IDS_AT = tuple(_ROW_COLUMNS.index(c) for c in ROW_IDS.split(", "))  # a PACKED_V2 dictionary's ids
_INDEXED_AT = frozenset(_ROW_COLUMNS.index(c) for c in _INDEXED_TEXT)
_CODED_AT = frozenset(_ROW_COLUMNS.index(c) for c in _CODED_TEXT)
_TEXT_AT = tuple(i for i, c in enumerate(_ROW_COLUMNS) if _ROW_TYPES.get(c, "text") == "text")
_INT_AT = tuple(i for i, c in enumerate(_ROW_COLUMNS) if _ROW_TYPES.get(c) in ("bigint", "integer"))


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


def _encoded_texts(values: list[Any]) -> list[Any]:
    """A column's values with `_enc` applied, checked for the two characters all at once first."""
    joined = "".join(v for v in values if v is not None)
    if "\x00" not in joined and _ESC not in joined:
        return values
    return [_enc(v) for v in values]


def _odd(columns: list[list[Any]]) -> set[int]:
    """Indexes of the rows (given as columns) with a value not of its column's type (nor None),
    which arrays do not take: each column's types looked at once, the rows only of one that has."""
    odd: set[int] = set()
    for at, kinds in ((_TEXT_AT, {str}), (_INT_AT, {int})):
        for i in at:
            if not set(map(type, columns[i])) <= {*kinds, type(None)}:
                odd |= {
                    n for n, value in enumerate(columns[i]) if value is not None and type(value) not in kinds
                }
    return odd


def _stored_row(found: tuple[Any, ...] | None) -> StoredRow:
    """A stored row as the fold takes it (empty for a new one), from `_lock_rows`' (data, event
    ids, ROW_IDS): its JSON unpacked with the ids its key columns hold (a PACKED_V2 row's
    dictionary; a PACKED_V1 row, or JSON text, reads without them)."""
    return (
        StoredRow({}, [])
        if found is None
        else StoredRow(orjson.loads(row_json(found[0], found[2:])), _kept_hashes(found[1]))
    )


def _merged_case_variants(pieces: Pieces) -> Pieces:
    """Keys that differ only in their entity id's case are one row here (the column ignores case):
    their pieces folded under the first, in the order SQLite folds them (one key's after the
    other's)."""
    lowered = {(r, e.lower(), a, s) for r, e, a, s in pieces}
    if len(lowered) == len(pieces):
        return pieces
    merged: Pieces = {}
    first: dict[Key, Key] = {}
    for key, folds in pieces.items():
        resource, entity_id, attempt, session = key
        into = first.setdefault((resource, entity_id.lower(), attempt, session), key)
        merged.setdefault(into, []).extend(folds)
    return merged


def _fold_keys(
    keys: list[Key],
    pieces: Pieces,
    stored: dict[int, tuple[Any, ...]],
    received: float,
    result: IngestResult,
    sessions: dict[str, int],
) -> list[tuple[Any, ...]]:
    """The upsert rows of `keys` folded onto `stored` (by index in `keys`; absent: a new row),
    as their columns will hold them (`_stored`, with the batch's session ids), counted in
    `result`. A row whose fold fails is folded again piece by piece, leaving out (naming) the bad
    ones."""
    rows = {key: _stored_row(stored.get(n)) for n, key in enumerate(keys)}
    changed, duplicates = fold_keys(
        keys,
        pieces,
        rows,
        received,
        result.by_type,
        result.refused,
        lambda key: _stored_row(stored.get(keys.index(key))),
    )
    result.duplicates += duplicates
    return [_stored(row, sessions) for row in changed]


def _session_key(name: str) -> int:
    """The second key of session `name`'s advisory lock: at least 0, so apart from _MIGRATION_LOCK
    and _REPACK_LOCK (two names that share one: a drop of either also holds off the other's writers)."""
    return zlib.crc32(name.encode("utf-8", "surrogatepass")) & 0x7FFF_FFFF


def _hold_session_alone(db: psycopg.Connection[Any], name: str) -> None:
    """`drop_session`'s lock (SqlDialect.session_lock): the session's advisory lock, exclusive,
    which writers ask for shared before any other lock (`_held_sessions`). Unlike a row lock, it is
    queued fairly: writers that come after wait for the drop, so a session written without pause
    is still dropped; and with its writers out, a chunk's deletes cannot deadlock with theirs.
    Then the record: a writer of this session commits before, or records it anew after (another id)."""
    db.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, _session_key(name)))
    db.execute("SELECT 1 FROM sessions WHERE name = %s FOR UPDATE", (_enc(name),))


def _held_sessions(
    db: psycopg.Connection[Any], names: list[str], received: float
) -> tuple[dict[str, int], list[int]]:
    """The id of each of `names`' records (in name order), held until commit (`_SESSION_HELD`),
    recorded if missing; and the ids whose last event seen is before `received`. First the
    sessions' advisory locks, shared, in key order (`_hold_session_alone`)."""
    db.execute(
        "SELECT pg_advisory_xact_lock_shared(%s, key) FROM unnest(%s::int[]) WITH ORDINALITY AS k(key, n)"
        " ORDER BY n",
        (_LOCK_SPACE, sorted({_session_key(name) for name in names})),
    )
    ids: dict[str, int] = {}
    later: list[int] = []
    for name in names:
        params = (_enc(name),)
        while True:  # a record dropped between the read and the insert is read again, once inserted
            found = db.execute(_SESSION_HELD, params).fetchone()
            if found is None:
                found = db.execute(_NEW_SESSION, (_enc(name), received, received)).fetchone()
            if found is not None:
                break
        ids[name] = int(found[0])
        if float(found[1]) < received:
            later.append(ids[name])
    return ids, later


def _stored_key(key: Key, sessions: dict[str, int]) -> tuple[Any, ...]:
    """A row's key as its stored row (`_stored`) holds it: its entity id as its column holds it
    (`_id_stored`), its session as its record's id."""
    resource, entity_id, attempt, session = key
    return _enc(resource), _id_stored(_enc(entity_id)), attempt, sessions[session]


class PostgresStore(SqlUpkeep):
    """State rows, history, spans and task logs in a PostgreSQL database; see the module doc."""

    dialect = SqlDialect(
        mark="%s",
        id_mark="%s",  # bytea since step 13 (`_id_stored`)
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
        dec=_read,
        indexed=_indexed,
        indexed_columns=_INDEXED_TEXT,
        is_indexed_form=_id_or_indexed_form,
        kept_hashes=_kept_hashes,
        session_value=SESSION_NUMBER,
        session_name=SESSION_NAME,
        coded_columns=_CODED_TEXT,
        coded=_coded,
        uncoded=_uncoded,
        named=_named_sql("{0}"),
        session_lock=_hold_session_alone,
        entity_text=_ID_TEXT_SQL.format("entity_id"),
        id_columns=_ID_COLUMNS,
        id_value=_id_stored,
        empty_id=f"'\\x{_TEXT_FORM.hex()}'::bytea",  # `_id_stored("")`
        row_ids=_ROW_ID_BYTES,
    )
    # A database before step 13 opened read-only: its ids as citext (a text parameter would compare
    # the column as text: case and index lost); before step 12, its states and kinds as they were
    # given; before step 11, its rows name their session too.
    _text_ids_dialect = dataclasses.replace(
        dialect,
        id_mark="%s::citext",
        dec=_dec,
        is_indexed_form=_is_indexed_form,
        entity_text="entity_id",
        id_columns=(),
        id_value=lambda value: value,
        empty_id="''",
        row_ids=ROW_IDS,
    )
    _uncoded_dialect = dataclasses.replace(_text_ids_dialect, coded_columns=())
    _session_names_dialect = dataclasses.replace(_uncoded_dialect, session_value="{}", session_name="session")

    writer = "python"
    writer_reason: str | None = "PostgreSQL: the compiled row writer writes SQLite only"
    # An index past this many times its packed bytes is rebuilt (`repack_indexes`). Not 2: the
    # primary key (random task ids, and a new entry per update) stayed at 1.8-2.0 on a live stream,
    # 84 bytes a task attempt over its packed 97 (bench/store_bytes_live_postgres.py).
    repack_ratio = 1.5
    repack_min_bytes = 1 << 20  # and only from this size: a small one is not worth the rebuild
    repacking = True  # False once PostgreSQL refused this user a rebuild
    vacuum_min_dead = MIN_DEAD  # row versions the fold left dead that call for a VACUUM (postgres_vacuum)

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        super().__init__()
        self.url = url
        self.read_only = read_only
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._writer: psycopg.Connection[Any] | None = None
        self._reader: psycopg.Connection[Any] | None = None
        self.rolled_back = 0  # batches PostgreSQL rolled back (a deadlock) and this store did again
        self._recorded: set[str] = set()  # sessions whose record this store committed or found
        self._vacuum = None if read_only else DeadRowVacuum(self._connect, min_dead=self.vacuum_min_dead)
        with self._reading() as db:
            if read_only:
                version = self._check_version(db)
                if version < _SESSION_IDS_SINCE:
                    self.dialect = self._session_names_dialect
                elif version < _CODES_SINCE:
                    self.dialect = self._uncoded_dialect
                elif version < _IDS_AS_BYTES_SINCE:
                    self.dialect = self._text_ids_dialect
            else:
                self._migrate(db)

    @property
    def vacuums(self) -> int:
        """The VACUUMs of state_rows this store ran (postgres_vacuum)."""
        return self._vacuum.vacuums if self._vacuum is not None else 0

    # -- connections ---------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot reach PostgreSQL at {self._where()}: {first_line(exc)}") from None

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
                    if (getattr(exc, "sqlstate", None) or "")[:2] in _NOT_NOW:
                        raise StoreBusy(f"PostgreSQL cannot write now: {first_line(exc)}") from None
                    raise StoreError(f"PostgreSQL refused the transaction: {first_line(exc)}") from None
                with contextlib.suppress(Exception):
                    db.close()
                setattr(self, which, None)
                raise StoreUnavailable(f"lost PostgreSQL at {self._where()}: {first_line(exc)}") from None

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
        if self._vacuum is not None:
            self._vacuum.close()
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

    def _check_version(self, db: psycopg.Connection[Any]) -> int:
        """The database's schema step, if this version reads it."""
        version = self._applied(db)
        if version == 0:
            raise StoreError(f"no store in the database at {self._where()} (no `serve` has written it)")
        if version > SCHEMA_VERSION:
            raise StoreError(f"the database has schema {version}, newer than this version's {SCHEMA_VERSION}")
        return version

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
                        if callable(sql):
                            sql(db)
                        else:
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

    def _ingest(self, events: list[Prepared], received: float, texts: dict[str, list[bytes]]) -> IngestResult:
        """One transaction: the sessions seen recorded first (in name order, so two writers never
        wait on each other's session records in a cycle), each one's id returned (a row names its
        session by it), then the batch's rows locked, folded and written (a statement each way) and
        the raw texts kept. A transaction PostgreSQL rolled back to break a deadlock with another
        writer is done again."""
        pieces, ignored = group_pieces(events)
        if not pieces and not texts:
            return IngestResult(ignored=ignored)
        pieces = _merged_case_variants(pieces)
        seen = sorted({key[3] for key in pieces} | texts.keys())
        kept = [(_enc(session), received, raw_events.compress_zstd(texts[session])) for session in texts]

        updated = 0
        if not self._recorded.issuperset(seen):
            self._record_sessions(seen, received)

        def write(db: psycopg.Connection[Any]) -> IngestResult:
            nonlocal updated
            result = IngestResult(ignored=ignored)
            sessions, later = _held_sessions(db, seen, received)
            updated = self._fold(db, pieces, received, result, sessions)
            with db.cursor() as cursor:
                if kept:
                    cursor.executemany(_KEEP_RAW, kept)
                if later:
                    cursor.executemany(_SESSION_SEEN, [(received, number, received) for number in later])
            return result

        done = self._retried(write, f"a batch of {len(pieces)} rows")
        if self._vacuum is not None:
            self._vacuum.count(updated)
        return done

    def _record_sessions(self, names: list[str], received: float) -> None:
        """The records of `names` that are missing inserted (in name order) and committed: a batch
        that inserted one in its transaction would hold every other writer of that session until it
        commits (`_held_sessions`). The names are remembered (a record dropped since is inserted by
        the batch)."""

        def record(db: psycopg.Connection[Any]) -> None:
            with db.cursor() as cursor:
                cursor.executemany(_RECORD_SESSION, [(_enc(name), received, received) for name in names])

        self._retried(record, f"{len(names)} session records")
        self._recorded.update(names)

    def _retried(self, write: Callable[[psycopg.Connection[Any]], _T], what: str) -> _T:
        """`write` in one transaction, done again (up to `_ROLLBACK_TRIES` in all) while PostgreSQL
        rolls it back to break a deadlock with another writer; each retry logged and counted in
        `rolled_back`. Still rolled back at the last try: StoreBusy, which `serve` answers with 503
        and Retry-After (a folded POST stays in the intake spool and is tried again)."""
        for tries in itertools.count(1):
            with self._writing() as db:
                try:
                    with db.transaction():
                        done = write(db)
                except psycopg.OperationalError as exc:
                    if not _rolled_back(exc) or db.broken:
                        raise
                    if tries >= _ROLLBACK_TRIES:
                        raise StoreBusy(
                            f"PostgreSQL rolled {what} back {tries} times: {first_line(exc)}"
                        ) from None
                    self.rolled_back += 1
                    logger.warning(
                        "PostgreSQL rolled %s back (try %d of %d), doing it again: %s",
                        what,
                        tries,
                        _ROLLBACK_TRIES,
                        first_line(exc),
                    )
                    continue
                self._committed(db)
            return done
        raise AssertionError("unreachable")

    def _fold(
        self,
        db: psycopg.Connection[Any],
        pieces: Pieces,
        received: float,
        result: IngestResult,
        sessions: dict[str, int],
    ) -> int:
        """As EventStore._fold, for the whole batch at once: its stored rows read and locked,
        folded, the new ones inserted and the others updated (a statement each). A row another
        writer inserted since it was read is folded again onto that writer's row, now locked.
        The keys hold session names as the fold gives them; `sessions` (each one's id, recorded
        in this transaction) converts them where a statement meets state_rows. Returns how many
        rows were updated (each left a dead version)."""
        keys = list(pieces)
        stored = self._lock_rows(db, keys, sessions)
        changed = _fold_keys(keys, pieces, stored, received, result, sessions)
        present = {_stored_key(keys[n], sessions) for n in stored}
        updated = [row for row in changed if tuple(row[:4]) in present]
        self._write_rows(db, _UPDATE_ROWS, _UPDATE_ROW, updated)
        inserted = self._write_rows(
            db, _INSERT_ROWS, _INSERT_ROW, [r for r in changed if tuple(r[:4]) not in present]
        )
        if inserted is None:
            return len(updated)
        given = {_stored_key(key, sessions): key for key in keys}
        late = [given[tuple(row[:4])] for row in inserted]
        # Take back what folding them onto nothing counted, and count their fold onto what is stored.
        undone = IngestResult()
        _fold_keys(late, pieces, {}, received, undone, sessions)
        for event_type, count in undone.by_type.items():
            result.by_type[event_type] -= count
            if not result.by_type[event_type]:
                del result.by_type[event_type]
        result.duplicates -= undone.duplicates
        for refusal in undone.refused:
            result.refused.remove(refusal)
        found = self._lock_rows(db, late, sessions)
        changed = _fold_keys(late, pieces, found, received, result, sessions)
        present = {_stored_key(late[n], sessions) for n in found}
        self._write_rows(db, _UPDATE_ROWS, _UPDATE_ROW, [r for r in changed if tuple(r[:4]) in present])
        for row in changed:  # gone again (retention), or equal to another of the batch's keys
            if tuple(row[:4]) not in present:
                db.execute(_UPSERT_ROW, row)
        return len(updated) + len(changed)

    def _lock_rows(
        self, db: psycopg.Connection[Any], keys: list[Key], sessions: dict[str, int]
    ) -> dict[int, tuple[Any, ...]]:
        """(data, event ids, then the `ROW_IDS` a PACKED_V2 row's dictionary is made of) of the
        stored rows of `keys` (their sessions' ids in `sessions`), by index in `keys`, locked until
        commit."""
        if not keys:
            return {}
        resources, entity_ids, attempts, names = (list(column) for column in zip(*keys, strict=True))
        ids = [_id_stored(entity_id) for entity_id in _encoded_texts(entity_ids)]
        params = [resources, ids, attempts, [sessions[name] for name in names]]
        return {int(n) - 1: tuple(found) for n, *found in db.execute(_LOCK_ROWS, params)}

    def _write_rows(
        self, db: psycopg.Connection[Any], many: str, one: str, rows: list[tuple[Any, ...]]
    ) -> list[tuple[Any, ...]] | None:
        """Writes `rows` (as stored: `_stored`) with `many` (arrays, one statement), a row with a
        value of another type than its column's with `one` (alone); the rows an insert found
        present, or None."""
        if not rows:
            return None
        columns = [list(column) for column in zip(*rows, strict=True)]
        odd = _odd(columns)
        plain = rows
        if odd:
            plain = [row for n, row in enumerate(rows) if n not in odd]
            columns = [list(column) for column in zip(*plain, strict=True)] if plain else []
        missed: list[tuple[Any, ...]] = []
        if plain:
            cursor = db.execute(many, columns)
            if many is _INSERT_ROWS and cursor.rowcount != len(plain):
                written = {tuple(key) for key in cursor.fetchall()}
                missed = [row for row in plain if tuple(row[:4]) not in written]
        for row in (rows[n] for n in sorted(odd)):
            params = row if many is _INSERT_ROWS else row[4:] + row[:4]
            if db.execute(one, params).rowcount != 1:
                missed.append(row)
        return (missed or None) if many is _INSERT_ROWS else None

    # -- index upkeep --------------------------------------------------------------------------

    def prune(self, retention: Retention, *, now: float | None = None) -> int:
        """The retention (SqlUpkeep.prune), then the state rows' indexes repacked where they need
        it (`repack_indexes`)."""
        deleted = super().prune(retention, now=now)
        self.repack_indexes()
        return deleted

    def _packed_bytes(self, db: psycopg.Connection[Any]) -> dict[str, tuple[int, float]]:
        """Per index of state_rows: its bytes, and what it would take packed as REINDEX packs it,
        from the last ANALYZE's row count and column widths (autovacuum analyzes the table again
        once a tenth of it has changed; this store analyzes it if it never was). Not the rows per
        page times the pages now (as the planner counts): updates leave pages part empty, so that
        counted rows the table no longer had and missed a bloat; nor the statistics' live count,
        which a writer's counts sent after an ANALYZE add to again."""
        for _ in range(2):
            found = db.execute("SELECT reltuples FROM pg_class WHERE oid = 'state_rows'::regclass").fetchone()
            rows = float(found[0]) if found else -1.0  # -1: never analyzed
            widths = db.execute(_INDEX_SIZES).fetchall()
            if rows >= 0 and all(width is not None for _, _, width in widths):
                return {
                    name: (int(size), rows * (float(width) + _ENTRY_OVERHEAD) / _LEAF_FILL)
                    for name, size, width in widths
                }
            db.execute("ANALYZE state_rows")
        return {}

    def repack_indexes(self) -> list[str]:
        """state_rows' indexes rebuilt (REINDEX CONCURRENTLY: reads and writes go on meanwhile)
        where one takes more than `repack_ratio` times what it would packed and at least
        `repack_min_bytes`; the names rebuilt. Why: each update of a row adds an entry to every
        index (its `updated` is in them all, so none is HOT), always at the high end of its key
        range, and the pages it leaves behind keep only the entries whose row was not updated
        since: a cluster sends a task's transitions in several POSTs, and on a live Ray stream the
        indexes held 3.4 times the bytes of their entries. One process of those sharing the
        database does it at a time (an advisory lock), on a connection of its own, so the writer
        is not held; what an interrupted rebuild left (an invalid copy) is dropped first. A
        rebuild that waits more than _REPACK_WAIT_S for a lock (a transaction older than it) stops
        there, and the next round tries again. A user not allowed to rebuild them (not the table's
        owner) is told once, and this store does not try again."""
        if self.read_only or not self.repacking:
            return []
        db = self._connect()
        rebuilt: list[str] = []
        started = time.monotonic()
        locked = False
        try:
            found = db.execute("SELECT pg_try_advisory_lock(%s, %s)", (_LOCK_SPACE, _REPACK_LOCK)).fetchone()
            locked = bool(found and found[0])
            if not locked:  # another process is at it
                return rebuilt
            # A rebuild waits for the transactions older than it: past this, it stops (its invalid
            # copy is dropped next round) and upkeep goes on.
            db.execute(f"SET lock_timeout = '{_REPACK_WAIT_S}s'")
            if db.execute(_BUILDING).fetchone():  # someone else's index build (its copy is not left over)
                return rebuilt
            for (name,) in db.execute(_LEFT_OVER).fetchall():
                db.execute(SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(Identifier(name)))
            largest = db.execute(
                "SELECT MAX(pg_relation_size(indexrelid)) FROM pg_index"
                " WHERE indrelid = 'state_rows'::regclass"
            ).fetchone()
            if not (largest and largest[0] is not None and int(largest[0]) >= self.repack_min_bytes):
                return rebuilt  # (nor is the table analyzed for them)
            for name, (size, packed) in self._packed_bytes(db).items():
                if size >= self.repack_min_bytes and size > self.repack_ratio * packed:
                    db.execute(SQL("REINDEX INDEX CONCURRENTLY {}").format(Identifier(name)))
                    rebuilt.append(name)
        except psycopg.errors.InsufficientPrivilege as exc:
            self.repacking = False
            logger.warning("state_rows' indexes will not be repacked: %s", first_line(exc))
        except psycopg.Error as exc:  # the next round tries again
            logger.warning("repacking state_rows' indexes stopped: %s", first_line(exc))
        finally:
            if locked and not db.broken:  # now: a closed connection's server process ends it later
                with contextlib.suppress(psycopg.Error):
                    db.execute("SELECT pg_advisory_unlock(%s, %s)", (_LOCK_SPACE, _REPACK_LOCK))
            db.close()
        if rebuilt:
            logger.info(
                "repacked state_rows' indexes %s in %.1f s", ", ".join(rebuilt), time.monotonic() - started
            )
        return rebuilt

    def _see_session(self, db: Any, name: str, received: float) -> None:
        db.execute(_SEEN, (_enc(name), received, received))

    def _write_many(self, sql: str, rows: list[tuple[Any, ...]]) -> int:
        if rows:
            encoded = _encoded(rows)

            def write(db: psycopg.Connection[Any]) -> None:
                with db.cursor() as cursor:
                    cursor.executemany(sql, encoded)

            self._retried(write, f"{len(rows)} rows")
        return len(rows)

    # -- reading -------------------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._reading() as db:
            return db.execute(sql, params).fetchall()

    def _stored_bytes(self) -> int:
        """The database's bytes."""
        return int(self._query("SELECT pg_database_size(current_database())")[0][0])

    # -- retention -----------------------------------------------------------------------------

    def used_bytes(self) -> int:
        """The bytes of the data stored (rows, spans, lines, raw blocks, log files): PostgreSQL's files keep
        freed space until VACUUM, so their size would not fall as retention deletes."""
        return int(self._query(_DATA_BYTES)[0][0])


def _rolled_back(exc: psycopg.Error) -> bool:
    """Whether PostgreSQL rolled the transaction back for it to be tried again (SQLSTATE class 40:
    a deadlock, a serialization failure). By code: psycopg's DeadlockDetected is no subclass of its
    TransactionRollback, so catching that class never caught a deadlock."""
    return (exc.sqlstate or "").startswith("40")
