"""A batch's pieces folded into their stored rows, row by row, between the store's read of the rows
and its write of them.

Each row skips the event ids it has already folded (a retried POST, a spool replayed after
`kill -9`; it keeps them as their hashes, `kept_ids`) and counts what it folded only once the whole
row is done, so a row that fails part way (a value only its fold reads) can be folded again from
what is stored, piece by piece, leaving out the pieces that fail. `fold_rows` is the loop over a
chunk's rows: in `serve` it is most of the Python the fold thread runs per event, so it is compiled
where a C compiler is present (`_state_fold.fold_rows`); `RAY_OTEL_EVENTS_PURE_PYTHON=1` uses this
module's twin. `fold_keys`, what both backends run between their read and their write, is that
loop and the rare row folded again piece by piece.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ray_otel_events import native
from ray_otel_events.store.kept_ids import event_hash, packed
from ray_otel_events.store.state_merge import (
    FOLD_ERRORS,
    ID_COLUMN,
    TASKS,
    Key,
    Piece,
    Prepared,
    Row,
    apply,
    row_columns,
)

Fold = tuple[int, str, Piece]  # position in the batch, event id, piece
Columns = tuple[str, tuple[Any, ...]]  # a row's JSON and indexed values (`row_columns`)
Pieces = dict[Key, list[Fold]]  # a batch's folds by row
Rows = dict[Key, "StoredRow"]
Upserts = list[tuple[Any, ...]]


class Refusal(NamedTuple):
    """A piece its fold refused (a value only the fold reads): its place in the batch, its event
    id, and why."""

    position: int
    event_id: str
    reason: str


@dataclass(slots=True)
class StoredRow:
    row: Row
    ids: list[int]  # the hashes of the ids of the events folded into it (kept_ids.event_hash)


def fold_row(
    resource: str, entry: StoredRow, folds: list[Fold], refused: list[Refusal] | None = None
) -> tuple[Columns | None, int, list[str]]:
    """Fold one row's pieces, skipping event ids it has seen: its `row_columns` if it changed, the
    duplicates skipped and the types of the events folded. With `refused`, each piece is folded on
    a copy and one that fails is named there instead of failing the row."""
    duplicates = 0
    folded: list[str] = []
    for position, event_id, piece in folds:
        hashed = event_hash(event_id)
        if hashed in entry.ids:
            duplicates += 1
            continue
        if refused is not None:
            trial = copy.deepcopy(entry.row)
            try:
                apply(trial, piece)
                row_columns(piece.resource, trial)
            except FOLD_ERRORS as exc:
                refused.append(Refusal(position, event_id, f"{piece.event_type}: {exc}"))
                continue
            entry.row = trial
        else:
            apply(entry.row, piece)
        entry.ids.append(hashed)
        folded.append(piece.event_type)
    return (row_columns(resource, entry.row) if folded else None), duplicates, folded


def upsert_values(key: Key, received: float, entry: StoredRow, columns: Columns) -> tuple[Any, ...]:
    """A folded row as the store's upsert takes it: its kept ids as the bytes of their hashes."""
    data, indexed = columns
    return (*key, received, data, packed(entry.ids), *indexed)


def count_folded(by_type: dict[str, int], folded: list[str]) -> None:
    for event_type in folded:
        by_type[event_type] = by_type.get(event_type, 0) + 1


def _group_pieces_python(events: list[Prepared]) -> tuple[Pieces, int]:
    """A batch's pieces by row, each with its position in the batch and its event id (rows in the
    order they first appear), and how many events have no row (types with no state)."""
    pieces: Pieces = {}
    ignored = 0
    for position, (event_id, key, piece) in enumerate(events):
        if key is None or piece is None:
            ignored += 1
        else:
            pieces.setdefault(key, []).append((position, event_id, piece))
    return pieces, ignored


def _fold_rows_python(
    keys: list[Key],
    start: int,
    pieces: Pieces,
    rows: Rows,
    received: float,
    by_type: dict[str, int],
    changed: list[tuple[Any, ...]],
) -> tuple[int, int]:
    """Fold the rows of `keys[start:]` in order, appending each changed row's upsert values to
    `changed` and counting its folded events in `by_type`, until a row's fold raises one of
    FOLD_ERRORS. Returns the index of that row (len(keys) if none failed) and the duplicates
    skipped in the rows done; the failed row is left half folded, for the caller to read again."""
    duplicates = 0
    for index in range(start, len(keys)):
        key = keys[index]
        entry = rows[key]
        try:
            columns, skipped, folded = fold_row(key[0], entry, pieces[key])
        except FOLD_ERRORS:
            return index, duplicates
        duplicates += skipped
        count_folded(by_type, folded)
        if columns is not None:
            changed.append(upsert_values(key, received, entry, columns))
    return len(keys), duplicates


FoldRows = Callable[[list[Key], int, Pieces, Rows, float, dict[str, int], Upserts], tuple[int, int]]
fold_rows: FoldRows = _fold_rows_python
group_pieces: Callable[[list[Prepared]], tuple[Pieces, int]] = _group_pieces_python
try:  # the same loop compiled (setup.py builds native/_state_fold.c where a C compiler is present)
    from ray_otel_events.native import _state_fold
except ImportError:
    _state_fold = None  # type: ignore[assignment]
if _state_fold is not None and native.ENABLED:
    _state_fold.bind_rows(ID_COLUMN, TASKS, FOLD_ERRORS)
    fold_rows = _state_fold.fold_rows
    group_pieces = _state_fold.group_pieces


def fold_keys(
    keys: list[Key],
    pieces: Pieces,
    rows: Rows,
    received: float,
    by_type: dict[str, int],
    refused: list[Refusal],
    reread: Callable[[Key], StoredRow],
) -> tuple[Upserts, int]:
    """The upsert values of the rows of `keys` that changed, folded onto `rows` (`fold_rows`), and
    the duplicates skipped. Rarely, a value only the fold reads (a bad base64 id, timestamp or
    number) or one of the wrong shape fails a row: that row is folded again from what is stored
    (`reread`), each piece on a copy, the ones that fail left out and named in `refused`: never
    the batch."""
    changed: Upserts = []
    duplicates = 0
    done = 0
    while done < len(keys):
        done, skipped = fold_rows(keys, done, pieces, rows, received, by_type, changed)
        duplicates += skipped
        if done == len(keys):
            break
        key = keys[done]
        rows[key] = reread(key)
        columns, skipped, folded = fold_row(key[0], rows[key], pieces[key], refused)
        duplicates += skipped
        count_folded(by_type, folded)
        if columns is not None:
            changed.append(upsert_values(key, received, rows[key], columns))
        done += 1
    return changed, duplicates
