"""No poison event (issue 43): an event whose fold fails is set aside alone (kept whole, counted,
logged once, listed by `store refused`, folded again by `store refold-refused`) and every other
event is stored, on SQLite and on a real PostgreSQL, through real `serve` processes; long indexed
text is stored whole and found by filter; a spool replayed at start does not stick; /readyz turns
false while folding is stuck, naming why and never where the store is.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import sqlite3
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import requests
from google.protobuf import json_format
from helpers.agg_procs import FIXTURE, CliServer, clean_env, start, wait_until
from helpers.otlp_logs import emit_ray_events
from helpers.postgres import PostgresServer, serve_store_args
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from psycopg.conninfo import conninfo_to_dict

from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.store import postgres_store
from ray_otel_events.store.backend import ColumnFilter, Retention, SetAside
from ray_otel_events.store.intake_spool import IntakeSpool
from ray_otel_events.store.location import open_store
from ray_otel_events.store.postgres_store import PostgresStore

EVENTS: list[dict[str, Any]] = [item.get("event", item) for item in json.loads(Path(FIXTURE).read_text())]
# Text a btree entry cannot hold (about 2.7 KB on PostgreSQL), and that does not compress below it.
LONG = "".join(random.Random(43).choices(string.ascii_letters + string.digits, k=10_000))


def _definition(event_id: str, **fields: Any) -> dict[str, Any]:
    """A copy of the fixture's first task definition, as another event with `fields` changed."""
    event = copy.deepcopy(next(e for e in EVENTS if e["eventType"] == "TASK_DEFINITION_EVENT"))
    event["eventId"] = event_id
    for name, value in fields.items():
        if name == "sessionName":
            event[name] = value
        else:
            event["taskDefinitionEvent"][name] = value
    return event


def _attempts(events: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """The task attempts (hex id, number) `events` have rows for."""
    found = set()
    for event in events:
        for key in ("taskDefinitionEvent", "actorTaskDefinitionEvent", "taskLifecycleEvent"):
            if key in event:
                piece = event[key]
                found.add((base64.b64decode(piece["taskId"]).hex(), int(piece.get("taskAttempt", 0))))
    return found


def _post(server: CliServer, events: list[Any]) -> None:
    answer = requests.post(f"http://{server.address}/v1/ray-events", json=events, timeout=30)
    assert answer.status_code == 200, answer.text


def _tasks(server: CliServer) -> list[dict[str, Any]]:
    answer = requests.get(
        f"http://{server.address}/api/v0/tasks",
        params={"detail": "true", "limit": "10000", "exclude_driver": "false"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    rows: list[dict[str, Any]] = answer.json()["data"]["result"]["result"]
    return rows


def _store_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "store", *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _set_aside_total(server: CliServer) -> float:
    """The counter of set-aside events (a series without labels)."""
    text = requests.get(f"http://{server.address}/metrics", timeout=30).text
    name = "ray_otel_events_serve_set_aside_events_total"
    return sum(float(line.split()[1]) for line in text.splitlines() if line.split(" ", 1)[0] == name)


def test_a_10kb_task_name_is_stored_whole_and_found_by_filter(
    servers: list[CliServer], store_location: str | Path, tmp_path: Path
) -> None:
    server = start(servers, "serve", *serve_store_args(store_location, tmp_path))
    function = {"pythonFunctionDescriptor": {"functionName": LONG[::-1], "moduleName": "m", "className": ""}}
    long_one = _definition(
        "long-name", taskName=LONG, taskFunc=function, taskId="AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    )
    _post(server, [long_one])
    _post(server, EVENTS)  # answered and stored after it
    rows = _tasks(server)
    named = [row for row in rows if row["name"] == LONG]
    assert len(named) == 1, [len(row["name"]) for row in rows]
    assert named[0]["func_or_class_name"] == LONG[::-1]
    summary = requests.get(f"http://{server.address}/api/v0/tasks/summarize", timeout=30)
    assert summary.status_code == 200, summary.text
    groups = summary.json()["data"]["result"]["result"]["node_id_to_summary"]["cluster"]["summary"]
    assert groups[LONG]["state_counts"] == {"NIL": 1}  # grouped by name, counted in SQL, named whole
    assert {(row["task_id"], row["attempt_number"]) for row in rows} == _attempts([*EVENTS, long_one])
    stats = server.stop()
    assert stats["set_aside"] == 0
    store = open_store(store_location, read_only=True)
    try:
        for value in (LONG, LONG.upper(), LONG.lower()):  # text filters ignore case, as Ray's do
            found = store.select("tasks", [ColumnFilter("name", True, value)]).rows
            assert [row["name"] for row in found] == [LONG], value[:10]
        assert store.select("tasks", [ColumnFilter("name", True, LONG[:-1])]).rows == []
        assert store.select("tasks", [ColumnFilter("name", True, LONG[:-1] + "#")]).rows == []
        others = store.select("tasks", [ColumnFilter("name", False, LONG)]).rows
        assert others and LONG not in {row.get("name") for row in others}
        assert store.refused_events() == []
    finally:
        store.close()


def _poison(store_location: str | Path) -> tuple[list[dict[str, Any]], set[str]]:
    """Events a fold cannot take, and the ids of those set aside on this backend: a job id of the
    wrong type (refused by the fold, on both); on PostgreSQL a 10 KB session name (a key past what
    an index entry holds: the batch's transaction fails), which SQLite stores whole."""
    wrong_type = _definition("wrong-type", jobId=10**30, taskId="AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEB")
    long_session = _definition("long-session", sessionName=LONG, taskId="AgICAgICAgICAgICAgICAgICAgIC")
    on_postgres = not isinstance(store_location, Path)
    return [wrong_type, long_session], {"wrong-type", "long-session"} if on_postgres else {"wrong-type"}


def test_an_event_the_store_cannot_take_is_set_aside_and_the_rest_stored(
    servers: list[CliServer], store_location: str | Path, tmp_path: Path
) -> None:
    """The poison sits in the middle of a batch (and of the events folded with it): it is set aside
    alone, logged once, counted and listed; every other event, before and after it, is stored."""
    server = start(servers, "serve", *serve_store_args(store_location, tmp_path))
    poison, aside = _poison(store_location)
    half = len(EVENTS) // 2
    _post(server, EVENTS[:half] + poison + EVENTS[half:])
    later = [dict(e, sessionName="session_later", eventId="later-" + e["eventId"]) for e in EVENTS]
    _post(server, later)
    rows = _tasks(server)  # the newest session's
    assert {(r["task_id"], r["attempt_number"]) for r in rows} == _attempts(later)
    wait_until(lambda: _set_aside_total(server) == len(aside), "the set-aside count")
    ready = requests.get(f"http://{server.address}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    stats = server.stop()
    assert stats["set_aside"] == len(aside)
    assert stats["events_stored"] == 2 * len(EVENTS) + 2 - len(aside)
    log = server.stderr()
    for event_id in aside:
        assert log.count(f"event {event_id} set aside") == 1, log
    assert "Traceback" not in log
    store = open_store(store_location, read_only=True)
    try:
        first = store.select("tasks", limit=10_000, session=EVENTS[0]["sessionName"]).rows
        assert {(r["task_id"], r["attempt_number"]) for r in first} == _attempts(EVENTS)
        long_session = store.select("tasks", limit=10_000, session=LONG).rows
        assert len(long_session) == (0 if "long-session" in aside else 1)
        refused = {event["event_id"]: event for event in store.refused_events()}
        assert refused.keys() == aside
        for event in poison:
            if event["eventId"] in aside:
                assert json.loads(refused[event["eventId"]]["text"]) == event  # kept whole
    finally:
        store.close()
    # Listed by the command, whole with --json; folded again, they still fail and stay listed.
    listed = _store_cli("refused", "--store", str(store_location))
    assert listed.returncode == 0, listed.stderr
    assert sorted(line.split()[1] for line in listed.stdout.splitlines()) == sorted(aside)
    assert f"{len(aside)} events set aside" in listed.stderr
    as_json = _store_cli("refused", "--store", str(store_location), "--json")
    kept = {json.loads(line)["event_id"]: json.loads(line) for line in as_json.stdout.splitlines()}
    assert kept.keys() == aside
    assert all(kept[e["eventId"]]["event"] == e for e in poison if e["eventId"] in aside)
    refold = _store_cli("refold-refused", "--store", str(store_location))
    assert refold.returncode == 0, refold.stderr
    assert f"0 set-aside events folded, {len(aside)} still refused" in refold.stdout
    assert _store_cli("refused", "--store", str(store_location)).stdout == listed.stdout


def _places(store_location: str | Path, tmp_path: Path) -> list[str]:
    """What /readyz must never name: the store's file and folder, or its database's host, port
    and name."""
    if isinstance(store_location, Path):
        return [str(tmp_path), store_location.name]
    info = conninfo_to_dict(store_location)
    return [str(info[k]) for k in ("host", "port", "dbname") if info.get(k)]


def _spool_folder(store_location: str | Path, tmp_path: Path) -> Path:
    """Where `serve` (started with serve_store_args) keeps the POSTs it has not folded yet."""
    if isinstance(store_location, Path):
        return store_location.with_name(store_location.name + ".intake")
    return tmp_path / "spool"


def test_a_spool_replayed_at_start_sets_the_poison_aside_again_and_does_not_stick(
    servers: list[CliServer], store_location: str | Path, tmp_path: Path
) -> None:
    """A body answered and not folded (the process stopped before its fold) is folded at the next
    start: its poison is set aside, the rest stored, and /readyz says ready. Replayed once more (a
    crash between the fold and the spool's mark), nothing is set aside or stored twice."""
    poison, aside = _poison(store_location)
    body = json.dumps([*EVENTS[:3], *poison, *EVENTS[3:]]).encode()
    for run in range(2):
        spool = IntakeSpool(_spool_folder(store_location, tmp_path))
        spool.append(body)
        spool.close()
        server = start(servers, "serve", *serve_store_args(store_location, tmp_path))
        assert {(r["task_id"], r["attempt_number"]) for r in _tasks(server)} == _attempts(EVENTS)
        ready = requests.get(f"http://{server.address}/readyz", timeout=30)
        assert ready.status_code == 200 and ready.json()["checks"]["store_folding"]["ok"] is True
        for place in _places(store_location, tmp_path):
            assert place not in ready.text, place
        stats = server.stop()
        assert stats["events_stored"] == (len(EVENTS) + 2 - len(aside) if run == 0 else 0)
        assert stats["set_aside"] == len(aside)  # set aside again: one copy kept
        assert "Traceback" not in server.stderr()
    listed = _store_cli("refused", "--store", str(store_location))
    assert sorted(line.split()[1] for line in listed.stdout.splitlines()) == sorted(aside)


def test_readyz_turns_false_while_folding_is_stuck_naming_why_and_not_where(
    servers: list[CliServer], tmp_path: Path
) -> None:
    """Another process holds the SQLite store's write lock: the fold cannot write (not the events'
    fault, so nothing is set aside), /readyz answers 503 saying so, without the file's path; once
    the lock is let go, the fold goes on and every event answered is stored."""
    store = tmp_path / "held.sqlite3"
    server = start(servers, "serve", "--store", str(store))
    _post(server, EVENTS)
    assert _tasks(server)  # folded: the tables are there
    later = [dict(e, sessionName="session_later", eventId="later-" + e["eventId"]) for e in EVENTS]
    holder = sqlite3.connect(store, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        _post(server, later)

        def stuck() -> bool:
            return requests.get(f"http://{server.address}/readyz", timeout=30).status_code == 503

        wait_until(stuck, "/readyz turning false", timeout_s=60)
        ready = requests.get(f"http://{server.address}/readyz", timeout=30)
        folding = ready.json()["checks"]["store_folding"]
        assert folding["ok"] is False and "busy or cannot be written now" in folding["detail"]
        for place in _places(store, tmp_path):
            assert place not in ready.text, place
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_until(lambda: not stuck(), "/readyz turning true again", timeout_s=60)
    assert {(r["task_id"], r["attempt_number"]) for r in _tasks(server)} == _attempts(later)
    stats = server.stop()
    assert stats["set_aside"] == 0 and stats["events_stored"] == 2 * len(EVENTS)
    log = server.stderr()
    assert log.count("trying again every") == 1, log  # once per stop, not once a second
    assert "Traceback" not in log


def test_migration_gives_long_text_stored_before_its_indexed_form(postgres_server: PostgresServer) -> None:
    """A database at schema step 3 holding a name long enough for the new form (but short enough
    for its index): step 4 gives its column the form the writes now give (the same prefix and
    hash, computed in SQL), so a filter on the whole value still finds it."""
    url = postgres_server.new_database("before_long_text")
    name = "Ab" * 300
    with psycopg.connect(url, autocommit=True) as db:  # the schema as step 3 left it
        for _, sql in postgres_store.MIGRATIONS[:3]:
            db.execute(sql)
        db.execute("CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at timestamptz)")
        db.execute("INSERT INTO schema_migrations(version) VALUES (1), (2), (3)")
        db.execute(
            "INSERT INTO state_rows(resource, entity_id, attempt, session, updated, data, event_ids,"
            " name, func) VALUES ('tasks', 'ab', 0, 's', 1.0, %s, 'e1', %s, %s)",
            (json.dumps({"task_id": "ab", "name": name, "func_or_class_name": name}), name, name),
        )
    store = PostgresStore(url)
    try:
        for column in ("name", "func"):
            for value in (name, name.lower()):
                found = store.select("tasks", [ColumnFilter(column, True, value)]).rows
                assert [row["name"] for row in found] == [name], (column, value[:4])
        assert store.select("tasks", [ColumnFilter("name", True, name + "x")]).rows == []
        with psycopg.connect(url) as db:
            (stored,) = db.execute("SELECT name::text FROM state_rows").fetchone() or ("",)
        assert len(stored) < 200 and stored.startswith(name[:100])
        # A row written now with the same name has the same form: one filter finds both.
        store.ingest([_definition("same-name", taskName=name)])
        assert len(store.select("tasks", [ColumnFilter("name", True, name)]).rows) == 2
    finally:
        store.close()


def test_refold_refused_folds_what_now_folds_and_keeps_the_rest(
    servers: list[CliServer], store_location: str | Path, tmp_path: Path
) -> None:
    """Events an older version set aside (here: the 10 KB task name, which PostgreSQL refused before
    migration step 4) and one that still fails: `store refold-refused` folds the first into its
    row and drops it from the list, and keeps the other listed with its reason."""
    good = _definition("was-refused", taskName=LONG)
    poison, _ = _poison(store_location)
    wrong_type = poison[0]
    store = open_store(store_location)
    try:
        store.set_aside(
            [
                SetAside("was-refused", "index row size exceeds btree maximum", json.dumps(good).encode()),
                SetAside("wrong-type", "TASK_DEFINITION_EVENT: wrong type", json.dumps(wrong_type).encode()),
            ]
        )
    finally:
        store.close()
    out = _store_cli("refold-refused", "--store", str(store_location))
    assert out.returncode == 0, out.stderr
    assert "1 set-aside events folded, 1 still refused" in out.stdout, out.stdout
    assert "wrong-type" in out.stdout and "was-refused" not in out.stdout
    listed = _store_cli("refused", "--store", str(store_location))
    assert [line.split()[1] for line in listed.stdout.splitlines()] == ["wrong-type"]
    server = start(servers, "serve", *serve_store_args(store_location, tmp_path))
    assert [row["name"] for row in _tasks(server)] == [LONG]
    server.stop()


def test_otlp_ray_events_the_store_cannot_take_are_set_aside(
    servers: list[CliServer], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """RayEvents carried by OTLP log records (one export request for all): the one PostgreSQL
    cannot index (a 10 KB session name) is set aside and answered as rejected, the rest stored."""
    url = postgres_server.new_database("otlp_poison")
    server = start(servers, "serve", *serve_store_args(url, tmp_path))
    provider = LoggerProvider()
    provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"http://{server.address}/v1/logs"))
    )
    long_session = _definition("long-session", sessionName=LONG, taskId="AgICAgICAgICAgICAgICAgICAgIC")
    events = [*EVENTS[:4], long_session, *EVENTS[4:]]
    emit_ray_events(provider.get_logger("test"), (json_format.ParseDict(e, RayEvent()) for e in events))
    assert provider.force_flush(30_000)
    provider.shutdown()
    assert {(r["task_id"], r["attempt_number"]) for r in _tasks(server)} == _attempts(EVENTS)
    stats = server.stop()
    assert stats["events_stored"] == len(EVENTS) and stats["set_aside"] == 1
    store = open_store(url, read_only=True)
    try:
        (kept,) = store.refused_events()
        assert "index row" in kept["reason"]  # (its id as the OTLP record carried it)
        assert json.loads(kept["text"])["sessionName"] == LONG
    finally:
        store.close()


def test_retention_bounds_the_events_set_aside(store_location: str | Path) -> None:
    """Set-aside events are data like any other: they go by age, and first when the store is over
    its bytes (an attacker's stream of poison cannot fill the disk past the bound)."""
    store = open_store(store_location)
    try:
        now = time.time()
        old = [SetAside(f"old-{n}", "x", json.dumps({"n": n, "pad": LONG}).encode()) for n in range(3)]
        store.set_aside(old, now=now - 7200)
        store.set_aside([SetAside("new", "x", b'{"n": "new"}')], now=now)
        store.prune(Retention(max_age_s=3600), now=now)
        assert [e["event_id"] for e in store.refused_events()] == ["new"]
        store.set_aside(
            [SetAside(f"big-{n}", "x", json.dumps([n, LONG]).encode()) for n in range(20)], now=now
        )
        store.prune(Retention(max_bytes=store.used_bytes() - 50_000), now=now)
        assert len(store.refused_events()) < 21
    finally:
        store.close()
