"""Writes PostgreSQL rolls back on a real server: a deadlock between two writers, met and retried
(the batch applied once, the retry logged and counted), and a write rolled back at every try, which
`serve` answers with 503 and Retry-After and keeps (a spooled POST is folded once it goes through).

The deadlock is a real interleaving, no code patched: a third connection holds the locks that order
the two writers' steps (an uncommitted row where the first writer inserts, a lock on a row the
second reads), each step waited for in `pg_stat_activity`, then lets go.
"""

from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from helpers.agg_procs import CliServer, start
from helpers.postgres import PostgresServer, serve_store_args

from ray_otel_events.otel import otlp_wire
from ray_otel_events.otel.log_records import log_record_wire
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.store.backend import IngestResult, StoreBusy
from ray_otel_events.store.kept_ids import event_hash
from ray_otel_events.store.postgres_store import PostgresStore, _id_stored, _kept_hashes
from ray_otel_events.store.sqlite_store import EventStore
from ray_otel_events.store.state_merge import prepare
from tests.test_store_postgres import EVENTS, _all_rows, _get, _post, _session_copy, _tasks, _wait_for

# Two task attempts of the capture, the first before the second in the order rows are locked.
_Y = "16310a0f0a45af5cffffffffffffffffffffffff01000000"
_Z = "c8ef45ccd0112571ffffffffffffffffffffffff01000000"


def _pieces(entity_id: str) -> list[dict[str, Any]]:
    return [e for e in EVENTS if (k := prepare(e).key) is not None and k[1] == entity_id]


def _copy(event: dict[str, Any], tag: str) -> dict[str, Any]:
    return dict(copy.deepcopy(event), eventId=f"{tag}-{event['eventId']}")


def _waiting(admin: psycopg.Connection[Any], name: str) -> set[int] | None:
    """The pids blocking the session `name` while it waits for a lock (None while it does not)."""
    row = admin.execute(
        "SELECT pg_blocking_pids(pid) FROM pg_stat_activity"
        " WHERE application_name = %s AND wait_event_type = 'Lock'",
        (name,),
    ).fetchone()
    return set(row[0]) if row else None


def _waiting_pid(admin: psycopg.Connection[Any], name: str) -> int:
    row = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", (name,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_deadlock_between_two_writers_is_retried_and_each_batch_applied_once(
    postgres_server: PostgresServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reads Y and Z absent and inserts Y; Z, committed by B meanwhile, is then locked by B's next
    batch, which inserts Y too: A waits for B's Z, B for A's Y. PostgreSQL breaks the cycle, the
    rolled-back batch is done again: both batches stored once, the rows those SQLite folds."""
    (y_piece,) = _pieces(_Y)
    z_pieces = _pieces(_Z)
    assert len(z_pieces) == 2 and prepare(y_piece).key < prepare(z_pieces[0]).key  # type: ignore[operator]
    first_of_b = [_copy(z_pieces[0], "b1")]
    of_a = [_copy(y_piece, "a"), _copy(z_pieces[1], "a")]
    of_b = [_copy(y_piece, "b2"), _copy(z_pieces[0], "b2")]
    url = postgres_server.new_database("deadlock")
    writer_a = PostgresStore(url + "?application_name=writer-a")
    writer_b = PostgresStore(url + "?application_name=writer-b")
    results: dict[str, IngestResult] = {}
    errors: list[BaseException] = []

    def ingest(name: str, store: PostgresStore, events: list[dict[str, Any]]) -> None:
        try:
            results[name] = store.ingest(copy.deepcopy(events))
        except BaseException as exc:
            errors.append(exc)

    resource, entity_id, attempt, session = prepare(y_piece).key  # type: ignore[misc]
    with (
        psycopg.connect(url, autocommit=True) as admin,
        psycopg.connect(url) as holds_y,
        psycopg.connect(url) as holds_z,
    ):
        admin.execute("INSERT INTO sessions(name, first_seen, last_seen) VALUES (%s, 0, 0)", (session,))
        holds_y.execute(  # uncommitted: A's insert of Y waits for it
            "INSERT INTO state_rows(resource, entity_id, attempt, session, updated, data, event_ids)"
            " VALUES (%s, %s, %s, (SELECT id FROM sessions WHERE name = %s), 0, '{}', '')",
            (resource, _id_stored(entity_id), attempt, session),  # as the column holds it (bytes)
        )
        caplog.set_level(logging.WARNING, logger="ray_otel_events.store.postgres_store")
        a = threading.Thread(target=ingest, args=("a", writer_a, of_a))
        a.start()
        _wait_for(lambda: _waiting(admin, "writer-a"))  # A has read Y and Z absent
        assert writer_b.ingest(copy.deepcopy(first_of_b)).stored == 1  # Z committed
        holds_z.execute("SELECT 1 FROM state_rows WHERE entity_id = %s FOR UPDATE", (_id_stored(_Z),))
        b = threading.Thread(target=ingest, args=("b", writer_b, of_b))
        b.start()
        _wait_for(lambda: _waiting(admin, "writer-b"))  # B reads Z, waiting for its lock
        behind = {holds_z.info.backend_pid, _waiting_pid(admin, "writer-b")}
        holds_y.rollback()  # A inserts Y, finds Z inserted and waits to lock it, behind B
        _wait_for(lambda: (_waiting(admin, "writer-a") or set()) & behind)
        holds_z.rollback()  # B locks Z and inserts Y: a cycle
        for thread in (a, b):
            thread.join(timeout=60)
    assert errors == []
    assert writer_a.rolled_back + writer_b.rolled_back == 1, caplog.text
    assert [r.message for r in caplog.records if "rolled a batch of 2 rows back" in r.message], caplog.text
    assert (results["a"].stored, results["a"].duplicates) == (2, 0)
    assert (results["b"].stored, results["b"].duplicates) == (2, 0)
    with psycopg.connect(url) as db:
        ids = [i for (kept,) in db.execute("SELECT event_ids FROM state_rows") for i in _kept_hashes(kept)]
    sent = [event_hash(e["eventId"]) for e in first_of_b + of_a + of_b]
    assert sorted(ids) == sorted(sent)  # every event folded into its row once
    reference = EventStore(tmp_path / "reference.sqlite3")
    for batch in (first_of_b, of_a, of_b):
        reference.ingest(copy.deepcopy(batch))
    assert _all_rows(writer_a) == _all_rows(reference)
    assert {row["task_id"] for row in _all_rows(writer_a)["tasks"]} == {
        row["task_id"] for row in _all_rows(reference)["tasks"]
    }
    for store in (writer_a, writer_b, reference):
        store.close()


_REFUSE_WRITES = """
CREATE FUNCTION refuse_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'deadlock detected' USING ERRCODE = 'deadlock_detected'; END $$;
CREATE TRIGGER refuse_writes BEFORE INSERT OR UPDATE ON state_rows
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_writes();
"""
_ALLOW_WRITES = "DROP TRIGGER refuse_writes ON state_rows; DROP FUNCTION refuse_writes();"


def _refusing(url: str, refuse: bool) -> None:
    """Has the server roll back every write of a state row, as a deadlock does (or no longer)."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(_REFUSE_WRITES if refuse else _ALLOW_WRITES)


def test_a_batch_rolled_back_at_every_try_is_store_busy_and_nothing_is_written(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.new_database("rolled_back")
    store = PostgresStore(url)
    _refusing(url, True)
    with pytest.raises(StoreBusy, match=r"rolled a batch of \d+ rows back 5 times: deadlock detected"):
        store.ingest(copy.deepcopy(EVENTS))
    assert store.rolled_back == 4  # five tries
    # no row; the session's record, committed before the batch's transaction (`_record_sessions`)
    assert store.size()["state_rows"] == 0 and store.sessions() == [EVENTS[0]["sessionName"]]
    assert store.session_list()[0]["tasks"] == 0
    _refusing(url, False)
    assert store.ingest(copy.deepcopy(EVENTS)).stored > 0 and store.size()["state_rows"] == 17
    assert store.rolled_back == 4
    store.close()


def _logs_request(events: list[dict[str, Any]]) -> bytes:
    """The events as OTLP log records (as our exporters send them), one request."""
    from google.protobuf import json_format

    records = [
        log_record_wire(json_format.ParseDict(e, RayEvent(), ignore_unknown_fields=True), b"", b"", 0)
        for e in events
    ]
    resource = otlp_wire.attributes({"service.name": "ray"}, b"\x0a")
    return otlp_wire.logs_request(resource, otlp_wire.string_field(b"\x0a", "ray"), records)


def _post_logs(server: CliServer, body: bytes) -> requests.Response:
    return requests.post(
        f"http://{server.address}/v1/logs",
        data=body,
        headers={"Content-Type": "application/x-protobuf"},
        timeout=60,
    )


def test_serve_answers_503_while_the_database_rolls_writes_back_and_loses_nothing(
    servers: list[CliServer], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """While every write is rolled back: OTLP logs carrying RayEvents answer 503 with Retry-After
    (the client keeps them), a RayEvents POST is spooled, answered 200 and folded once writes go
    through again; what was stored before stays. The client's retry is then stored, once."""
    url = postgres_server.new_database("serve_rolled_back")
    server = start(servers, "serve", *serve_store_args(url, tmp_path))
    server.expect_tracebacks("folding ")  # the fold says why each try failed while writes roll back
    assert _post(server, _session_copy(EVENTS, 0)).status_code == 200
    assert _tasks(server)  # waits for the fold
    _refusing(url, True)
    logs = _logs_request(_session_copy(EVENTS, 1))
    refused = _post_logs(server, logs)
    assert refused.status_code == 503, refused.text
    assert int(refused.headers["Retry-After"]) >= 1
    assert "the store is busy" in refused.text and "rolled" in refused.text
    assert _post(server, _session_copy(EVENTS, 2)).status_code == 200  # spooled, not yet folded
    _wait_for(lambda: "folding 23 events failed; trying again" in server.stderr())  # kept, logged
    # Folding is stuck (issue 43): /readyz says so and why, while the database itself answers.
    ready = _wait_for(lambda: (r := _get(server, "/readyz")).status_code == 503 and [r])[0]
    checks = ready.json()["checks"]
    assert checks["store_reachable"]["ok"] is True and checks["store_folding"]["ok"] is False
    assert "busy" in checks["store_folding"]["detail"]
    _refusing(url, False)
    assert _post_logs(server, logs).status_code == 200  # the client's retry
    assert _tasks(server)  # waits for the spooled POST's fold, tried again until it went through
    assert _get(server, "/readyz").status_code == 200
    sessions = _get(server, "/api/sessions").json()["sessions"]
    assert sorted(s["name"] for s in sessions) == ["session_0", "session_1", "session_2"]
    stats = server.stop()
    store = PostgresStore(url, read_only=True)
    assert sorted(store.sessions()) == ["session_0", "session_1", "session_2"]
    assert store.size()["state_rows"] == 3 * 17
    store.close()
    assert stats["duplicates"] == 0 and stats["events_stored"] == 3 * len(EVENTS)  # each once
