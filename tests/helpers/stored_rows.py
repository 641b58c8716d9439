"""The SQLite store's state rows as tests compare them: every column, the row's JSON unpacked and
its kept event ids as their hashes.

The compiled writer and Python pack a row's JSON alike, but what must match is the row, not the
bytes of its deflate; and every row written now is packed (a blob) and keeps its event ids as
hashes (a blob, kept_ids), which this checks."""

from __future__ import annotations

from typing import Any

import orjson

from ray_otel_events.store.kept_ids import unpacked as unpacked_ids
from ray_otel_events.store.row_packing import row_json

SELECT_ROWS = "SELECT * FROM state_rows ORDER BY resource, entity_id, attempt, session"
_DATA = 5  # `data`'s place in SELECT *
_IDS = 6  # `event_ids`'


def unpacked(rows: list[Any]) -> list[tuple[Any, ...]]:
    """`rows` (SELECT_ROWS' answer), each row's JSON checked to be packed and its event ids to be
    hashes, then read."""
    assert all(isinstance(row[_DATA], bytes) for row in rows), "a row's JSON was stored unpacked"
    assert all(isinstance(row[_IDS], bytes) and len(row[_IDS]) % 8 == 0 for row in rows), "ids kept as text"
    return [
        (*row[:_DATA], orjson.loads(row_json(row[_DATA])), unpacked_ids(row[_IDS]), *row[_IDS + 1 :])
        for row in rows
    ]
