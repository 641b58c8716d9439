"""The durable queue's file: what goes in comes back out, in order, by either insert path, and the
log is copied into the file off the writer's path."""

from __future__ import annotations

import os
import random
import sqlite3
import time
from pathlib import Path

import pytest

from ray_otel_events.durable import sqlite_queue
from ray_otel_events.durable.sqlite_queue import QueueDatabase, SqliteEventQueue


def _batch(n: int, seed: int) -> tuple[list[bytes], list[int]]:
    rnd = random.Random(seed)
    wires = [os.urandom(rnd.choice([0, 1, 7, 300, 5000])) for _ in range(n)]
    return wires, [rnd.randrange(256) for _ in range(n)]


@pytest.mark.parametrize("json_each", [True, False])
def test_appended_rows_read_back_exactly_by_either_insert_path(tmp_path: Path, json_each: bool) -> None:
    queue = SqliteEventQueue.single(tmp_path, 10**9)
    assert queue.database.json_each  # this machine's SQLite has its JSON functions
    queue.database.json_each = json_each
    batches = [_batch(n, seed) for seed, n in enumerate([1, 0, 500, 37])]
    seqs = [queue.append(wires, types) for wires, types in batches]
    assert [s for batch in seqs for s in batch] == list(range(1, 539))
    stored = queue.read_all()
    assert stored.wires == [w for wires, _ in batches for w in wires]
    assert stored.types == [t for _, types in batches for t in types]
    assert stored.seqs == list(range(1, 539)) and set(stored.keys) == {b""}
    assert queue.count == 538 and queue.size_bytes == sum(map(len, stored.wires))
    queue.delete(seqs[2][10:20])
    assert queue.count == 528 and len(queue.read_all().wires) == 528
    queue.close()


def test_values_that_do_not_fit_the_packed_insert_go_row_by_row(tmp_path: Path) -> None:
    assert sqlite_queue._packed_rows([1], [256]) is None  # a type past 8 bits
    assert sqlite_queue._packed_rows([1], [-1]) is None
    assert sqlite_queue._packed_rows([1 << 24], [1]) is None  # a wire past 24 bits of length
    assert sqlite_queue._packed_rows([1 << 23] * 256, [1] * 256) is None  # past 31 bits in all
    with pytest.raises(ValueError, match="2 wires but 1 types"):
        sqlite_queue._packed_rows([1, 1], [1])
    queue = SqliteEventQueue.single(tmp_path, 10**9)
    queue.append([b"a", b"bc"], [3, 300])
    assert queue.read_all().types == [3, 300]
    queue.close()


def test_the_log_is_copied_into_the_file_by_the_checkpointer(tmp_path: Path) -> None:
    database = QueueDatabase(tmp_path, ["events"])
    queue = SqliteEventQueue(database, "events", 10**9)
    wal = Path(str(database.path) + "-wal")
    assert database.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    queue.append(*_batch(2000, 1))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # PASSIVE checkpoints copy the frames; the file grows
        if database.path.stat().st_size > 1_000_000:
            break
        time.sleep(0.05)
    assert database.path.stat().st_size > 1_000_000, "the checkpointer never copied the log"
    assert wal.exists()
    database.close()
    assert not wal.exists() or wal.stat().st_size == 0  # closing truncates it
    reopened = sqlite3.connect(database.path)
    assert reopened.execute("SELECT count(*) FROM events").fetchone()[0] == 2000
    reopened.close()
