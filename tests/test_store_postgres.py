"""The store on a real PostgreSQL server: choosing it from `--store`, its migrations, several
writers on one database (in one process and as two `serve` processes), and the database lost and
back while `serve` runs. The answers on both backends are compared in the store's other tests
(`store_location` runs them on SQLite and on PostgreSQL).
"""

from __future__ import annotations

import base64
import copy
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from helpers.agg_procs import FIXTURE, CliServer, clean_env, start
from helpers.postgres import PostgresServer, serve_store_args

from ray_otel_events.store import postgres_store, raw_events
from ray_otel_events.store.backend import ColumnFilter, Retention, StoreError
from ray_otel_events.store.kept_ids import HASHED, event_hash
from ray_otel_events.store.location import open_store
from ray_otel_events.store.postgres_store import SCHEMA_VERSION, PostgresStore
from ray_otel_events.store.row_fold import StoredRow, fold_keys, group_pieces
from ray_otel_events.store.row_packing import PACKED_V1, PACKED_V2, pack_row, row_json
from ray_otel_events.store.sql_reads import ROW_IDS
from ray_otel_events.store.sqlite_store import EventStore
from ray_otel_events.store.state_merge import INDEXED_COLUMNS, Prepared, prepare
from tests.helpers.stored_rows import old_raw_blob
from tests.test_compiled_helpers import _mutated
from tests.test_otlp_wire import _fixture_dicts

EVENTS: list[dict[str, Any]] = [item.get("event", item) for item in json.loads(Path(FIXTURE).read_text())]
RESOURCES = ("tasks", "actors", "jobs", "nodes", "workers")


def _session_copy(events: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The fixture as another cluster session: the same rows, distinct keys and event ids."""
    return [dict(e, sessionName=f"session_{n}", eventId=f"{n}-{e['eventId']}") for e in events]


def _all_rows(store: Any) -> dict[str, list[Any]]:
    """Every row of every resource, in one order whatever the backend."""
    return {
        r: sorted(store.select(r, limit=10**6).rows, key=lambda row: json.dumps(row, sort_keys=True))
        for r in RESOURCES
    }


def test_store_urls_no_backend_takes_are_refused_with_exit_2(tmp_path: Path) -> None:
    """A URL-looking --store (or RAY_OTEL_EVENTS_STORE) that is not PostgreSQL is named and refused,
    with no folder made after its scheme; an unreachable server is exit 2 too."""
    cases = [
        (["--store", "mysql://root@127.0.0.1:3306/db"], {}, "mysql:// is not a supported store"),
        (["--store", "postgres:/x"], {}, "is not a PostgreSQL URL"),
        (["--store", "sqlite://"], {}, "sqlite:// is not a supported store"),
        (["--store", "postgresql://"], {}, "is not a PostgreSQL URL"),
        ([], {"RAY_OTEL_EVENTS_STORE": "mysql://x@y/z"}, "mysql:// is not a supported store"),
        (
            ["--store", "postgresql://nobody@127.0.0.1:1/history", "--spool", str(tmp_path / "spool")],
            {},
            "cannot reach PostgreSQL at 127.0.0.1:1/history",
        ),
    ]
    for args, env, message in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "ray_otel_events", "serve", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=clean_env({"XDG_DATA_HOME": str(tmp_path / "data"), **env}),
        )
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spool.lock"]  # no `mysql:`, `postgres:`...
    listed = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "list", "tasks", "--store", "mysql://a@b/c"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 1 and "mysql:// is not a supported store" in listed.stderr


def test_schema_is_migrated_on_open_and_a_newer_one_refused(postgres_server: PostgresServer) -> None:
    url = postgres_server.new_database("migrations")
    with pytest.raises(StoreError, match="no store in the database"):
        open_store(url, read_only=True)
    stores = [PostgresStore(url) for _ in range(2)]  # the second finds the steps applied
    with psycopg.connect(url) as db:
        applied = [r[0] for r in db.execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert (
            applied == [number for number, _ in postgres_store.MIGRATIONS] and applied[-1] == SCHEMA_VERSION
        )
        db.execute("INSERT INTO schema_migrations(version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    for store in stores:
        store.close()
    with pytest.raises(StoreError, match="newer than this version"):
        PostgresStore(url)
    with pytest.raises(StoreError, match="newer than this version"):
        PostgresStore(url, read_only=True)


_V6_COLUMNS = (
    "resource",
    "entity_id",
    "attempt",
    "session",
    "updated",
    "data",
    "event_ids",
    *INDEXED_COLUMNS,
)


def _written_before_packing(url: str, events: list[dict[str, Any]], now: float, steps: int) -> None:
    """A database at schema step `steps` (at most 6) holding `events` as the code of those steps
    wrote them: each row's JSON as text and its event ids as text joined by spaces (the upsert
    values of the fold both versions share), the raw events kept from step 2 on (as blobs with
    no format byte, no dictionary)."""
    pieces, _ = group_pieces([prepare(event) for event in events])
    keys = list(pieces)
    rows, _ = fold_keys(
        keys, pieces, {k: StoredRow({}, []) for k in keys}, now, {}, [], lambda _: StoredRow({}, [])
    )
    ids_at = _V6_COLUMNS.index("event_ids")  # kept then as the ids' text, not their hashes
    rows = [
        (*row[:ids_at], " ".join(dict.fromkeys(f[1] for f in pieces[row[:4]])), *row[ids_at + 1 :])
        for row in rows
    ]
    marks = ", ".join(["%s"] * len(_V6_COLUMNS))
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "CREATE TABLE schema_migrations"
            " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for number, sql in postgres_store.MIGRATIONS[:steps]:
            assert isinstance(sql, str)
            db.execute(sql)
            db.execute("INSERT INTO schema_migrations(version) VALUES (%s)", (number,))
        for row in rows:
            db.execute(f"INSERT INTO state_rows({', '.join(_V6_COLUMNS)}) VALUES ({marks})", row)
        if steps >= 2:
            texts, _ = raw_events.event_texts(events)
            for session, parts in texts.items():
                db.execute(
                    "INSERT INTO raw_events(session, received, data) VALUES (%s, %s, %s)",
                    (session, now, old_raw_blob(b"[" + b",".join(part[1:-1] for part in parts) + b"]")),
                )
                db.execute("INSERT INTO sessions VALUES (%s, %s, %s)", (session, now, now))


def test_a_database_before_packed_rows_is_carried_forward_with_the_same_answers(
    postgres_server: PostgresServer,
) -> None:
    """Schema step 7 on a database step 6 wrote (rows' JSON and event ids as text; Ray's base64
    event ids and others): the rows packed, and every answer the same as a store written since
    gives for the same events (rows, counts, an entity's attempts, kept fields, duplicates)."""
    events = [*EVENTS, *_session_copy(EVENTS, 1)]  # the copy's ids are not base64
    old_url = postgres_server.new_database("before_packing")
    _written_before_packing(old_url, events, 1000.0, 6)
    migrated = PostgresStore(old_url)
    fresh = PostgresStore(postgres_server.new_database("packed_from_start"))
    fresh.ingest(copy.deepcopy(events), now=1000.0)
    with psycopg.connect(old_url) as db:
        stored = db.execute("SELECT data, event_ids FROM state_rows").fetchall()
    assert stored and all(data[0] == 1 and ids[0] in (28, 0x80) for data, ids in stored)  # packed; ids bytes
    assert _all_rows(migrated) == _all_rows(fresh)
    assert migrated.sessions() == fresh.sessions() and len(fresh.sessions()) == 2
    assert migrated.counts("tasks", "state", "job") == fresh.counts("tasks", "state", "job")
    task = fresh.select("tasks", limit=1).rows[0]["task_id"]
    assert migrated.entity_rows("tasks", task) == fresh.entity_rows("tasks", task) != []
    for attempt, session, _ in fresh.entity_rows("tasks", task):
        assert migrated.new_fields("tasks", task, attempt, session) == fresh.new_fields(
            "tasks", task, attempt, session
        )
        assert migrated.raw_texts(session, [event_hash(e["eventId"]) for e in events], 2000.0) != []
    again = migrated.ingest(copy.deepcopy(events), now=2000.0)
    assert (
        again.stored == 0
        and again.duplicates == fresh.ingest(copy.deepcopy(events), now=2000.0).duplicates > 0
    )
    assert _all_rows(migrated) == _all_rows(fresh)
    for store in (migrated, fresh):
        store.close()


def test_a_database_from_before_sessions_gets_them_from_its_rows(
    postgres_server: PostgresServer,
) -> None:
    """Schema step 2 on a database the first step wrote: its sessions come from its rows, and a
    rebuild is refused (their raw events were never kept) until forced."""
    url = postgres_server.new_database("before_sessions")
    _written_before_packing(url, EVENTS, 1000.0, 1)
    store = PostgresStore(url)
    assert store.sessions() == [EVENTS[0]["sessionName"]]
    assert store.session_list()[0]["tasks"] == store.total("tasks") > 0
    with pytest.raises(StoreError, match="before raw events were kept"):
        store.rebuild()
    assert store.rebuild(force=True).stored == 0 and store.size()["state_rows"] == 0
    store.close()


def test_concurrent_writers_fold_every_piece_once(postgres_server: PostgresServer, tmp_path: Path) -> None:
    """Four writers on one database (each its own connections, as processes have) fold pieces of the
    same rows in any order, each event sent to two of them: the rows are those of one SQLite store
    fed in order, and every event is stored once and skipped once."""
    url = postgres_server.new_database("concurrent")
    events = [e for n in range(6) for e in _session_copy(EVENTS, n)]
    writers = [PostgresStore(url) for _ in range(4)]
    rng = random.Random(7)
    plans: list[list[list[dict[str, Any]]]] = [[] for _ in writers]
    for sending in (events, events):
        shuffled = sending[:]
        rng.shuffle(shuffled)
        for i in range(0, len(shuffled), 3):
            plans[rng.randrange(len(writers))].append(shuffled[i : i + 3])
    results: list[tuple[int, int]] = [(0, 0)] * len(writers)
    errors: list[BaseException] = []

    def write(index: int) -> None:
        stored = duplicates = 0
        try:
            for batch in plans[index]:
                result = writers[index].ingest(batch)
                assert result.invalid == []
                stored += result.stored
                duplicates += result.duplicates
        except BaseException as exc:
            errors.append(exc)
        results[index] = (stored, duplicates)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(writers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(r[0] for r in results) == len(events) and sum(r[1] for r in results) == len(events)
    reference = EventStore(tmp_path / "reference.sqlite3")
    reference.ingest(events)
    assert _all_rows(writers[0]) == _all_rows(reference)
    for store in [*writers, reference]:
        store.close()


def test_a_row_another_writer_inserts_meanwhile_is_folded_onto_its_row(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A writer that read a task's row as absent finds it inserted by another writer when it
    writes: its pieces are folded again onto that row (an event the other folded is a duplicate),
    as one SQLite store folds the two batches in the order they were committed."""
    task = "4NwXTINZkDT///////////////8BAAAA"
    pieces = [
        e
        for e in EVENTS
        if (e.get("taskDefinitionEvent") or e.get("taskLifecycleEvent") or {}).get("taskId") == task
    ]
    definition, first, second = sorted(pieces, key=lambda e: e["eventType"] != "TASK_DEFINITION_EVENT")
    url = postgres_server.new_database("late_rows")
    other = PostgresStore(url)
    meanwhile: list[Any] = []

    class Interleaved(PostgresStore):
        def _write_rows(self, db: Any, many: str, one: str, rows: list[tuple[Any, ...]]) -> Any:
            if many is postgres_store._INSERT_ROWS and rows and not meanwhile:
                meanwhile.append(other.ingest([copy.deepcopy(first), copy.deepcopy(second)]))
            return super()._write_rows(db, many, one, rows)

    writer = Interleaved(url)
    result = writer.ingest([copy.deepcopy(definition), copy.deepcopy(first)])
    assert meanwhile[0].stored == 2
    assert (result.stored, result.duplicates, result.by_type) == (1, 1, {"TASK_DEFINITION_EVENT": 1})
    reference = EventStore(tmp_path / "reference.sqlite3")
    reference.ingest([first, second])
    reference.ingest([definition, first])
    assert _all_rows(writer) == _all_rows(reference)
    assert _all_rows(writer)["tasks"][0]["state"] != "NIL"
    for store in (writer, other, reference):
        store.close()


def test_every_captured_and_mutated_event_folds_as_on_sqlite(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """Every event of the captures, shuffled into batches with copies, and events with odd values
    anywhere (ids, times, numbers, NULs, lone surrogates, shapes): the same answer per batch
    (stored, duplicates, refused) and the same rows as on SQLite."""
    dicts = _fixture_dicts()
    rnd = random.Random(5)
    events: list[Any] = dicts + dicts[:60]
    keys = ["taskId", "timestamp", "state", "jobId", "eventId", "sessionName", "x"]
    events += [_mutated(rnd, rnd.choice(dicts), 3, keys) for _ in range(300)]
    events += [dict(rnd.choice(dicts), sessionName="nul\x00 session", eventId=f"nul-{i}") for i in range(5)]
    rnd.shuffle(events)
    postgres = PostgresStore(postgres_server.new_database("corpus"))
    sqlite = EventStore(tmp_path / "corpus.sqlite3")
    for first in range(0, len(events), 37):
        batch = events[first : first + 37]
        answers = [store.ingest(copy.deepcopy(batch)) for store in (postgres, sqlite)]
        assert answers[0] == answers[1], first
    assert _all_rows(postgres) == _all_rows(sqlite)
    assert postgres.sessions() == sqlite.sessions() and "nul\x00 session" in sqlite.sessions()
    postgres.close()
    sqlite.close()


def test_values_of_another_type_than_their_column_are_written_as_on_sqlite(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A row whose indexed field is a number or a boolean where its column holds text is written
    alone (a batch's rows go as one array per column), inserted and then updated: the same rows as
    on SQLite."""
    definitions = [e for e in EVENTS if e["eventType"] == "TASK_DEFINITION_EVENT"][:4]
    events = []
    for definition, value in zip(definitions, [123, True, 1.5, "plain"], strict=True):
        event = copy.deepcopy(definition)
        event["taskDefinitionEvent"]["taskName"] = value
        events.append(event)
    again = [dict(copy.deepcopy(e), eventId="again-" + e["eventId"]) for e in events]
    postgres = PostgresStore(postgres_server.new_database("odd_types"))
    sqlite = EventStore(tmp_path / "odd.sqlite3")
    for store in (postgres, sqlite):
        assert store.ingest(copy.deepcopy(events)).stored == 4
        assert store.ingest(copy.deepcopy(again)).stored == 4
    assert _all_rows(postgres) == _all_rows(sqlite)
    assert len(postgres.select("tasks").rows) == 4
    postgres.close()
    sqlite.close()


def _post(server: CliServer, events: list[Any]) -> requests.Response:
    return requests.post(f"http://{server.address}/v1/ray-events", json=events, timeout=30)


def _tasks(server: CliServer) -> list[Any]:
    answer = requests.get(
        f"http://{server.address}/api/v0/tasks", params={"detail": "true", "limit": "10000"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    rows: list[Any] = answer.json()["data"]["result"]["result"]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def test_two_serve_processes_share_one_database(
    servers: list[CliServer], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """Intake at either `serve`, reads from either: a task's pieces POSTed to both, newest first,
    fold to what one `serve` on SQLite makes of them in order, a batch retried at the other
    process is skipped there, and a page served by one sees the other's writes."""
    url = postgres_server.new_database("two_serves")
    first = start(servers, "serve", *serve_store_args(url, tmp_path / "a"))
    second = start(servers, "serve", *serve_store_args(url, tmp_path / "b"))
    reference = start(servers, "serve", *serve_store_args(tmp_path / "ref.sqlite3", tmp_path))
    assert _post(reference, EVENTS).status_code == 200
    reverse = EVENTS[::-1]
    for n, i in enumerate(range(0, len(reverse), 3)):
        assert _post((first, second)[n % 2], reverse[i : i + 3]).status_code == 200
    assert _post(second, EVENTS[:7]).status_code == 200  # a retry, at the other process
    expected = _tasks(reference)
    for server in (first, second):  # a read waits for its own process's fold only: both settled
        assert _get(server, "/api/version").status_code == 200
    assert expected and _tasks(first) == expected
    assert _tasks(second) == expected
    # The page's live updates: a write through one process moves the generation the other serves.
    before = _get(second, "/api/ui/generation").json()["generation"]
    assert _post(first, _session_copy(EVENTS, 1)).status_code == 200
    _wait_for(lambda: _get(second, "/api/ui/generation").json()["generation"] > before)
    overview = _get(second, "/api/ui/overview").json()
    assert overview["generation"] > before
    # Reads answer for the newest session, here the copy written through the other process.
    sessions = _get(second, "/api/sessions").json()["sessions"]
    assert [s["name"] for s in sessions] == ["session_1", EVENTS[0]["sessionName"]]
    assert len(_tasks(second)) == len(expected)
    assert {row["task_id"] for row in _tasks(second)} == {row["task_id"] for row in expected}
    # A third on the first's spool is refused, told the fix: a spool of its own.
    third = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "serve", *serve_store_args(url, tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert third.returncode == 2, third.stderr
    assert f"in use by another ray-otel-events serve (pid {first.proc.pid}" in third.stderr
    assert "give this one another --spool" in third.stderr and "--store" not in third.stderr
    stats = [server.stop() for server in (first, second)]
    assert sum(s["events_stored"] for s in stats) == 2 * len(EVENTS)
    assert sum(s["duplicates"] for s in stats) == 7


def test_database_lost_and_back_while_serve_runs(
    servers: list[CliServer], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """The server stopped under a stream of POSTs: intake answers 503 with Retry-After, /readyz
    turns false, reads answer 503; once it is back `serve` reconnects by itself and every batch a
    client got a 200 for is stored, once."""
    url = postgres_server.new_database("faults")
    server = start(servers, "serve", *serve_store_args(url, tmp_path))
    server.expect_tracebacks("folding ")  # the fold says why each try failed while the server is down
    sent: list[int] = []
    refused: list[requests.Response] = []
    stop = threading.Event()

    def stream() -> None:
        n = 0
        while not stop.is_set():
            batch = _session_copy(EVENTS, n)
            while not stop.is_set():  # as Ray's publisher does: the same batch until it is taken
                answer = _post(server, batch)
                if answer.status_code == 200:
                    sent.append(n)
                    break
                refused.append(answer)
                time.sleep(0.2)
            n += 1
            time.sleep(0.05)

    sender = threading.Thread(target=stream)
    sender.start()
    try:
        _wait_for(lambda: len(sent) >= 3)
        postgres_server.stop_server()
        # (a Response is falsy when not 2xx: wrapped)
        # (the fold may find the database gone first: /readyz says so under store_folding)
        (ready,) = _wait_for(
            lambda: (
                (r := _get(server, "/readyz")).status_code == 503
                and not r.json()["checks"]["store_reachable"]["ok"]
                and [r]
            )
        )
        assert "cannot be reached" in ready.json()["checks"]["store_reachable"]["detail"]
        assert f":{postgres_server.port}" not in ready.text and "faults" not in ready.text  # nor where
        _wait_for(lambda: refused)
        assert refused[-1].status_code == 503 and int(refused[-1].headers["Retry-After"]) >= 1
        assert "the store is unavailable" in refused[-1].json()["error"]
        read = _get(server, "/api/v0/tasks")
        assert read.status_code == 503 and "Retry-After" in read.headers
        postgres_server.start()
        _wait_for(lambda: _get(server, "/readyz").status_code == 200)
        count = len(sent)
        _wait_for(lambda: len(sent) >= count + 3)  # taken again
    finally:
        stop.set()
        sender.join()
    assert _get(server, "/api/v0/tasks").status_code == 200  # waits for the fold
    stats = server.stop()
    store = PostgresStore(url, read_only=True)
    assert sorted(store.sessions()) == sorted(f"session_{n}" for n in sent)
    assert store.size()["state_rows"] == 17 * len(sent)
    store.close()
    assert stats["events_stored"] == len(EVENTS) * len(sent)


def _get(server: CliServer, path: str) -> requests.Response:
    return requests.get(f"http://{server.address}{path}", timeout=30)


def _wait_for(condition: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not reached within {timeout_s} s")


def _index_bytes(url: str) -> dict[str, int]:
    with psycopg.connect(url) as db:
        return {
            name: int(size)
            for name, size in db.execute(
                "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i JOIN pg_class c"
                " ON c.oid = i.indexrelid WHERE i.indrelid = 'state_rows'::regclass"
            )
        }


def test_indexes_bloated_by_updates_are_repacked_with_the_same_answers(
    postgres_server: PostgresServer,
) -> None:
    """Rows updated batch after batch (as a cluster sends a task's transitions) leave the indexes of
    state_rows larger than REINDEX makes them; upkeep rebuilds those past `repack_ratio` times their
    packed size (none below `repack_min_bytes`), drops what an interrupted rebuild left, and every
    answer stays the same (rows, counts, filtered pages)."""
    url = postgres_server.new_database("repack")
    store = PostgresStore(url)
    copies = [_session_copy(EVENTS, n) for n in range(300)]
    for n in range(len(EVENTS)):  # each event of every copy in its own batch: each row updated again
        store.ingest(copy.deepcopy([events[n] for events in copies]), now=1000.0 + n)
    with psycopg.connect(url, autocommit=True) as db:  # (not analyzed: the store does it if need be)
        # What REINDEX CONCURRENTLY leaves when stopped midway: an invalid copy of an index.
        db.execute("CREATE INDEX rows_by_kind_ccnew ON state_rows(resource, kind)")
        db.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'rows_by_kind_ccnew'::regclass")
    rows = _all_rows(store)
    counts = sorted(store.counts("tasks", "state", "job"))
    filters = {  # each column's most common value
        c: max((found for found in store.counts("tasks", c) if found[0]), key=lambda found: found[1])[0]
        for c in ("state", "job", "func", "name", "node", "kind")
    }
    pages = {c: store.select("tasks", [ColumnFilter(c, True, v)], limit=5) for c, v in filters.items()}
    before = _index_bytes(url)
    assert store.repack_indexes() == []  # each far below the default repack_min_bytes
    assert _index_bytes(url) == {k: v for k, v in before.items() if k != "rows_by_kind_ccnew"}
    store.repack_min_bytes = 0
    store.repack_ratio = 1.5
    with psycopg.connect(url) as db:
        estimated = store._packed_bytes(db)
    bloated = sorted(name for name, (size, packed) in estimated.items() if size > 1.5 * packed)
    assert len(bloated) >= 6, estimated
    with psycopg.connect(url) as other:  # another process repacking: this one leaves it alone
        other.execute("SELECT pg_advisory_lock(%s, -2)", (postgres_store._LOCK_SPACE,))
        assert store.repack_indexes() == []
        other.execute("SELECT pg_advisory_unlock(%s, -2)", (postgres_store._LOCK_SPACE,))
    assert _index_bytes(url) == {k: v for k, v in before.items() if k != "rows_by_kind_ccnew"}
    with psycopg.connect(url, autocommit=True) as db:  # a user of the store who does not own its tables
        db.execute("DROP ROLE IF EXISTS store_writer")
        db.execute("CREATE ROLE store_writer LOGIN")
        db.execute("GRANT CREATE, USAGE ON SCHEMA public TO store_writer")
        db.execute("GRANT ALL ON ALL TABLES IN SCHEMA public TO store_writer")
        db.execute("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO store_writer")
    writer = PostgresStore(url.replace(f"{postgres_server.user}@", "store_writer@"))
    writer.repack_min_bytes = 0
    writer.repack_ratio = 1.5
    assert writer.repack_indexes() == [] and not writer.repacking  # refused once, not tried again
    assert _index_bytes(url) == {k: v for k, v in before.items() if k != "rows_by_kind_ccnew"}
    writer.close()
    store.prune(Retention(max_age_s=None, max_rows=None, max_bytes=None))  # upkeep's round repacks
    after = _index_bytes(url)
    assert set(after) == set(before) - {"rows_by_kind_ccnew"}
    with psycopg.connect(url) as db:
        assert {
            name for name, (size, packed) in store._packed_bytes(db).items() if size > 1.5 * packed
        } == set()
    # each rebuilt (how far below its size before depends on how the updates left its pages)
    assert all(after[name] < before[name] for name in bloated), (before, after)
    assert store.repack_indexes() == []  # packed now
    assert _all_rows(store) == rows and sorted(store.counts("tasks", "state", "job")) == counts
    for column, value in filters.items():
        page = store.select("tasks", [ColumnFilter(column, True, value)], limit=5)
        assert page == pages[column] and page.matched >= 300, (column, page.matched)
    store.close()


def test_dead_row_versions_are_vacuumed_as_the_fold_leaves_them(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows updated batch after batch leave dead versions: past the bound the store VACUUMs
    state_rows itself (autovacuum waits a minute, and for a fifth of the table to be dead), on a
    thread of its own, so later rows reuse their space; the rows read back the same, and a store
    opened read-only never vacuums."""
    monkeypatch.setattr(PostgresStore, "vacuum_min_dead", 50)
    url = postgres_server.new_database("vacuum")
    store = PostgresStore(url)
    copies = [_session_copy(EVENTS, n) for n in range(100)]
    for n in range(len(EVENTS)):  # each event of every copy in its own batch: each row updated again
        store.ingest(copy.deepcopy([events[n] for events in copies]), now=1000.0 + n)
    rows = _all_rows(store)

    def vacuumed() -> bool:
        with psycopg.connect(url) as db:  # VACUUMs run by a client, not autovacuum's
            found = db.execute(
                "SELECT vacuum_count, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'state_rows'"
            ).fetchone()
        return bool(found and found[0] >= 1)

    _wait_for(vacuumed)
    assert store.vacuums >= 1
    running = sum(t.name == "state-rows-vacuum" for t in threading.enumerate())
    assert running >= 1
    reader = PostgresStore(url, read_only=True)
    assert _all_rows(reader) == rows and reader.vacuums == 0
    reader.close()
    store.close()
    assert sum(t.name == "state-rows-vacuum" for t in threading.enumerate()) == running - 1  # stopped


# -- rows packed PACKED_V2 (schema step 10) ------------------------------------------------------

_TASK = "4NwXTINZkDT///////////////8BAAAA"  # a task of the fixture that fails once and runs again
_LONG_NODE = base64.b64encode(bytes(range(100))).decode()  # 200 hex digits: stored in its indexed form


def _id_text(value: Any) -> Any:
    """An id column's value as text: since step 13 its bytes read back (`_id_text`), before as it is."""
    return postgres_store._id_text(value) if isinstance(value, bytes) else value


def _stored_data(url: str) -> list[tuple[Any, ...]]:
    """Each row's resource, attempt, the columns of a PACKED_V2 dictionary (`ROW_IDS`: entity id,
    node, worker, as text: `_id_text`) and data, in key order."""
    with psycopg.connect(url) as db:
        found = db.execute(
            f"SELECT resource, attempt, {ROW_IDS}, data FROM state_rows ORDER BY resource, entity_id, attempt"
        ).fetchall()
    return [(resource, attempt, *map(_id_text, ids), data) for resource, attempt, *ids, data in found]


def _needs_its_ids(data: bytes, ids: list[Any]) -> bool:
    """Whether a packed row reads otherwise (or not at all) without the ids its dictionary ends with."""
    try:
        return row_json(data, ()) != row_json(data, ids)
    except ValueError:
        return True


def _task_pieces() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """`_TASK`'s definition and its first attempt's lifecycle event split in two: the first with a
    node id past _WHOLE_CHARS (as hex) and no worker, the second with the rest of the transitions,
    that node and the worker."""
    pieces = [
        e
        for e in EVENTS
        if (e.get("taskDefinitionEvent") or e.get("taskLifecycleEvent") or {}).get("taskId") == _TASK
    ]
    definition = next(e for e in pieces if e["eventType"] == "TASK_DEFINITION_EVENT")
    lifecycle = next(e for e in pieces if e.get("taskLifecycleEvent", {}).get("taskAttempt") == 0)
    transitions = lifecycle["taskLifecycleEvent"]["stateTransitions"]
    assert lifecycle["taskLifecycleEvent"]["workerId"] and len(transitions) == 4
    early, late = copy.deepcopy(lifecycle), copy.deepcopy(lifecycle)
    early["eventId"] = "early-" + early["eventId"]
    early["taskLifecycleEvent"].update(
        stateTransitions=transitions[:2], nodeId=_LONG_NODE, workerId="", rayErrorInfo={}
    )
    late["taskLifecycleEvent"].update(stateTransitions=transitions[2:], nodeId=_LONG_NODE)
    return copy.deepcopy(definition), early, late


def test_rows_are_packed_v2_with_the_ids_their_columns_hold(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """Every row written is PACKED_V2 (format byte 2), its dictionary the one a reader builds from
    its entity id, node and worker as stored (a task's reads otherwise without them); rows folded
    batch after batch (each fold reading the stored row) answer as on SQLite."""
    url = postgres_server.new_database("packed_v2")
    postgres = PostgresStore(url)
    sqlite = EventStore(tmp_path / "reference.sqlite3")
    for first in range(0, len(EVENTS), 3):
        for store in (postgres, sqlite):
            assert store.ingest(copy.deepcopy(EVENTS[first : first + 3]), now=1000.0 + first).invalid == []
    stored = _stored_data(url)
    assert len(stored) == 17 and {data[0] for *_, data in stored} == {PACKED_V2}
    tasks = [row for row in stored if row[0] == "tasks"]
    assert tasks and all(_needs_its_ids(data, ids) for _, _, *ids, data in tasks)
    assert _all_rows(postgres) == _all_rows(sqlite)
    task = postgres.select("tasks", limit=1).rows[0]["task_id"]
    assert postgres.entity_rows("tasks", task) == sqlite.entity_rows("tasks", task) != []
    postgres.close()
    sqlite.close()


def test_a_long_node_and_a_worker_that_comes_later_fold_and_read_back_whole(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A task's row written by its definition (no node, no worker), then given a node id past
    _WHOLE_CHARS (its column holds the indexed form, which the row's dictionary is made of), then
    its worker by a later event: each fold reads the PACKED_V2 row stored before, and the row reads
    back whole (the node id as sent), as on SQLite, found by a filter on the whole node id."""
    url = postgres_server.new_database("long_node")
    postgres = PostgresStore(url)
    sqlite = EventStore(tmp_path / "reference.sqlite3")
    node = base64.b64decode(_LONG_NODE).hex()
    columns = []
    for batch in _task_pieces():
        for store in (postgres, sqlite):
            assert store.ingest([copy.deepcopy(batch)], now=1000.0).stored == 1
        ((resource, _, _, stored_node, worker, data),) = _stored_data(url)
        columns.append((stored_node, worker))
        assert resource == "tasks" and data[0] == PACKED_V2
        assert _all_rows(postgres) == _all_rows(sqlite)
    assert columns[0] == (None, None)
    assert columns[1][0] == postgres_store._indexed(node) != node and columns[1][1] is None
    assert columns[2][0] == columns[1][0] and columns[2][1]
    (row,) = postgres.select("tasks").rows
    assert row["node_id"] == node and row["worker_id"] == columns[2][1] and row["state"] == "FAILED"
    assert postgres.select("tasks", [ColumnFilter("node", True, node)]).rows == [row]
    assert postgres.counts("tasks", "node") == sqlite.counts("tasks", "node") == [(node, 1)]
    postgres.close()
    sqlite.close()


def _cased(prepared: Prepared, case: Callable[[str], str]) -> Prepared:
    """An event read by `prepare` with its entity id in another case."""
    assert prepared.key is not None and prepared.piece is not None
    resource, entity_id, attempt, session = prepared.key
    return prepared._replace(
        key=(resource, case(entity_id), attempt, session),
        piece=prepared.piece._replace(entity_id=case(entity_id)),
    )


def test_an_entity_id_in_another_case_folds_onto_its_row_as_on_sqlite(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A task's id upper-case in one POST and lower-case in the next ones: one row (entity_id keeps
    a hex id as its bytes since step 13, whatever its case; each fold packs with its batch's
    case), PACKED_V2 with a dictionary that reads the id case-blind, so the next fold and every read
    of the row work, with the answers SQLite gives. The other way round (lower-case first, then
    upper-case) folds to the same row on PostgreSQL (SQLite's fold finds no row for a hex id that
    is not lower-case: its stored ids are read back as lower-case hex)."""
    postgres = [PostgresStore(postgres_server.new_database(f"entity_case_{n}")) for n in range(2)]
    sqlite = EventStore(tmp_path / "reference.sqlite3")
    definition, early, late = (prepare(event) for event in _task_pieces())
    upper, lower = str.upper, str.lower
    orders = [(upper, lower, lower), (lower, upper, upper)]
    for store, cases in zip(postgres, orders, strict=True):
        for prepared, case in zip((definition, early, late), cases, strict=True):
            for target in (store, sqlite) if store is postgres[0] else (store,):
                assert target.ingest_prepared([_cased(prepared, case)], now=1000.0).stored == 1
        ((_, _, entity_id, _, worker, data),) = _stored_data(store.url)
        assert entity_id == entity_id.lower() != entity_id.upper() and worker and data[0] == PACKED_V2
        assert _needs_its_ids(data, [entity_id, None, None])  # read with its entity id (node: indexed)
    assert _all_rows(postgres[0]) == _all_rows(sqlite)
    task = entity_id.lower()
    for text in (task, task.upper()):
        assert postgres[0].entity_rows("tasks", text) == sqlite.entity_rows("tasks", text) != []
    (row,) = postgres[1].select("tasks").rows
    assert row["task_id"] == task.upper()
    assert dict(row, task_id=task) == postgres[0].select("tasks").rows[0]
    for store in [*postgres, sqlite]:
        store.close()


def _written_by_step_9(url: str, events: list[dict[str, Any]], now: float) -> None:
    """`events`' rows as the code of schema step 9 wrote them, into a database at that step: each
    row's JSON PACKED_V1 (no ids), then its text values in their stored form (`_enc`, a long
    indexed value `_indexed`)."""
    pieces, _ = group_pieces([prepare(event) for event in events])
    keys = list(pieces)
    rows, _ = fold_keys(
        keys, pieces, {k: StoredRow({}, []) for k in keys}, now, {}, [], lambda _: StoredRow({}, [])
    )
    at = postgres_store._DATA_AT
    columns = postgres_store._ROW_COLUMNS
    with psycopg.connect(url, autocommit=True) as db:
        for row in rows:
            packed = (*row[:at], pack_row(row[at]), HASHED + row[at + 1], *row[at + 2 :])
            params = [
                postgres_store._indexed(postgres_store._enc(v))
                if i in postgres_store._INDEXED_AT
                else postgres_store._enc(v)
                for i, v in enumerate(packed)
            ]
            db.execute(
                f"INSERT INTO state_rows({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                params,
            )


def test_rows_packed_v1_before_step_10_are_read_and_folded_onto(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at schema step 9 holding PACKED_V1 rows (one with a node id in its indexed form):
    step 10 rewrites nothing, they read as they are, an event folded before is a duplicate, and
    later events fold onto them (written PACKED_V2 then): the rows SQLite makes of the same events."""
    url = postgres_server.new_database("v1_rows")
    with monkeypatch.context() as patched:
        patched.setattr(postgres_store, "MIGRATIONS", postgres_store.MIGRATIONS[:9])
        patched.setattr(postgres_store, "SCHEMA_VERSION", 9)
        PostgresStore(url).close()
    definition, early, late = _task_pieces()
    task_events = {definition["eventId"], early["eventId"], late["eventId"]}
    first = [e for e in EVENTS if e["eventType"].endswith("DEFINITION_EVENT")] + [early]
    later = [e for e in EVENTS if not e["eventType"].endswith("DEFINITION_EVENT")]
    _written_by_step_9(url, first, 1000.0)
    before = _stored_data(url)
    assert len(before) == 10 and {data[0] for *_, data in before} == {PACKED_V1}
    assert any(postgres_store._is_indexed_form(node) for *_, node, _, _ in before)
    store = PostgresStore(url)
    with psycopg.connect(url) as db:
        assert db.execute("SELECT MAX(version) FROM schema_migrations").fetchone() == (SCHEMA_VERSION,)
    assert _stored_data(url) == before  # nothing rewritten (step 11 changes the session column only)
    reference = EventStore(tmp_path / "reference.sqlite3")
    reference.ingest(copy.deepcopy(first), now=1000.0)
    assert _all_rows(store) == _all_rows(reference)
    again = store.ingest(copy.deepcopy(first), now=1500.0)
    assert (again.stored, again.duplicates) == (0, len(first))
    later = [e if e["eventId"] not in task_events else late for e in later]
    for batch in (later[: len(later) // 2], later[len(later) // 2 :]):
        assert store.ingest(copy.deepcopy(batch), now=2000.0) == reference.ingest(
            copy.deepcopy(batch), now=2000.0
        )
    assert _all_rows(store) == _all_rows(reference)
    after = _stored_data(url)
    assert len(after) == 17
    versions = {row[:3]: row[-1][0] for row in after}  # by resource, attempt, entity id
    old = {row[:3]: row[-1] for row in before}
    assert {versions[key] for key in old} == {PACKED_V1, PACKED_V2}  # updated rows are V2 now
    assert all(versions[key] == PACKED_V2 for key in versions if key not in old)
    assert all(row[-1] == old[row[:3]] for row in after if row[:3] in old and row[-1][0] == PACKED_V1)
    row = next(r for a, _, r in store.entity_rows("tasks", base64.b64decode(_TASK).hex()) if a == 0)
    assert row["node_id"] == base64.b64decode(_LONG_NODE).hex() and row["state"] == "FAILED"
    store.close()
    reference.close()


def test_a_row_with_an_id_that_is_not_text_is_packed_v1_and_reads_back(
    postgres_server: PostgresServer,
) -> None:
    """A row whose worker is a number (written alone: PostgreSQL stores it as its text, here hex
    digits a reader would add to a PACKED_V2 dictionary, which the number's packing did not) is
    packed PACKED_V1 and reads back; the same row with a text worker is PACKED_V2."""
    url = postgres_server.new_database("odd_ids")
    store = PostgresStore(url)
    task = "ab" * 24
    indexed = dict.fromkeys(INDEXED_COLUMNS)
    rows = []
    for n, worker in enumerate((1234, "cd" * 28)):
        entity = f"{n:02x}{task[2:]}"
        data = json.dumps({"task_id": entity, "worker_id": worker}).encode()
        values = {**indexed, "worker": worker}
        rows.append(("tasks", entity, 0, "s", 1000.0, data, b"", *(values[c] for c in INDEXED_COLUMNS)))
    with store._transaction() as db:
        sessions, _ = postgres_store._held_sessions(db, ["s"], 1000.0)
        assert (
            store._write_rows(
                db,
                postgres_store._INSERT_ROWS,
                postgres_store._INSERT_ROW,
                [postgres_store._stored(row, sessions) for row in rows],
            )
            is None
        )
    stored = _stored_data(url)
    assert [(entity, worker, data[0]) for _, _, entity, _, worker, data in stored] == [
        ("00" + task[2:], "1234", PACKED_V1),
        ("01" + task[2:], "cd" * 28, PACKED_V2),
    ]
    assert sorted(store.select("tasks").rows, key=lambda row: row["task_id"]) == [
        json.loads(row[5]) for row in rows
    ]
    store.close()


def _written_by_step_10(url: str, events: list[dict[str, Any]], now: float, recorded: set[str]) -> None:
    """`events`' rows as the code of schema step 10 wrote them, into a database at that step: each
    row PACKED_V2 with its text values in their stored form and its session as its name; the raw
    events kept, and a record in `sessions` for the sessions in `recorded` only (step 11 records
    any other a row names)."""
    pieces, _ = group_pieces([prepare(event) for event in events])
    keys = list(pieces)
    rows, _ = fold_keys(
        keys, pieces, {k: StoredRow({}, []) for k in keys}, now, {}, [], lambda _: StoredRow({}, [])
    )
    names = {key[3]: key[3] for key in keys}  # a session "id" that is its name, as step 10 kept it
    columns = postgres_store._ROW_COLUMNS
    texts, _ = raw_events.event_texts(events)
    with psycopg.connect(url, autocommit=True) as db:
        for row in rows:
            stored = list(postgres_store._stored(row, names))
            for i in postgres_store._CODED_AT:  # no codes before step 12
                stored[i] = postgres_store._uncoded(stored[i])
            for i in postgres_store._ROW_IDS_AT:  # its ids as text, as before step 13
                stored[i] = _id_text(stored[i])
            db.execute(
                f"INSERT INTO state_rows({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                stored,
            )
        for session, parts in texts.items():
            db.execute(
                "INSERT INTO raw_events(session, received, data) VALUES (%s, %s, %s)",
                (session, now, raw_events.compress(parts)),
            )
            if session in recorded:
                db.execute("INSERT INTO sessions VALUES (%s, %s, %s)", (session, now, now))


def _sorted(rows: list[Any]) -> list[Any]:
    """Rows in one order (those of one `updated` come in the order stored)."""
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def _session_ids(url: str) -> tuple[str, dict[int, str], list[Any]]:
    """state_rows.session's type, the sessions' ids, and each row's session value."""
    with psycopg.connect(url) as db:
        found = db.execute(
            "SELECT data_type FROM information_schema.columns"
            " WHERE table_name = 'state_rows' AND column_name = 'session'"
        ).fetchone()
        assert found is not None
        ids = (
            {int(number): name for number, name in db.execute("SELECT id, name FROM sessions")}
            if found[0] == "integer"
            else {}
        )
        values = [value for (value,) in db.execute("SELECT session FROM state_rows")]
    return str(found[0]), ids, values


def test_a_database_at_step_10_gets_session_ids_with_the_same_answers(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at schema step 10 holding two sessions' rows (their session as its name, one
    session without a record): read-only, it answers by the names; step 11 records the session
    missing one and keeps each row's session as its record's id, with every answer as a store
    written since gives (rows, counts, sessions, filters and reads by session, duplicates), and
    the rows written later hold ids too."""
    events = [*_session_copy(EVENTS, 1), *_session_copy(EVENTS, 2)]
    url = postgres_server.new_database("before_session_ids")
    with monkeypatch.context() as patched:
        patched.setattr(postgres_store, "MIGRATIONS", postgres_store.MIGRATIONS[:10])
        patched.setattr(postgres_store, "SCHEMA_VERSION", 10)
        PostgresStore(url).close()
    _written_by_step_10(url, events, 1000.0, {"session_1"})
    assert _session_ids(url)[0] == "text"
    fresh = PostgresStore(postgres_server.new_database("session_ids_from_start"))
    fresh.ingest(copy.deepcopy(events), now=1000.0)
    old = open_store(url, read_only=True)  # before step 11: the rows' sessions are names
    assert old.sessions() == ["session_1"] and old.total("tasks", "session_2") == fresh.total(
        "tasks", "session_2"
    )
    assert _sorted(old.select("tasks", session="session_2").rows) == _sorted(
        fresh.select("tasks", session="session_2").rows
    )
    old.close()

    migrated = PostgresStore(url)
    kind, ids, values = _session_ids(url)
    assert kind == "integer" and sorted(ids.values()) == ["session_1", "session_2"]
    assert set(values) == set(ids) and len(values) == 2 * 17
    assert _all_rows(migrated) == _all_rows(fresh)
    assert migrated.sessions() == fresh.sessions() == ["session_1", "session_2"]
    assert migrated.session_list() == fresh.session_list()
    assert migrated.session_evidence(2000.0) == fresh.session_evidence(2000.0)
    for session in ("session_1", "session_2"):
        for store in (migrated, fresh):
            store._totals.clear()
        assert migrated.total("tasks", session) == fresh.total("tasks", session) > 0
        assert migrated.counts("tasks", "state", session=session) == fresh.counts(
            "tasks", "state", session=session
        )
        assert _sorted(migrated.select("tasks", session=session).rows) == _sorted(
            fresh.select("tasks", session=session).rows
        )
        by_filter = [ColumnFilter("session", True, session)]
        assert (
            _sorted(migrated.select("tasks", by_filter).rows)
            == _sorted(fresh.select("tasks", by_filter).rows)
            != []
        )
        not_it = [ColumnFilter("session", False, session)]
        assert migrated.select("tasks", not_it).total == fresh.select("tasks", not_it).total > 0
    task = fresh.select("tasks", limit=1).rows[0]["task_id"]
    assert migrated.entity_rows("tasks", task) == fresh.entity_rows("tasks", task) != []
    assert {session for _, session, _ in migrated.entity_rows("tasks", task)} == {"session_1", "session_2"}
    assert migrated.entity_rows("tasks", task, "session_2") == fresh.entity_rows("tasks", task, "session_2")
    for attempt, session, _ in fresh.entity_rows("tasks", task):
        assert migrated.new_fields("tasks", task, attempt, session) == fresh.new_fields(
            "tasks", task, attempt, session
        )
    again = migrated.ingest(copy.deepcopy(events), now=2000.0)
    assert (again.stored, again.duplicates) == (0, len(events))
    assert fresh.ingest(copy.deepcopy(events), now=2000.0) == again
    later = _session_copy(EVENTS, 3)
    assert migrated.ingest(copy.deepcopy(later), now=3000.0) == fresh.ingest(copy.deepcopy(later), now=3000.0)
    assert _all_rows(migrated) == _all_rows(fresh)
    assert migrated.session_list() == fresh.session_list()
    kind, ids, values = _session_ids(url)
    assert kind == "integer" and sorted(ids.values()) == ["session_1", "session_2", "session_3"]
    assert sorted(values) == sorted(number for number in ids for _ in range(17))
    for store in (migrated, fresh):
        store.close()


def _waiting_for_lock(admin: psycopg.Connection[Any], name: str) -> bool:
    """Whether the connection named `name` waits for a lock."""
    return bool(
        admin.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
            (name,),
        ).fetchone()
    )


def test_a_session_dropped_while_another_store_writes_it_leaves_no_row_without_its_record(
    postgres_server: PostgresServer,
) -> None:
    """A writer holds its batch's session record (read, not yet committed) while another store
    drops that session: the drop waits for the writer's commit, then deletes its rows too, so no
    row is left naming a deleted record (read with no session name); a batch written after the
    drop records the session anew, under another id."""
    url = postgres_server.new_database("drop_while_writing")
    events = _session_copy(EVENTS, 1)
    first_key = prepare(events[0]).key
    first = [e for e in events if prepare(e).key == first_key]
    rest = [e for e in events if prepare(e).key != first_key]
    holding, go = threading.Event(), threading.Event()

    class Paused(PostgresStore):
        """Waits, in its next batch's transaction, with the session held and its rows not written."""

        pause = False

        def _fold(self, *args: Any, **kwargs: Any) -> int:
            if self.pause:
                holding.set()
                assert go.wait(60)
            return super()._fold(*args, **kwargs)

    writer = Paused(url)
    dropper = PostgresStore(url + "?application_name=dropper")
    assert writer.ingest(copy.deepcopy(first), now=1000.0).stored == len(first)
    with psycopg.connect(url) as db:
        ((before,),) = db.execute("SELECT id FROM sessions").fetchall()
    writer.pause = True
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def run(name: str, call: Callable[[], Any]) -> None:
        try:
            results[name] = call()
        except BaseException as exc:
            errors.append(exc)

    threads = {
        "write": threading.Thread(target=run, args=("write", lambda: writer.ingest(copy.deepcopy(rest)))),
        "drop": threading.Thread(target=run, args=("drop", lambda: dropper.drop_session("session_1"))),
    }
    threads["write"].start()
    assert holding.wait(60)
    threads["drop"].start()
    with psycopg.connect(url, autocommit=True) as admin:
        _wait_for(lambda: _waiting_for_lock(admin, "dropper"))  # for the writer's session record
    go.set()
    for thread in threads.values():
        thread.join(timeout=60)
    assert errors == []
    writer.pause = False
    assert results["write"].stored == len(rest)
    assert results["drop"] == 17  # the first batch's row and the writer's rows, committed before
    with psycopg.connect(url) as db:
        assert db.execute("SELECT COUNT(*) FROM state_rows").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM sessions").fetchone() == (0,)
    assert writer.sessions() == dropper.sessions() == [] and writer.session_list() == []
    assert writer.ingest(copy.deepcopy(events), now=2000.0).stored == len(events)
    _, ids, values = _session_ids(url)
    assert list(ids.values()) == ["session_1"] and before not in ids and set(values) == set(ids)
    assert [s["name"] for s in dropper.session_list()] == ["session_1"]
    assert dropper.session_list()[0]["tasks"] == dropper.total("tasks") > 0
    task = dropper.select("tasks", limit=1).rows[0]["task_id"]
    assert {session for _, session, _ in dropper.entity_rows("tasks", task)} == {"session_1"}
    for store in (writer, dropper):
        store.close()


def test_a_session_written_without_pause_by_three_stores_is_dropped_and_none_deadlocks(
    postgres_server: PostgresServer,
) -> None:
    """Three stores (three serves) write one session batch after batch, their transactions
    overlapping, while a fourth drops it. A row lock is not queued fairly: each writer's shared
    hold on the session's record went ahead of the drop's (it waited as long as they wrote), and a
    chunk's deletes deadlocked with a writer's rows (the drop failed). The drop ends while they
    write, and no one fails."""
    url = postgres_server.new_database("drop_under_writers")
    open_store(url).close()
    stop = threading.Event()
    errors: list[BaseException] = []
    batches = [0, 0, 0]
    dropped: list[int] = []

    def write(i: int) -> None:
        store = PostgresStore(url)
        try:
            while not stop.is_set():
                batch = [
                    dict(e, sessionName="session_1", eventId=f"{i}-{batches[i]}-{k}-{e['eventId']}")
                    for k in range(20)
                    for e in EVENTS[:40]
                ]
                store.ingest(batch)
                batches[i] += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    writers = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for thread in writers:
        thread.start()
    dropper = PostgresStore(url)
    try:
        _wait_for(lambda: min(batches) >= 3)
        drop = threading.Thread(target=lambda: dropped.append(dropper.drop_session("session_1")))
        drop.start()
        drop.join(timeout=120)  # a bound on waiting, not a speed: before, it waited as long as they wrote
        still_writing = all(thread.is_alive() for thread in writers) and not errors
        stop.set()
        for thread in writers:
            thread.join(timeout=60)
        drop.join(timeout=60)
        assert errors == [], errors
        assert dropped and dropped[0] > 0 and still_writing, (dropped, batches)
        # the writers went on after the drop: the session recorded anew, its rows under the new record
        assert dropper.sessions() == ["session_1"] and dropper.total("tasks") > 0
    finally:
        stop.set()
        dropper.close()


def _answers(store: Any) -> list[Any]:
    """What the state API and the wiring checks ask of states and kinds, answered by `store`."""
    filters = [
        [ColumnFilter("state", True, "FINISHED")],
        [ColumnFilter("state", True, "finished")],  # the column compares case-blind
        [ColumnFilter("state", False, "FINISHED")],
        [ColumnFilter("state", False, "Failed"), ColumnFilter("kind", False, "DRIVER_TASK")],
        [ColumnFilter("kind", True, "actor_task")],
        [ColumnFilter("kind", True, "worker")],
        [ColumnFilter("kind", False, "Driver")],
        [ColumnFilter("state", True, "NIL")],
        [ColumnFilter("state", True, "")],
        [ColumnFilter("state", True, "NOT_A_STATE")],
    ]
    found: list[Any] = []
    for resource in ("tasks", "actors", "jobs", "nodes", "workers"):
        for f in filters:
            page = store.select(resource, f, limit=1000)
            found.append((resource, page.total, page.matched, sorted(map(str, page.rows))))
        for descending in (False, True):
            rows = store.select(resource, order="state", descending=descending, limit=1000).rows
            found.append([row.get("state") for row in rows])
        found.append(sorted(store.counts(resource, "state", "kind"), key=str))
    found.append(store.session_evidence(1e12))
    return found


def test_states_and_kinds_are_kept_as_codes_with_the_same_answers(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A state or kind that is one of Ray's commonest enum names (every kind of the captures: task,
    worker and job types) is kept as a one-character code (step 12), the kind as plain text:
    filters (either case, `!=`), sorts, counts and the wiring checks answer as on SQLite.
    A value from outside that is itself a code's character is kept escaped: it reads back as
    itself, and neither matches nor is matched by the name of that code."""
    url = postgres_server.new_database("codes")
    postgres = PostgresStore(url)
    sqlite = EventStore(tmp_path / "codes.sqlite3")
    for first in range(0, len(EVENTS), 4):
        for store in (postgres, sqlite):
            store.ingest(copy.deepcopy(EVENTS[first : first + 4]), now=1000.0 + first)
    with psycopg.connect(url) as db:
        lengths = db.execute(
            "SELECT DISTINCT octet_length(state::text), octet_length(kind::text) FROM state_rows"
            " WHERE resource = 'tasks'"
        ).fetchall()
    assert lengths == [(1, 1)]
    with psycopg.connect(url) as db:  # text, not citext: rows_by_kind's entries are deduplicated
        kinds = db.execute(
            "SELECT DISTINCT pg_typeof(kind)::text, octet_length(kind) FROM state_rows WHERE kind IS NOT NULL"
        ).fetchall()
    assert kinds == [("text", 1)]
    assert _answers(postgres) == _answers(sqlite)
    finished = postgres.select("tasks", [ColumnFilter("state", True, "FINISHED")], limit=1000).rows
    assert finished and all(row["state"] == "FINISHED" for row in finished)

    # a row whose state is FINISHED's code character, written as the fold writes a row
    code = postgres_store._CODES["FINISHED"]
    pieces, _ = group_pieces([prepare(event) for event in EVENTS[:1]])
    (row,), _ = fold_keys(list(pieces), pieces, {k: StoredRow({}, []) for k in pieces}, 2000.0, {}, [], None)
    odd = list(row)
    odd[postgres_store._ROW_COLUMNS.index("entity_id")] = "odd-entity"
    odd[postgres_store._ROW_COLUMNS.index("state")] = code
    stored = postgres_store._stored(tuple(odd), {row[3]: 1})
    assert stored[postgres_store._ROW_COLUMNS.index("state")] == postgres_store._ESC + code
    columns = postgres_store._ROW_COLUMNS
    with psycopg.connect(url) as db:
        db.execute(
            f"INSERT INTO state_rows({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
            stored,
        )
    resource = row[0]
    assert (code, 1) in postgres.counts(resource, "state")
    matched = postgres.select(resource, [ColumnFilter("state", True, code)], limit=1000)
    assert matched.matched == 1
    named = postgres.select(resource, [ColumnFilter("state", True, "FINISHED")], limit=1000).rows
    assert named == postgres.select(resource, [ColumnFilter("state", True, "finished")], limit=1000).rows
    assert len(named) == (len(finished) if resource == "tasks" else 0)
    postgres.close()
    sqlite.close()


# -- ids as bytes (schema step 13) ---------------------------------------------------------------

_LONG_TEXT_NODE = "Node-" + "long name " * 19 + "end"  # 200 characters, not hex: kept `_indexed`
# (entity id, node, worker) of rows written directly: texts in any case, and ids a form without
# its escape would confuse with them (the id 0x00 0x61 and the text "a"; an empty worker, and none).
_ODD_IDS = [
    ("Task-Alpha", "Node-Name", "Worker X"),
    ("0061", _LONG_TEXT_NODE, "00" + "ab" * 27),
    ("a", "0061", ""),
    ("b0" * 24, "A", None),
]


def _odd_rows(session: str) -> list[tuple[Any, ...]]:
    """The upsert rows (as the fold gives them) of `_ODD_IDS`' tasks."""
    rows = []
    for n, (entity, node, worker) in enumerate(_ODD_IDS):
        fields = {
            "task_id": entity,
            "node_id": node,
            "worker_id": worker,
            "name": f"odd {n}",
            "state": "RUNNING",
        }
        data = json.dumps({k: v for k, v in fields.items() if v is not None}).encode()
        values = {**dict.fromkeys(INDEXED_COLUMNS), "node": node, "worker": worker, "name": f"odd {n}"}
        values["state"] = "RUNNING"
        rows.append(
            ("tasks", entity, 0, session, 1000.0 + n, data, b"", *(values[c] for c in INDEXED_COLUMNS))
        )
    return rows


def _write_odd_rows(store: PostgresStore, session: str) -> None:
    with store._transaction() as db:
        sessions, _ = postgres_store._held_sessions(db, [session], 1000.0)
        stored = [postgres_store._stored(row, sessions) for row in _odd_rows(session)]
        assert store._write_rows(db, postgres_store._INSERT_ROWS, postgres_store._INSERT_ROW, stored) is None


def _ids_found(store: Any, filters: list[ColumnFilter], search: str = "") -> list[str]:
    """The task ids of the rows `filters` and `search` find, sorted."""
    return sorted(row["task_id"] for row in store.select("tasks", filters, search=search, limit=1000).rows)


def _id_columns(url: str) -> dict[str, str]:
    with psycopg.connect(url) as db:
        return dict(
            db.execute(
                "SELECT column_name, udt_name FROM information_schema.columns WHERE table_name = 'state_rows'"
                " AND column_name IN ('entity_id', 'node', 'worker')"
            ).fetchall()
        )


def test_a_rows_hex_ids_are_kept_as_their_bytes_and_found_in_any_case(
    postgres_server: PostgresServer,
) -> None:
    """Since step 13 entity_id, node and worker are bytea: a task's hex ids are stored as their
    bytes (24, 28 and 28), which its JSON names in hex; filters given them upper-case find the
    rows the lower-case ones find (and `!=` the others), as does a read of the entity's rows."""
    url = postgres_server.new_database("ids_as_bytes")
    store = PostgresStore(url)
    store.ingest(copy.deepcopy(EVENTS), now=1000.0)
    assert _id_columns(url) == dict.fromkeys(("entity_id", "node", "worker"), "bytea")
    with psycopg.connect(url) as db:
        found = db.execute(
            "SELECT pg_typeof(entity_id)::text, octet_length(entity_id), octet_length(node),"
            " octet_length(worker), entity_id, node, worker FROM state_rows"
            " WHERE resource = 'tasks' AND worker IS NOT NULL ORDER BY entity_id"
        ).fetchall()
    assert found and {row[:4] for row in found} == {("bytea", 24, 28, 28)}
    total = store.total("tasks")
    for _, _, _, _, entity, node, worker in found:
        task, node_id, worker_id = entity.hex(), node.hex(), worker.hex()
        rows = [row for _, _, row in store.entity_rows("tasks", task.upper())]
        assert any(row["node_id"] == node_id and row["worker_id"] == worker_id for row in rows)
        assert rows == [row for _, _, row in store.entity_rows("tasks", task)]
        for column, value in (("entity_id", task), ("node", node_id), ("worker", worker_id)):
            lower = store.select("tasks", [ColumnFilter(column, True, value)], limit=1000)
            upper = store.select("tasks", [ColumnFilter(column, True, value.upper())], limit=1000)
            assert upper == lower and lower.matched >= 1 and task in {r["task_id"] for r in lower.rows}
            other = store.select("tasks", [ColumnFilter(column, False, value.upper())], limit=1000)
            assert other.matched == total - lower.matched
    nodes = store.counts("tasks", "node")
    assert {node for node, _ in nodes} >= {node.hex() for *_, node, _ in found}
    store.close()


def test_texts_in_id_columns_round_trip_apart_from_every_id(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """Entity ids, nodes and workers that are not hex (a name, a 200-character node kept as its
    indexed form, an empty worker) are kept in a form no id's bytes take: the id 0x00 0x61 and the
    text "a" are two rows, each found by its own filter in any case (the texts compared ignoring
    case, as citext and SQLite's NOCASE do), by a search of its text, by `!=` and by a filter for
    no value; counts read them back as given, and a text entity id folds case-blind."""
    url = postgres_server.new_database("text_ids")
    store = PostgresStore(url)
    _write_odd_rows(store, "s")
    with psycopg.connect(url) as db:
        stored = dict(db.execute("SELECT entity_id, node FROM state_rows").fetchall())
    assert stored == {
        b"\x00task-alpha": b"\x00node-name",
        b"\x00\xffa": postgres_store._TEXT_FORM + postgres_store._indexed(_LONG_TEXT_NODE.lower()).encode(),
        b"\x00a": b"\x00\xffa",
        bytes.fromhex("b0" * 24): b"\x00a",
    }
    written = sorted((json.loads(row[5]) for row in _odd_rows("s")), key=lambda row: row["task_id"])
    assert sorted(store.select("tasks").rows, key=lambda row: row["task_id"]) == written
    task_b0 = "b0" * 24
    cases: list[tuple[str, bool, str, list[str]]] = [
        ("entity_id", True, "TASK-ALPHA", ["Task-Alpha"]),
        ("entity_id", True, "0061", ["0061"]),
        ("entity_id", True, "A", ["a"]),
        ("entity_id", True, task_b0.upper(), [task_b0]),
        ("entity_id", False, "a", sorted(["Task-Alpha", "0061", task_b0])),
        ("node", True, "NODE-NAME", ["Task-Alpha"]),
        ("node", True, _LONG_TEXT_NODE.upper(), ["0061"]),
        ("node", True, "0061", ["a"]),
        ("node", True, "a", [task_b0]),
        ("node", False, "a", sorted(["Task-Alpha", "0061", "a"])),
        ("worker", True, "worker x", ["Task-Alpha"]),
        ("worker", True, "00" + "AB" * 27, ["0061"]),
        ("worker", True, "none", sorted(["a", task_b0])),
        ("worker", False, "", sorted(["Task-Alpha", "0061"])),
    ]
    for column, equal, value, expected in cases:
        assert _ids_found(store, [ColumnFilter(column, equal, value)]) == expected, (column, equal, value)
    for search, expected in (("ASK-al", ["Task-Alpha"]), ("0061", ["0061"]), ("B0B0", [task_b0])):
        assert _ids_found(store, [], search) == expected, search
    by_node = sorted(store.counts("tasks", "node"))
    assert by_node == sorted([("Node-Name", 1), (_LONG_TEXT_NODE, 1), ("0061", 1), ("A", 1)])
    by_worker = sorted(store.counts("tasks", "worker"), key=lambda found: str(found[0]))
    assert by_worker == [("", 1), ("00" + "ab" * 27, 1), (None, 1), ("Worker X", 1)]
    assert [row["task_id"] for _, _, row in store.entity_rows("tasks", "TASK-alpha")] == ["Task-Alpha"]
    # a text entity id folded in one case, then in another: one row, read back by each fold
    definition, early, late = (prepare(event) for event in _task_pieces())
    for prepared, entity in ((definition, "Task-Beta"), (early, "TASK-BETA"), (late, "task-beta")):
        assert prepared.key is not None and prepared.piece is not None
        renamed = prepared._replace(
            key=(prepared.key[0], entity, *prepared.key[2:]), piece=prepared.piece._replace(entity_id=entity)
        )
        assert store.ingest_prepared([renamed], now=2000.0).stored == 1
    (row,) = store.select("tasks", [ColumnFilter("entity_id", True, "TASK-beta")]).rows
    assert row["task_id"] == "task-beta" and row["name"] == "flaky" and row["state"] == "FAILED"
    store.close()


def _written_by_step_12(url: str, rows: list[tuple[Any, ...]], session: str) -> None:
    """`rows` (upserts as the fold gives them) as the code of schema step 12 wrote them, into a
    database at that step: their session as its record's id, their ids as text in their stored
    form (`_enc`, a long node `_indexed`); every third row PACKED_V1 (as written before step 10),
    the others PACKED_V2, and every other row's entity id upper-case (citext keeps the case first
    inserted; the dictionary reads it case-blind)."""
    columns = postgres_store._ROW_COLUMNS
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("INSERT INTO sessions(name, first_seen, last_seen) VALUES (%s, 1000, 1000)", (session,))
        ((number,),) = db.execute("SELECT id FROM sessions WHERE name = %s", (session,)).fetchall()
        for n, row in enumerate(rows):
            values = list(postgres_store._stored(row, {session: number}))
            for i in postgres_store._ROW_IDS_AT:
                value = row[i]
                if isinstance(value, str):
                    value = postgres_store._enc(value)
                    value = postgres_store._indexed(value) if i in postgres_store._INDEXED_AT else value
                values[i] = value.upper() if n % 2 and i == 1 else value
            if n % 3 == 0:
                values[postgres_store._DATA_AT] = pack_row(row[postgres_store._DATA_AT])
            db.execute(
                f"INSERT INTO state_rows({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                values,
            )


def _id_answers(store: Any, tasks: list[dict[str, Any]]) -> list[Any]:
    """What the reads of the id columns answer: every row, counts, and per task filters by its
    ids (in either case, `=` and `!=`), searches and its entity's rows."""
    out: list[Any] = [_all_rows(store)]
    out += [sorted(store.counts(r, c), key=str) for r in RESOURCES for c in ("node", "worker", "state")]
    for task in tasks:
        entity = task["task_id"]
        out.append(
            sorted((a, json.dumps(row, sort_keys=True)) for a, _, row in store.entity_rows("tasks", entity))
        )
        out.append(_ids_found(store, [], entity[1:7].upper()))
        for column, field in (("entity_id", "task_id"), ("node", "node_id"), ("worker", "worker_id")):
            for value in {task.get(field) or "", (task.get(field) or "").upper()}:
                for equal in (True, False):
                    out.append(
                        (column, value, equal, _ids_found(store, [ColumnFilter(column, equal, value)]))
                    )
    return out


def test_a_database_at_step_12_gets_ids_as_bytes_with_the_same_answers(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at schema step 12 holding rows with hex ids (some upper-case) and texts in their
    id columns, PACKED_V1 and PACKED_V2 rows: step 13 converts the columns in place (bytea; each
    row's data untouched) and every read answers as before (read-only at step 12); a version of
    step 12 then refuses the database; an event folded before is a duplicate, and later ones fold
    onto the rows."""
    url = postgres_server.new_database("before_ids_as_bytes")
    with monkeypatch.context() as patched:
        patched.setattr(postgres_store, "MIGRATIONS", postgres_store.MIGRATIONS[:12])
        patched.setattr(postgres_store, "SCHEMA_VERSION", 12)
        PostgresStore(url).close()
    session = prepare(EVENTS[0]).key[3]  # type: ignore[index]
    pieces, _ = group_pieces([prepare(event) for event in EVENTS])
    keys = list(pieces)
    rows, _ = fold_keys(
        keys, pieces, {k: StoredRow({}, []) for k in keys}, 1000.0, {}, [], lambda _: StoredRow({}, [])
    )
    rows += _odd_rows(session)
    _written_by_step_12(url, rows, session)
    with psycopg.connect(url) as db:
        data = sorted(bytes(d) for (d,) in db.execute("SELECT data FROM state_rows"))
    assert {d[0] for d in data} == {PACKED_V1, PACKED_V2} and len(data) == 17 + len(_ODD_IDS)
    old = open_store(url, read_only=True)
    assert old.dialect is PostgresStore._text_ids_dialect
    tasks = old.select("tasks", limit=1000).rows
    before = _id_answers(old, tasks)
    old.close()
    assert _id_columns(url) == dict.fromkeys(("entity_id", "node", "worker"), "citext")

    migrated = PostgresStore(url)
    assert _id_columns(url) == dict.fromkeys(("entity_id", "node", "worker"), "bytea")
    with psycopg.connect(url) as db:
        assert sorted(bytes(d) for (d,) in db.execute("SELECT data FROM state_rows")) == data
        assert db.execute("SELECT MAX(version) FROM schema_migrations").fetchone() == (13,)
    assert _id_answers(migrated, tasks) == before
    with monkeypatch.context() as patched:  # a version of step 12 refuses it
        patched.setattr(postgres_store, "MIGRATIONS", postgres_store.MIGRATIONS[:12])
        patched.setattr(postgres_store, "SCHEMA_VERSION", 12)
        with pytest.raises(StoreError, match="newer than this version"):
            PostgresStore(url)
    again = migrated.ingest(copy.deepcopy(EVENTS), now=2000.0)
    assert (again.stored, again.duplicates) == (0, len(EVENTS))
    fresh = PostgresStore(postgres_server.new_database("ids_as_bytes_from_start"))
    fresh.ingest(copy.deepcopy(EVENTS), now=1000.0)
    _write_odd_rows(fresh, session)
    later = _session_copy(EVENTS, 3)
    for store in (migrated, fresh):
        store.ingest(copy.deepcopy(later), now=3000.0)
    assert _id_answers(migrated, tasks) == _id_answers(fresh, tasks)
    for store in (migrated, fresh):
        store.close()
