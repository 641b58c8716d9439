"""The SQLite store's state rows as tests compare them: every column, the row's JSON unpacked and
its kept event ids as their hashes.

The compiled writer and Python pack a row's JSON alike, but what must match is the row, not the
bytes of its deflate; and every row written now is packed (a blob) and keeps its event ids as
hashes (a blob, kept_ids), which this checks."""

from __future__ import annotations

import zlib
from typing import Any

import orjson

from ray_otel_events.store.kept_ids import unpacked as unpacked_ids
from ray_otel_events.store.row_packing import row_json
from ray_otel_events.store.sqlite_store import RESOURCE_NUMBERS
from ray_otel_events.store.state_merge import INDEXED_COLUMNS

_RESOURCE = (
    "CASE resource "
    + " ".join(f"WHEN {number} THEN '{name}'" for name, number in RESOURCE_NUMBERS.items())
    + " ELSE resource END"
)
# Every column, a row's resource and session as their names: the number `sessions` gives a name is
# the order the store first saw it, which the compiled fold (rows by resource) and Python (rows as
# they come) need not share.
SELECT_ROWS = (
    f"SELECT {_RESOURCE}, entity_id, attempt,"
    " (SELECT name FROM sessions WHERE sessions.id = state_rows.session),"
    f" updated, data, event_ids, {', '.join(INDEXED_COLUMNS)}"
    " FROM state_rows ORDER BY 1, entity_id, attempt, 4"
)
# A schema-6 store's rows given the keys schema 5 and earlier wrote: resource and session names,
# entity ids as hex text (a test's store made as an older version left it).
AS_SCHEMA_5_KEYS = (
    f"UPDATE state_rows SET resource = {_RESOURCE},"
    " session = (SELECT name FROM sessions WHERE id = session),"
    " entity_id = CASE WHEN typeof(entity_id) = 'blob' THEN lower(hex(entity_id)) ELSE entity_id END"
)
_DATA = 5  # `data`'s place in SELECT_ROWS
_IDS = 6  # `event_ids`'
# The places of the key columns a packed row's dictionary may end with (entity id, node, worker)
ROW_ID_PLACES = (1, *(7 + INDEXED_COLUMNS.index(column) for column in ("node", "worker")))


def row_ids(row: tuple[Any, ...] | list[Any]) -> list[Any]:
    """A row of SELECT_ROWS' key columns, as `row_json` takes them."""
    return [row[at] for at in ROW_ID_PLACES]


def unpacked(rows: list[Any]) -> list[tuple[Any, ...]]:
    """`rows` (SELECT_ROWS' answer), each row's JSON checked to be packed and its event ids to be
    hashes, then read."""
    assert all(isinstance(row[_DATA], bytes) for row in rows), "a row's JSON was stored unpacked"
    assert all(isinstance(row[_IDS], bytes) and len(row[_IDS]) % 8 == 0 for row in rows), "ids kept as text"
    return [
        (
            *row[:_DATA],
            orjson.loads(row_json(row[_DATA], row_ids(row))),
            unpacked_ids(row[_IDS]),
            *row[_IDS + 1 :],
        )
        for row in rows
    ]


def old_raw_blob(text: bytes) -> bytes:
    """A raw events blob (a JSON array's text) as the code before raw_events.FORMAT_V1 stored it, on
    either backend: raw deflate at level 5, no format byte, no dictionary. It writes schema 5's
    fixture's blobs byte for byte (test_raw_events_format.py checks)."""
    packer = zlib.compressobj(5, zlib.DEFLATED, -15)
    return packer.compress(text) + packer.flush()
