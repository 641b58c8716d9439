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
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import requests
from helpers.agg_procs import FIXTURE, CliServer, clean_env, start, wait_until
from helpers.postgres import serve_store_args

from ray_otel_events.store.backend import ColumnFilter
from ray_otel_events.store.location import open_store

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
    long_one = _definition("long-name", taskName=LONG, taskId="AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
    _post(server, [long_one])
    _post(server, EVENTS)  # answered and stored after it
    rows = _tasks(server)
    named = [row for row in rows if row["name"] == LONG]
    assert len(named) == 1, [len(row["name"]) for row in rows]
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
