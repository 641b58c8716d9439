"""The raw events' stored format (store/raw_events.py): a format byte, then raw deflate primed with a
fixed dictionary. Blobs written before it (plain raw deflate, no dictionary: schema 5's fixture
holds nine, written by that code's compiled writer) are read as they were, on both backends, by
every reader of raw events: `store rebuild`, `get`'s new fields (raw_texts)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from ray_otel_events.store import raw_events
from ray_otel_events.store.kept_ids import event_hash
from ray_otel_events.store.location import open_store
from ray_otel_events.store.posted_body import read_posted
from ray_otel_events.store.sqlite_store import EventStore
from tests.helpers.pure_python import needs_compiled
from tests.helpers.stored_rows import old_raw_blob

try:
    from ray_otel_events.native import _row_writer
except ImportError:
    _row_writer = None  # type: ignore[assignment]

FIXTURES = Path(__file__).parent / "fixtures"
RUN_E = sorted((FIXTURES / "ray-2.60" / "raw" / "runE").glob("*.body"))
SCHEMA_5 = FIXTURES / "store" / "schema5.sqlite3.gz"
# store/raw_events.dict as shipped: every blob written since is read with it, so it never changes
# (another dictionary takes another format byte).
DICTIONARY_SHA256 = "aeacbf189d30087b6a9e8e800073b9b9ee461fade957d25b50505341c636016b"
RESOURCES = ("tasks", "actors", "jobs", "nodes", "workers")


def _schema_5_blobs(tmp_path: Path) -> list[bytes]:
    path = tmp_path / "schema5.sqlite3"
    path.write_bytes(gzip.decompress(SCHEMA_5.read_bytes()))
    db = sqlite3.connect(path)
    try:
        return [bytes(row[0]) for row in db.execute("SELECT data FROM raw_events ORDER BY rowid")]
    finally:
        db.close()


def test_the_dictionary_is_the_one_stored_blobs_are_written_with() -> None:
    assert len(raw_events.RAW_DICTIONARY) <= 32 * 1024  # deflate reaches no further back
    assert hashlib.sha256(raw_events.RAW_DICTIONARY).hexdigest() == DICTIONARY_SHA256
    assert b'"eventType": "TASK_LIFECYCLE_EVENT"' in raw_events.RAW_DICTIONARY[-4096:]  # the commonest last
    assert b"TASK_EXECUTION_EVENT" in raw_events.RAW_DICTIONARY  # Ray 2.49's, stored too


def test_blobs_of_the_earlier_format_are_told_apart_and_read_as_before(tmp_path: Path) -> None:
    """Schema 5's blobs: no raw deflate stream starts with the format byte (its first block's type
    would be 11, which deflate reserves), so each is read as plain raw deflate; `old_raw_blob` writes
    them byte for byte (the tests below store such blobs on both backends). The same text now
    stored is smaller, and a new blob's stream cannot be read without its dictionary."""
    blobs = _schema_5_blobs(tmp_path)
    assert len(blobs) == 9
    for blob in blobs:
        assert blob[0] & 0b110 != 0b110 and blob[0] != raw_events.FORMAT_V1
        text = raw_events.decompress(blob)
        assert orjson.loads(text) and text.startswith(b"[{")
        assert old_raw_blob(text) == blob
        new = raw_events.compress([text])
        assert new[0] == raw_events.FORMAT_V1 and raw_events.decompress(new) == text
        assert new == raw_events.compress_python([text])
        assert len(new) < len(blob)
    whole = b"[" + b",".join(raw_events.decompress(blob)[1:-1] for blob in blobs) + b"]"
    new = raw_events.compress([whole])
    for damaged in (new[:-3], new[: len(new) // 2], new[:1]):
        with pytest.raises(zlib.error):
            raw_events.decompress(damaged)
    with pytest.raises(zlib.error):  # it reaches back into the dictionary
        zlib.decompress(new[1:], -15)


def _bodies() -> list[bytes]:
    """Run E's POST bodies, one of its first task definitions with a field a later Ray adds."""
    bodies = [path.read_bytes() for path in RUN_E]
    for number, body in enumerate(bodies[:6]):
        events = json.loads(body)
        for event in events:
            if event["eventType"] == "TASK_DEFINITION_EVENT":
                event["taskDefinitionEvent"]["newFieldInRay299"] = {"accelerator": "tpu-v9"}
                bodies[number] = json.dumps(events).encode()
                return bodies
    raise AssertionError("no task definition in run E's first bodies")


def _later_task(bodies: list[bytes]) -> tuple[str, str]:
    """(the hex id of the task whose definition has the later field, its session)."""
    for body in bodies:
        for event in json.loads(body):
            definition = event.get("taskDefinitionEvent", {})
            if "newFieldInRay299" in definition:
                return base64.b64decode(definition["taskId"]).hex(), event["sessionName"]
    raise AssertionError("no later field")


def _fold(store: Any, bodies: list[bytes], first: int) -> None:
    for number, body in enumerate(bodies, start=first):
        store.ingest_posted([read_posted(body)[0]], now=1000.0 + number, bodies=[body])


def _rows(store: Any) -> list[Any]:
    return [store.select(resource, limit=1000, order="start").rows for resource in RESOURCES]


def _rewritten(store: Any, write: Callable[[bytes], bytes], after: int = 0) -> int:
    """The store's raw events blobs after its first `after` rewritten (`write` of their texts); how many."""
    d = store.dialect
    blobs = store._query(f"SELECT {d.serial}, data FROM raw_events ORDER BY {d.serial}")[after:]
    with store._transaction() as db:
        for serial, blob in blobs:
            old = write(raw_events.decompress(bytes(blob)))
            db.execute(f"UPDATE raw_events SET data = {d.mark} WHERE {d.serial} = {d.mark}", (old, serial))
    return len(blobs)


def _formats(store: Any) -> dict[int, int]:
    """How many of the store's raw events blobs start with each first byte."""
    firsts = [bytes(blob)[0] for (blob,) in store._query("SELECT data FROM raw_events")]
    return {first: firsts.count(first) for first in set(firsts)}


def test_the_zstandard_format_reads_back_and_refuses_damage() -> None:
    """FORMAT_V2 (the PostgreSQL store's): the array `compress` deflates, fewer bytes, its frame
    primed with the dictionary; a damaged or cut blob, or one claiming a huge text, is a zlib.error
    (as deflate's damage is), never a wrong text or a huge allocation."""
    bodies = [*_bodies(), b"[]", b"not an array", b"[ \n ]"]
    new = raw_events.compress_zstd(bodies)
    old = raw_events.compress_python(bodies)
    assert new[0] == raw_events.FORMAT_V2 and old[0] == raw_events.FORMAT_V1
    text = raw_events.decompress(new)
    assert text == raw_events.decompress(old) and len(orjson.loads(text)) > 100
    assert len(new) < 0.9 * len(old)
    for damaged in (new[:-3], new[: len(new) // 2], new[:1], new[:-9] + bytes([new[-9] ^ 1]) + new[-8:]):
        with pytest.raises(zlib.error):
            raw_events.decompress(damaged)
    import zstandard

    with pytest.raises(zstandard.ZstdError):  # it reaches back into the dictionary
        zstandard.ZstdDecompressor().decompress(new[1:])
    # a frame header claiming 2 GiB: refused before any allocation
    packer = zstandard.ZstdCompressor(level=1).compressobj(size=2 << 30)
    huge = packer.compress(b"[" * 100) + packer.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    assert zstandard.frame_content_size(huge) == 2 << 30
    with pytest.raises(zlib.error, match="claims"):
        raw_events.decompress(bytes([raw_events.FORMAT_V2]) + huge)


def test_a_store_holding_blobs_of_both_formats_rebuilds_and_shows_later_fields(
    store_location: str | Path, new_store_location: Callable[[str], str | Path]
) -> None:
    """A store whose first POSTs were kept by the earlier code, the next in the other backend's
    format (FORMAT_V2 on SQLite, V1 on PostgreSQL) and the rest in its own: `get`'s new fields come
    from an earlier blob, its events are found by id in every kind, and a rebuild (every blob
    read) folds the rows a store written since holds."""
    bodies = _bodies()
    store, reference = open_store(store_location), open_store(new_store_location("reference"))
    own, other = (
        (raw_events.FORMAT_V2, lambda text: raw_events.compress_python([text]))
        if isinstance(store_location, str)
        else (raw_events.FORMAT_V1, lambda text: raw_events.compress_zstd([text]))
    )
    try:
        _fold(reference, bodies, 0)
        _fold(store, bodies[:6], 0)
        assert _rewritten(store, old_raw_blob) == 6
        _fold(store, bodies[6:9], 6)
        assert _rewritten(store, other, after=6) == 3
        _fold(store, bodies[9:], 9)
        formats = _formats(store)
        assert formats.pop(own) == len(bodies) - 9 and formats.pop(other(b"[]")[0]) == 3
        assert sum(formats.values()) == 6 and all(first & 0b110 != 0b110 for first in formats)
        assert _rows(store) == _rows(reference)
        task, session = _later_task(bodies)
        for target in (store, reference):
            shown = target.new_fields("tasks", task, 0, session)
            assert shown["new_field_in_ray299"] == {"accelerator": "tpu-v9"}
        ids = [event["eventId"] for body in (bodies[0], bodies[-1]) for event in json.loads(body)]
        found = store.raw_texts(session, [event_hash(i) for i in ids], 1e9)
        assert sorted(event["eventId"] for event in found) == sorted(ids)
        result = store.rebuild()
        assert result.stored > 0 and not result.invalid
        assert _rows(store) == _rows(reference)
        assert (
            store.new_fields("tasks", task, 0, session)
            == reference.new_fields("tasks", task, 0, session)
            != {}
        )
    finally:
        store.close()
        reference.close()


@needs_compiled(_row_writer is not None, "the row writer (SQLite's and zlib's headers)")
def test_the_compiled_writer_keeps_the_blobs_the_python_writer_keeps(tmp_path: Path) -> None:
    """`serve`'s SQLite store compresses on the row writer's thread (raw_deflate.h): the blobs it
    keeps, format byte and dictionary, are those the Python writer keeps."""
    compiled, python = EventStore(tmp_path / "compiled.sqlite3"), EventStore(tmp_path / "python.sqlite3")
    try:
        assert compiled._writer is not None and python._writer is not None, compiled.writer_reason
        python._writer.close()
        python._writer = python._post_folder = None  # the compiled fold writes through it
        bodies = _bodies()
        for store in (compiled, python):
            _fold(store, bodies, 0)
            store.ingest_posted([read_posted(bodies[2])[0]], now=2000.0, bodies=[bodies[2], bodies[3], b"[]"])
        kept = [
            store._query("SELECT session, received, data FROM raw_events ORDER BY rowid")
            for store in (compiled, python)
        ]
        assert kept[0] == kept[1] and len(kept[0]) > len(bodies)
        assert {bytes(data)[0] for _, _, data in kept[0]} == {raw_events.FORMAT_V1}
        stored = [
            e["eventId"] for _, _, data in kept[0] for e in orjson.loads(raw_events.decompress(bytes(data)))
        ]
        posted = [e["eventId"] for body in [*bodies, bodies[2], bodies[3]] for e in orjson.loads(body)]
        assert sorted(stored) == sorted(posted)
    finally:
        compiled.close()
        python.close()
