"""A row's kept event ids as 64-bit hashes (store/kept_ids.py), on both backends.

Rows written before kept the ids themselves (SQLite: their text joined by spaces; PostgreSQL: each
id's bytes after its count, or its text): such rows are read and folded on with no migration. An
event one of them kept is still a duplicate, through each fold (the compiled intake fold of POST
bodies, the compiled row loop, Python's: `make test-pure` runs this module with the compiled
helpers off), beside new events too; a row folded again keeps hashes; and the detail's new fields
(a later Ray's, read back from the raw events by the row's ids) are found from either form.
"""

from __future__ import annotations

import base64
import copy
import gzip
import sqlite3
import struct
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from helpers.postgres import PostgresServer

from ray_otel_events.store import raw_events
from ray_otel_events.store.backend import IngestResult
from ray_otel_events.store.kept_ids import (
    HASHED,
    event_hash,
    packed,
    sqlite_hashes,
    unpacked,
    utf8_hash,
)
from ray_otel_events.store.posted_body import read_posted
from ray_otel_events.store.postgres_store import PostgresStore, _kept_hashes, _packed_ids
from ray_otel_events.store.sqlite_store import EventStore
from tests.test_store_posted_fold import RUN_E, SCHEMA_4, SCHEMA_4_POSTS, _fold_run_e
from tests.test_store_postgres import _written_before_packing

SESSION = "session_2026-12-02_05-00-00_000000_1"
TASK = bytes(range(1, 25))
TASK_HEX = TASK.hex()


def _definition(event_id: str) -> dict[str, Any]:
    """A task's definition with a later Ray's field in its payload and one beside it."""
    return {
        "eventId": event_id,
        "sourceType": "CORE_WORKER",
        "eventType": "TASK_DEFINITION_EVENT",
        "timestamp": "2026-12-02T05:00:00.000000001Z",
        "severity": "INFO",
        "sessionName": SESSION,
        "sourceHostname": "worker-3",
        "taskDefinitionEvent": {
            "taskId": base64.b64encode(TASK).decode(),
            "taskAttempt": 0,
            "taskName": "train",
            "jobId": "AQAAAA==",
            "laterRayField": {"shards": [1, 2]},
        },
    }


def _lifecycle(event_id: str, state: str, second: int, later: dict[str, Any]) -> dict[str, Any]:
    return {
        "eventId": event_id,
        "sourceType": "CORE_WORKER",
        "eventType": "TASK_LIFECYCLE_EVENT",
        "timestamp": f"2026-12-02T05:00:0{second}.000000001Z",
        "severity": "INFO",
        "sessionName": SESSION,
        "taskLifecycleEvent": {
            "taskId": base64.b64encode(TASK).decode(),
            "taskAttempt": 0,
            "jobId": "AQAAAA==",
            "stateTransitions": [{"state": state, "timestamp": f"2026-12-02T05:00:0{second}.000000001Z"}],
            **later,
        },
    }


# Ray's ids are base64; one here is not (kept as its text in PostgreSQL's older form).
FIRST = [
    _definition("ZGVmaW5pdGlvbi1vZi10aGUtdGFzaw=="),
    _lifecycle("a-client's-own-id", "PENDING_NODE_ASSIGNMENT", 1, {"laterPending": 1}),
]
LATER = [_lifecycle("cnVubmluZy1vZi10aGUtdGFzaw==", "RUNNING", 2, {"laterRunning": "yes"})]
FIRST_FIELDS = {"source_hostname": "worker-3", "later_ray_field": {"shards": [1, 2]}, "later_pending": 1}
ALL_FIELDS = {**FIRST_FIELDS, "later_running": "yes"}


def _ingest(store: Any, events: list[dict[str, Any]], now: float, posted: bool) -> IngestResult:
    """`events` folded as one POST body (the compiled intake fold where built) or as dicts."""
    if not posted:
        return store.ingest(copy.deepcopy(events), now=now)  # type: ignore[no-any-return]
    body = orjson.dumps(events)
    return store.ingest_posted([read_posted(body)[0]], now=now, bodies=[body])  # type: ignore[no-any-return]


def _sqlite_ids(path: Path) -> list[tuple[str, Any]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT typeof(event_ids), event_ids FROM state_rows").fetchall()


def test_hashes_are_kept_as_eight_little_endian_bytes_each() -> None:
    hashes = [0, 1, 2**64 - 1, event_hash("YWJj")]
    assert packed(hashes) == b"".join(h.to_bytes(8, "little") for h in hashes)
    assert unpacked(packed(hashes)) == hashes == sqlite_hashes(packed(hashes))
    assert unpacked(packed(hashes) + b"\x01\x02") == hashes  # a part of one is not read (as in C)
    # ids kept as text (rows written before): split as they were joined
    assert sqlite_hashes(" YWJj  ZGVm ") == [event_hash("YWJj"), event_hash("ZGVm")]
    assert event_hash("é") == utf8_hash("é".encode()) != event_hash("e")
    assert len({event_hash(f"{n:040}") for n in range(20000)}) == 20000


def test_a_blocks_events_are_found_by_the_hashes_of_their_ids() -> None:
    """`raw_events.events_with_ids`: an id written with an escape or spaces around its colon is
    found; a block with none of the ids is not read; a non-string id is no id."""
    events = [
        {"eventId": "a/b", "n": 1},
        {"eventId": 7, "n": 2},
        {"eventId": "plain", "n": 3},
        {"eventId": "plain", "n": 4},  # posted twice: both found, in order
    ]
    text = (
        orjson.dumps(events)
        .replace(b'"a/b"', b'"a\\/b"')
        .replace(b'"eventId":"plain"', b'"eventId" : "plain"')
    )
    assert b"a\\/b" in text and b'"eventId" : "plain"' in text
    found = raw_events.events_with_ids(text, {event_hash("a/b"), event_hash("plain")})
    assert [(position, event["n"]) for position, _, event in found] == [(0, 1), (2, 3), (3, 4)]
    assert [hashed for _, hashed, _ in found] == [event_hash("a/b"), event_hash("plain"), event_hash("plain")]
    assert raw_events.events_with_ids(text, {event_hash("7"), event_hash("other")}) == []
    assert raw_events.events_with_ids(b"not json at all", {event_hash("x")}) == []  # not read


@pytest.mark.parametrize("posted", [True, False], ids=["posted", "dicts"])
def test_a_sqlite_row_keeping_its_ids_as_text_folds_on(tmp_path: Path, posted: bool) -> None:
    """A row whose ids are text (as main's code kept them) finds its new fields, takes its kept
    events as duplicates beside a new one, keeps hashes once written again, and answers as a row
    written since."""
    path = tmp_path / "old.sqlite3"
    store = EventStore(path)
    assert _ingest(store, FIRST, 1000.0, posted).stored == 2
    store.close()
    with sqlite3.connect(path) as db:  # as main's code kept them
        db.execute("UPDATE state_rows SET event_ids = ?", (" ".join(e["eventId"] for e in FIRST),))
    assert [kind for kind, _ in _sqlite_ids(path)] == ["text"]
    reference = EventStore(tmp_path / "new.sqlite3")
    _ingest(reference, FIRST, 1000.0, posted)
    store = EventStore(path)
    try:
        assert store.new_fields("tasks", TASK_HEX, 0, SESSION) == FIRST_FIELDS
        for target in (store, reference):
            again = _ingest(target, FIRST + LATER, 1001.0, posted)
            assert (again.duplicates, again.stored) == (2, 1)
        assert _sqlite_ids(path) == [("blob", packed([event_hash(e["eventId"]) for e in FIRST + LATER]))]
        assert _sqlite_ids(path) == _sqlite_ids(tmp_path / "new.sqlite3")
        assert store.new_fields("tasks", TASK_HEX, 0, SESSION) == ALL_FIELDS
        assert store.select("tasks").rows == reference.select("tasks").rows != []
        third = _ingest(store, LATER + FIRST, 1002.0, not posted)  # the other fold, on hashes
        assert (third.duplicates, third.stored) == (3, 0)
    finally:
        store.close()
        reference.close()


def test_the_schema_4_stores_text_ids_are_duplicates_through_each_fold(tmp_path: Path) -> None:
    """The schema 4 store (written by that code: every row's ids as text): its POSTs sent again are
    duplicates, event for event as in a store written now, by the compiled intake fold and then (on
    rows some of which now keep hashes) the row loop; later POSTs fold as into the new store."""
    old = tmp_path / "schema4.sqlite3"
    old.write_bytes(gzip.decompress(SCHEMA_4.read_bytes()))
    kinds = [kind for kind, _ in _sqlite_ids(old)]
    assert set(kinds) == {"text"} and len(kinds) > 30
    reference = EventStore(tmp_path / "new.sqlite3")
    store = EventStore(old)
    try:
        _fold_run_e(reference, RUN_E[:SCHEMA_4_POSTS], 0)
        for posted in (True, False):
            for path in RUN_E[:SCHEMA_4_POSTS]:
                events = orjson.loads(path.read_bytes())
                results = [_ingest(target, events, 1100.0, posted) for target in (store, reference)]
                assert results[0].duplicates == results[1].duplicates
                assert results[0].stored == results[1].stored == 0
        assert sum(kind == "text" for kind, _ in _sqlite_ids(old)) == len(kinds)  # nothing rewritten
        _fold_run_e(store, RUN_E[SCHEMA_4_POSTS:], SCHEMA_4_POSTS)
        _fold_run_e(reference, RUN_E[SCHEMA_4_POSTS:], SCHEMA_4_POSTS)
        kept = _sqlite_ids(old)
        assert {kind for kind, _ in kept} == {"text", "blob"}  # rows the later POSTs reached: hashes
        assert sorted(h for _, ids in kept for h in sqlite_hashes(ids)) == sorted(
            h for _, ids in _sqlite_ids(tmp_path / "new.sqlite3") for h in sqlite_hashes(ids)
        )
        for path in RUN_E:  # everything again: all duplicates, either form
            events = orjson.loads(path.read_bytes())
            results = [_ingest(target, events, 1200.0, True) for target in (store, reference)]
            assert results[0].duplicates == results[1].duplicates and results[0].stored == 0
    finally:
        store.close()
        reference.close()


@pytest.mark.parametrize("posted", [True, False], ids=["posted", "dicts"])
def test_a_postgres_row_keeping_its_ids_in_the_older_form_folds_on(
    postgres_server: PostgresServer, posted: bool
) -> None:
    """A row keeping each id as its bytes after their count (or its text), as main's code and
    migration 7 keep them, finds its new fields, takes its kept events as duplicates beside a new
    one, keeps `HASHED` and the hashes once written again, and answers as a row written since."""
    suffix = "posted" if posted else "dicts"
    url = postgres_server.new_database(f"older_ids_{suffix}")
    _written_before_packing(url, FIRST, 1000.0, 6)
    store = PostgresStore(url)  # migration 7: the older bytea form
    reference_url = postgres_server.new_database(f"hashed_ids_{suffix}")
    reference = PostgresStore(reference_url)
    _ingest(reference, FIRST, 1000.0, posted)

    def kept(target_url: str) -> list[bytes]:
        with psycopg.connect(target_url) as db:
            return [bytes(ids) for (ids,) in db.execute("SELECT event_ids FROM state_rows")]

    try:
        ids = [e["eventId"] for e in FIRST]
        assert kept(url) == [_packed_ids(" ".join(ids))]  # main's form: a base64 id's bytes, a text id
        assert kept(url)[0][0] == len(base64.b64decode(ids[0])) and kept(url)[0][23] == 0x80
        assert _kept_hashes(kept(url)[0]) == [event_hash(event_id) for event_id in ids]
        assert store.new_fields("tasks", TASK_HEX, 0, SESSION) == FIRST_FIELDS
        for target in (store, reference):
            again = _ingest(target, FIRST + LATER, 1001.0, posted)
            assert (again.duplicates, again.stored) == (2, 1)
        hashes = [event_hash(e["eventId"]) for e in FIRST + LATER]
        assert kept(url) == [HASHED + struct.pack("<3Q", *hashes)] == kept(reference_url)
        assert store.new_fields("tasks", TASK_HEX, 0, SESSION) == ALL_FIELDS
        assert store.select("tasks").rows == reference.select("tasks").rows != []
        third = _ingest(store, LATER + FIRST, 1002.0, not posted)
        assert (third.duplicates, third.stored) == (3, 0)
    finally:
        store.close()
        reference.close()
