"""The SQLite store's state rows as tests compare them: every column, the row's JSON unpacked.

The compiled writer and Python pack a row's JSON alike, but what must match is the row, not the
bytes of its deflate; and every row written now is packed (a blob), which this checks."""

from __future__ import annotations

from typing import Any

import orjson

from ray_otel_events.store.row_packing import row_json
from ray_otel_events.store.state_merge import INDEXED_COLUMNS

# Every column, a row's session as its name: the number `sessions` gives a name is the order the
# store first saw it, which the compiled fold (rows by resource) and Python (rows as they come)
# need not share.
SELECT_ROWS = (
    "SELECT resource, entity_id, attempt, (SELECT name FROM sessions WHERE sessions.id = state_rows.session),"
    f" updated, data, event_ids, {', '.join(INDEXED_COLUMNS)}"
    " FROM state_rows ORDER BY resource, entity_id, attempt, 4"
)
_DATA = 5  # `data`'s place in SELECT_ROWS


def unpacked(rows: list[Any]) -> list[tuple[Any, ...]]:
    """`rows` (SELECT_ROWS' answer), each row's JSON checked to be packed, then unpacked and read."""
    assert all(isinstance(row[_DATA], bytes) for row in rows), "a row's JSON was stored unpacked"
    return [(*row[:_DATA], orjson.loads(row_json(row[_DATA])), *row[_DATA + 1 :]) for row in rows]
