"""A stored task row as the compiled fold reads it back (native/_post_fold.c `read_chunk`,
row_packing.h's `row_unpack`: a PACKED_V2 blob's dictionary ends with the row's node and worker
columns) against the store's Python fold (store/row_packing.row_json): the row's packed JSON and
its node and worker columns are the input, as a damaged or hand-edited store file may hold them;
then a later event of that task is folded into it. Both refuse it, or both store the same rows."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import engine
import orjson

from ray_otel_events.store.posted_body import read_posted
from ray_otel_events.store.sqlite_store import ROW_IDS, EventStore
from tests.helpers.stored_rows import SELECT_ROWS, unpacked
from tests.test_store_posted_fold import _lifecycle, _outcome

_SPLIT = b"\x00|\x00"  # the input's node, worker and packed JSON, in that order, where it has two
_TEXT = b"t:"  # a column part starting so is stored as its text (latin-1), else as its bytes
_NODE, _WORKER = bytes(range(28)), bytes(range(100, 128))
_FIRST = orjson.dumps([_lifecycle("PENDING_NODE_ASSIGNMENT", 20), _lifecycle("RUNNING", 26, _NODE, _WORKER)])
_LATER = orjson.dumps([_lifecycle("FINISHED", 30, _NODE, _WORKER)])
# The stores live on a RAM disk where there is one.
_TEMP = "/dev/shm" if Path("/dev/shm").is_dir() else None


def _base() -> bytes:
    """The store file after the task's first events (its row with node and worker), as bytes."""
    with tempfile.TemporaryDirectory(prefix="fuzz-stored-row-", dir=_TEMP) as directory:
        store = EventStore(Path(directory) / "base.sqlite3")
        store.ingest_posted([read_posted(_FIRST)[0]], now=1000.0)
        store.close()
        db = sqlite3.connect(Path(directory) / "base.sqlite3")
        try:
            db.execute("PRAGMA journal_mode=DELETE")  # a WAL file's image opens nowhere but beside its WAL
            return db.serialize()
        finally:
            db.close()


_BASE = _base()


def _column(part: bytes) -> bytes | str | None:
    if not part:
        return None
    return part[len(_TEXT) :].decode("latin-1") if part.startswith(_TEXT) else part


def _fold(data: bytes, node: object, worker: object, compiled: bool) -> object:
    with tempfile.TemporaryDirectory(prefix="fuzz-stored-row-", dir=_TEMP) as directory:
        return _fold_in(Path(directory) / "store.sqlite3", data, node, worker, compiled)


def _fold_in(path: Path, data: bytes, node: object, worker: object, compiled: bool) -> object:
    path.write_bytes(_BASE)
    db = sqlite3.connect(path)
    with db:
        db.execute(
            "UPDATE state_rows SET data = ?, node = ?, worker = ? WHERE resource = 1", (data, node, worker)
        )
    db.close()
    store = EventStore(path)
    try:
        assert store._post_folder is not None, "the compiled fold is not built"
        if not compiled:
            store._post_folder.close()
            store._post_folder = None  # the Python fold
        outcome = _outcome(store.ingest_posted, [read_posted(_LATER)[0]], now=1001.0)
        if isinstance(outcome[0], type):
            return "refused"  # the compiled fold says "damaged" where zlib in Python says why
        return outcome, unpacked(store._query(SELECT_ROWS))
    finally:
        store.close()


def check(data: bytes) -> None:
    parts = data.split(_SPLIT, 2)
    node, worker, blob = (*map(_column, parts[:2]), parts[2]) if len(parts) == 3 else (_NODE, _WORKER, data)
    assert _fold(blob, node, worker, compiled=True) == _fold(blob, node, worker, compiled=False), parts[:2]


def _seeds() -> list[bytes]:
    db = sqlite3.connect(":memory:")
    db.deserialize(_BASE)
    ((data, _, node, worker),) = db.execute(f"SELECT data, {ROW_IDS} FROM state_rows WHERE resource = 1")
    db.close()
    return [
        data,
        _SPLIT.join((node, worker, data)),
        _SPLIT.join((_TEXT + node.hex().upper().encode(), worker, data)),
        _SPLIT.join((b"", worker, data)),  # its node gone: another dictionary
        _SPLIT.join((node, b"", b"\x01" + data[1:])),  # read as PACKED_V1
        data[:-2],
        b"\x02" + b"\xff" * 8,
    ]


if __name__ == "__main__":
    engine.main(check, _seeds)
