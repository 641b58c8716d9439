"""`serve` answers a POST once its body is in the intake spool and folds it a moment later: what was
answered survives `kill -9`, a record cut short is never taken for one, and reads see every
event answered before them."""

from __future__ import annotations

import asyncio
import json
import resource
import signal
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from helpers.agg_procs import FIXTURE, CliServer, start
from helpers.postgres import serve_store_args

from ray_otel_events.services.state_intake import spooled_events
from ray_otel_events.store.backend import IngestResult
from ray_otel_events.store.background_fold import BackgroundFold
from ray_otel_events.store.intake_spool import IntakeSpool
from ray_otel_events.store.location import open_store
from ray_otel_events.store.sqlite_store import EventStore
from ray_otel_events.store.state_merge import prepare

EVENTS: list[dict[str, Any]] = [item.get("event", item) for item in json.loads(Path(FIXTURE).read_text())]


def _copies(first: int, count: int) -> list[list[dict[str, Any]]]:
    """`count` POST bodies, each the whole fixture under a session of its own (distinct rows)."""
    return [
        [dict(e, sessionName=f"session_copy_{i}", eventId=f"{i}-{e['eventId']}") for e in EVENTS]
        for i in range(first, first + count)
    ]


def _rows_of(location: str | Path) -> int:
    store = open_store(location, read_only=True)
    try:
        return int(store.size()["state_rows"])
    finally:
        store.close()


def test_spool_gives_back_what_is_not_folded_and_stops_at_a_cut_record(tmp_path: Path) -> None:
    spool = IntakeSpool(tmp_path / "intake", segment_bytes=64)  # a new segment every record or two
    positions = [spool.append(f"body {i}".encode() * 10) for i in range(6)]
    assert len({p.segment for p in positions}) > 1
    spool.mark_folded(positions[1])
    spool.close()
    reopened = IntakeSpool(tmp_path / "intake", segment_bytes=64)
    pending = list(reopened.pending())
    assert [body for body, _ in pending] == [f"body {i}".encode() * 10 for i in range(2, 6)]
    assert [position for _, position in pending] == positions[2:]
    reopened.mark_folded(positions[3])
    assert min(int(p.stem) for p in (tmp_path / "intake").glob("*.spool")) == positions[3].segment
    reopened.close()
    # A record cut short by a killed process: its segment ends there, later segments still count.
    last = max((tmp_path / "intake").glob("*.spool"), key=lambda p: int(p.stem))
    with last.open("ab") as segment:
        segment.write(b"\xff\x00\x00\x00\x01\x02")
    again = IntakeSpool(tmp_path / "intake", segment_bytes=64)
    tail = again.append(b"after the cut")
    again.close()
    final = IntakeSpool(tmp_path / "intake", segment_bytes=64)
    bodies = [body for body, _ in final.pending()]
    assert bodies == [f"body {i}".encode() * 10 for i in range(4, 6)] + [b"after the cut"]
    assert tail.segment > int(last.stem)
    final.close()


def test_background_fold_holds_posts_within_its_byte_bound(
    tmp_path: Path, store_location: str | Path
) -> None:
    """A POST waits for room once the bodies answered and not yet folded reach the byte bound
    (serve's memory while its store is behind), and goes in once the fold has taken them."""
    store = open_store(store_location)
    spool = IntakeSpool(tmp_path / "s.sqlite3.intake")
    first, second = (orjson.dumps(body) for body in _copies(0, 2))
    fold = BackgroundFold(store, spool, lambda _: None, spooled_events, max_pending_bytes=len(first))
    events = [prepare(e) for e in EVENTS]

    async def post_two() -> tuple[bool, int]:
        await fold.room()  # nothing pending: room at once
        fold.put(events, first)
        waiting = asyncio.ensure_future(fold.room())
        for _ in range(20):  # the loop turns; the fold has not started, so nothing can make room
            await asyncio.sleep(0)
        held = not waiting.done()
        pending = fold.pending_bytes
        fold.start()
        await asyncio.wait_for(waiting, 60)
        fold.put(events, second)
        await fold.settled()
        return held, pending

    held, pending = asyncio.run(post_two())
    assert held and pending == len(first)
    assert fold.pending_bytes == 0 and fold.pending_events == 0
    assert _rows_of(store_location) > 0
    fold.close()
    spool.close()
    store.close()


def test_background_fold_merges_posts_and_settles_reads(tmp_path: Path, store_location: str | Path) -> None:
    store = open_store(store_location)
    spool = IntakeSpool(tmp_path / "s.sqlite3.intake")
    results: list[IngestResult] = []
    fold = BackgroundFold(store, spool, results.append, spooled_events, batch_events=10 * len(EVENTS))
    bodies = _copies(0, 30)
    # The first fold is held until every other POST is accepted, so they wait together (as POSTs
    # arriving during a fold do) and go in transactions of up to 10: 1 + 10 + 10 + 9.
    folding, go_on = threading.Event(), threading.Event()
    ingest_posted = store.ingest_posted

    def held_ingest(*args: Any, **kwargs: Any) -> IngestResult:
        folding.set()
        assert go_on.wait(60), "the test never let the first fold go on"
        return ingest_posted(*args, **kwargs)

    store.ingest_posted = held_ingest  # type: ignore[method-assign]

    async def post_all_then_read() -> int:
        for number, body in enumerate(bodies):
            await fold.room()
            fold.put([prepare(e) for e in body], orjson.dumps(body))
            if number == 0:
                assert folding.wait(60), "the first POST was never folded"
        go_on.set()
        await fold.settled()
        return int(store.size()["state_rows"])

    assert fold.start() == 0
    rows = asyncio.run(post_all_then_read())
    fold.close()
    spool.close()
    store.close()
    reference = EventStore(tmp_path / "reference.sqlite3")
    for body in bodies:
        reference.ingest(body)
    assert rows == reference.size()["state_rows"] > 0  # settled: everything answered is readable
    reference.close()
    assert sum(r.stored for r in results) == 30 * len(EVENTS)
    assert fold.batches == 4  # the POSTs that waited, 10 to a transaction
    assert not list((tmp_path / "s.sqlite3.intake").glob("*.spool"))  # all folded: nothing kept


def test_background_fold_lingers_for_more_posts_until_a_read_waits(
    tmp_path: Path, store_location: str | Path
) -> None:
    """The first POST waits up to the linger for more, so an attempt's pieces sent in several
    POSTs are written in one transaction; a read waiting for them ends the wait, as does a stop."""
    store = open_store(store_location)
    spool = IntakeSpool(tmp_path / "s.sqlite3.intake")
    results: list[IngestResult] = []
    fold = BackgroundFold(store, spool, results.append, spooled_events, linger_s=30)
    fold.start()
    bodies = _copies(0, 3)

    async def post_then_read() -> tuple[int, float]:
        for body in bodies:
            fold.put([prepare(e) for e in body], orjson.dumps(body))
            await asyncio.sleep(0.3)
        lingering = fold.batches  # nothing folded yet, 0.9 s after the first POST
        started = time.monotonic()
        await fold.settled()
        return lingering, time.monotonic() - started

    lingering, waited = asyncio.run(post_then_read())
    assert lingering == 0 and fold.batches == 1 and waited < 20
    assert sum(r.stored for r in results) == 3 * len(EVENTS)
    last = _copies(3, 1)[0]
    fold.put([prepare(e) for e in last], orjson.dumps(last))
    started = time.monotonic()
    fold.close()  # a stop folds what lingers at once
    assert time.monotonic() - started < 20 and fold.batches == 2
    assert sum(r.stored for r in results) == 4 * len(EVENTS)
    spool.close()
    store.close()


def test_background_fold_folds_a_lingering_post_once_the_linger_is_over(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.sqlite3")
    spool = IntakeSpool(tmp_path / "s.sqlite3.intake")
    fold = BackgroundFold(store, spool, lambda _: None, spooled_events, linger_s=0.5)
    fold.start()
    body = _copies(0, 1)[0]
    fold.put([prepare(e) for e in body], orjson.dumps(body))
    deadline = time.monotonic() + 30
    while fold.batches == 0 and time.monotonic() < deadline:  # nobody reads: the linger ends it
        time.sleep(0.05)
    assert fold.batches == 1 and fold.pending_events == 0
    assert _rows_of(tmp_path / "s.sqlite3") > 0
    fold.close()
    spool.close()
    store.close()


def test_accepted_bodies_not_folded_are_folded_at_the_next_start(
    tmp_path: Path, store_location: str | Path
) -> None:
    path = tmp_path / "s.sqlite3"
    spool = IntakeSpool(path.with_name(path.name + ".intake"))
    bodies = _copies(0, 4)
    for body in bodies:
        spool.append(orjson.dumps([*body, {"not": "an event"}]))  # the POST refused this one
    spool.close()  # as if killed before any fold
    store = open_store(store_location)
    spool = IntakeSpool(path.with_name(path.name + ".intake"))
    results: list[IngestResult] = []
    fold = BackgroundFold(store, spool, results.append, spooled_events)
    assert fold.start() == 4 * len(EVENTS)
    fold.close()
    spool.close()
    assert sum(r.stored for r in results) == 4 * len(EVENTS)
    store.close()


def test_events_answered_survive_kill_9(
    servers: list[CliServer], tmp_path: Path, store_location: str | Path
) -> None:
    bodies = _copies(0, 60)
    server = start(servers, "serve", *serve_store_args(store_location, tmp_path))
    with requests.Session() as session:
        for body in bodies:
            answer = session.post(f"http://{server.address}/v1/ray-events", json=body, timeout=30)
            assert answer.status_code == 200 and answer.json()["accepted"] == len(body)
    server.send_signal(signal.SIGKILL)  # straight after the last 200, folded or not
    server.proc.wait(10)
    # folds what the killed one had not
    start(servers, "serve", *serve_store_args(store_location, tmp_path)).stop()
    reference = EventStore(tmp_path / "reference.sqlite3")
    for body in bodies:
        reference.ingest(body)
    expected = reference.size()["state_rows"]
    reference.close()
    assert _rows_of(store_location) == expected
    spool = tmp_path / ("spool" if isinstance(store_location, str) else "events.sqlite3.intake")
    assert spool.is_dir() and not list(spool.glob("*.spool"))


def test_a_failed_append_leaves_no_torn_record(tmp_path: Path) -> None:
    """A write cut short by a full disk (here the file-size limit, the same EFBIG/ENOSPC path)
    raises, and the segment is cut back: the bodies after it are still found at the next start."""
    spool = IntakeSpool(tmp_path / "intake")
    spool.append(b"before")
    used = sum(p.stat().st_size for p in (tmp_path / "intake").glob("*.spool"))
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (used + 1000, hard))
    try:
        with pytest.raises(OSError):
            spool.append(b"x" * 100_000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    spool.append(b"after")
    spool.close()
    again = IntakeSpool(tmp_path / "intake")
    assert [body for body, _ in again.pending()] == [b"before", b"after"]
    again.close()


def test_a_fold_the_disk_refuses_is_tried_again_not_dropped(tmp_path: Path) -> None:
    """The store's writes fail (its files may not grow: the real EFBIG a full disk gives as
    ENOSPC): the batch stays queued and in the spool, and is folded once the disk has room."""
    path = tmp_path / "s.sqlite3"
    store = EventStore(path)
    bodies = _copies(0, 40)
    largest_body = max(len(orjson.dumps(body)) for body in bodies)
    spool = IntakeSpool(tmp_path / "intake", segment_bytes=2 * largest_body)
    results: list[IngestResult] = []
    fold = BackgroundFold(store, spool, results.append, spooled_events)
    fold.start()
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4 * largest_body, hard))  # the spool's records fit
    try:
        for body in bodies:
            fold.put([prepare(e) for e in body], orjson.dumps(body))
        deadline = time.monotonic() + 30
        while not fold.failures and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fold.failures and not results  # refused by the disk, nothing counted as stored
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)

    async def settle() -> None:
        await asyncio.wait_for(fold.settled(), 30)

    asyncio.run(settle())
    fold.close()
    spool.close()
    assert sum(r.stored for r in results) == 40 * len(EVENTS)
    reference = EventStore(tmp_path / "reference.sqlite3")
    for body in bodies:
        reference.ingest(body)
    assert store.size()["state_rows"] == reference.size()["state_rows"]
    reference.close()
    store.close()
