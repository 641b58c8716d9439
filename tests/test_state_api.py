"""`serve`: RayEvents stored and merged, and Ray's own state tools answered from the store.

The store is filled from a real Ray 2.60 capture, in pieces, out of order and duplicated; then
Ray's CLI (`ray list/get/summary --address`) and `ray.util.state` run against our server, as a
user would run them against a dashboard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import FIXTURE, TASK_TYPES, CliServer, run_producer, start
from helpers.postgres import serve_store_args
from helpers.ray_cluster import ray_cli_answers

from ray_otel_events.store.backend import ColumnFilter, Retention
from ray_otel_events.store.location import open_store
from ray_otel_events.store.state_merge import TASKS

EVENTS: list[dict[str, Any]] = [item.get("event", item) for item in json.loads(Path(FIXTURE).read_text())]
FLAKY = "e0dc174c83599034ffffffffffffffffffffffff01000000"  # attempt 0 failed, attempt 1 pending
RAY = str(Path(sys.executable).with_name("ray"))


def _post(server: CliServer, events: list[Any]) -> requests.Response:
    return requests.post(f"http://{server.address}/v1/ray-events", json=events, timeout=30)


def _settled_metrics(server: CliServer) -> str:
    """The server's metrics once every event answered so far is folded (a state read waits for it)."""
    assert requests.get(f"http://{server.address}/api/version", timeout=30).status_code == 200
    return requests.get(f"http://{server.address}/metrics", timeout=10).text


def _stored(metrics: str) -> int:
    """Events folded into the store, all types."""
    lines = [
        line for line in metrics.splitlines() if line.startswith("ray_otel_events_serve_events_stored_total")
    ]
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in lines)


def _ray(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run([RAY, *args], capture_output=True, text=True, timeout=120, env=env, cwd="/tmp")


@pytest.fixture
def filled(servers: list[CliServer], tmp_path: Path, store_location: str | Path) -> CliServer:
    server = start(servers, "serve", *serve_store_args(store_location, tmp_path))
    reverse = EVENTS[::-1]
    for i in range(0, len(reverse), 5):  # one task's pieces spread over several POSTs, newest first
        assert _post(server, reverse[i : i + 5]).status_code == 200
    again = _post(server, EVENTS[:7])  # a retried batch
    assert again.json() == {"accepted": 7, "rejected": 0, "errors": []}
    assert "serve_duplicates_total 7.0" in _settled_metrics(server)  # folded once, not twice
    return server


def _ray_batch(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Ray's CLI asked all at once (eight starts of it a backend cost eight seconds)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    return ray_cli_answers(list(commands), env, cwd="/tmp")


def test_ray_cli_lists_gets_and_summarizes_our_store(filled: CliServer) -> None:
    address = f"http://{filled.address}"
    resources = ("jobs", "nodes", "workers")
    listed, failed, got, summary, actors, *others = _ray_batch(
        ["list", "tasks", "--address", address, "--format", "json"],
        ["list", "tasks", "--address", address, "--filter", "state=FAILED", "--format", "json"],
        ["get", "tasks", FLAKY, "--address", address],
        ["summary", "tasks", "--address", address],
        ["list", "actors", "--address", address, "--format", "json"],
        *(["list", resource, "--address", address, "--format", "json"] for resource in resources),
    )
    assert listed.returncode == 0, listed.stderr
    tasks = json.loads(listed.stdout)
    by_key = {(t["task_id"], t["attempt_number"]): t for t in tasks}
    assert by_key[(FLAKY, 0)]["state"] == "FAILED"
    assert by_key[(FLAKY, 0)]["error_type"] == "TASK_EXECUTION_EXCEPTION"
    assert by_key[(FLAKY, 0)]["name"] == "flaky"
    assert by_key[(FLAKY, 1)]["state"] == "PENDING_ARGS_AVAIL"
    assert failed.returncode == 0, failed.stderr
    assert {t["state"] for t in json.loads(failed.stdout)} == {"FAILED"}
    assert len(json.loads(failed.stdout)) == sum(1 for t in tasks if t["state"] == "FAILED") >= 2
    assert got.returncode == 0, got.stderr
    assert "TASK_EXECUTION_EXCEPTION" in got.stdout and "attempt_number: 1" in got.stdout
    assert summary.returncode == 0, summary.stderr
    assert "flaky" in summary.stdout and "Counter.inc" in summary.stdout
    assert actors.returncode == 0, actors.stderr
    assert "Counter" in {a["class_name"] for a in json.loads(actors.stdout)}
    for resource, out in zip(resources, others, strict=True):
        assert out.returncode == 0 and json.loads(out.stdout), (resource, out.stderr)


def test_ray_python_state_api_and_detail(filled: CliServer) -> None:
    from ray.util.state import list_tasks

    tasks = list_tasks(address=f"http://{filled.address}", filters=[("name", "=", "flaky")], detail=True)
    (flaky,) = tasks
    assert flaky.state == "FAILED" and flaky.attempt_number == 0
    assert [e["state"] for e in flaky.events][-1] == "FAILED"
    assert flaky.error_message and "first attempt fails on purpose" in flaky.error_message
    assert flaky.end_time_ms == max(e["created_ms"] for e in flaky.events)


def test_bad_queries_and_posts_get_clear_errors(filled: CliServer) -> None:
    base = f"http://{filled.address}"
    bad = requests.get(
        f"{base}/api/v0/tasks",
        params={"filter_keys": "bogus", "filter_predicates": "=", "filter_values": "1"},
        timeout=10,
    )
    assert bad.status_code == 400
    body = bad.json()
    assert body["result"] is False and "bogus" in body["msg"] and body["data"] == {"result": None}
    assert requests.get(f"{base}/api/v0/tasks", params={"limit": "x"}, timeout=10).status_code == 400
    assert requests.get(f"{base}/api/v0/objects", timeout=10).status_code == 400
    cli = _ray("list", "tasks", "--address", base, "--filter", "bogus=1")
    assert cli.returncode != 0 and "bogus" in (cli.stdout + cli.stderr)
    json_type = {"Content-Type": "application/json"}
    not_json = requests.post(f"{base}/v1/ray-events", data=b"{nope", headers=json_type, timeout=10)
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["error"]
    untyped = requests.post(f"{base}/v1/ray-events", data=b"[]", timeout=10)
    assert untyped.status_code == 415 and "Content-Type" in untyped.json()["error"]
    # One unreadable event must not fail its batch: Ray's publisher retries any non-2xx for ever,
    # which would stall the cluster's export. The readable one is stored, the other named.
    late = dict(EVENTS[0], eventId="bmV3LWdvb2Q=", sessionName="session_mixed")
    unreadable = {"eventId": "bmV3", "eventType": "TASK_LIFECYCLE_EVENT", "taskLifecycleEvent": {}}
    mixed = _post(filled, [unreadable, late, "not an event"])
    assert mixed.status_code == 200, mixed.text
    answer = mixed.json()
    assert answer["accepted"] == 1 and answer["rejected"] == 2
    assert answer["errors"][0].startswith("[0]: ") and "taskId" in answer["errors"][0]
    assert answer["errors"][1].startswith("[2]: ") and "eventId" in answer["errors"][1]
    all_bad = _post(filled, [unreadable])
    assert all_bad.status_code == 200 and all_bad.json()["rejected"] == 1
    metrics = requests.get(f"{base}/metrics", timeout=10).text
    assert "serve_rejected_events_total 3.0" in metrics
    # the invalid JSON and the missing Content-Type
    assert 'serve_refused_posts_total{path="/v1/ray-events",status="400"} 1.0' in metrics
    assert 'serve_refused_posts_total{path="/v1/ray-events",status="415"} 1.0' in metrics
    # A value only the fold reads (a worker id that is not base64) is found after the answer (the
    # fold runs behind the spool): it fails that event alone, not the transaction of its batch
    # (which would lose the batch's good events), and is counted and logged with its event id.
    lifecycle = next(e for e in EVENTS if e["eventType"] == "TASK_LIFECYCLE_EVENT")
    definition = next(e for e in EVENTS if e["eventType"] == "TASK_DEFINITION_EVENT")
    bad_value = dict(
        lifecycle,
        eventId="YmFkLXZhbHVl",
        taskLifecycleEvent=dict(lifecycle["taskLifecycleEvent"], workerId="not base64!"),
    )
    good = dict(EVENTS[1], eventId="bmV3LWdvb2QtMg==", sessionName="session_mixed")
    stored = _stored(_settled_metrics(filled))
    half = _post(filled, [bad_value, good])
    assert half.status_code == 200, half.text
    assert half.json()["accepted"] == 2
    metrics = _settled_metrics(filled)
    assert "serve_rejected_events_total 4.0" in metrics and _stored(metrics) == stored + 1
    assert "YmFkLXZhbHVl" in filled.stderr() and "base64" in filled.stderr()
    # The same for a piece of the wrong shape: a transition that is not an object, error info
    # that is not one either.
    shapes = [
        dict(
            lifecycle,
            eventId="YmFkLXNoYXBlLTE=",
            taskLifecycleEvent=dict(lifecycle["taskLifecycleEvent"], stateTransitions=["RUNNING"]),
        ),
        dict(
            lifecycle,
            eventId="YmFkLXNoYXBlLTI=",
            taskLifecycleEvent=dict(lifecycle["taskLifecycleEvent"], rayErrorInfo="boom"),
        ),
        dict(
            lifecycle,
            eventId="YmFkLXNoYXBlLTM=",
            taskLifecycleEvent=dict(lifecycle["taskLifecycleEvent"], workerPid=2**70),
        ),
        dict(
            definition,
            eventId="YmFkLXNoYXBlLTQ=",
            taskDefinitionEvent=dict(definition["taskDefinitionEvent"], taskName={"a": 1}),
        ),
        dict(EVENTS[1], eventId="bmV3LWdvb2QtMw==", sessionName="session_shapes"),
    ]
    shaped = _post(filled, shapes)
    assert shaped.status_code == 200, shaped.text
    assert shaped.json()["accepted"] == 5
    metrics = _settled_metrics(filled)
    assert "serve_rejected_events_total 8.0" in metrics and _stored(metrics) == stored + 2
    assert "YmFkLXNoYXBlLTQ=" in filled.stderr() and "name is a dict" in filled.stderr()
    # (the newest session is now session_shapes: the capture's is asked for by name)
    only_two = {"limit": "2", "session": EVENTS[0]["sessionName"]}
    limited = requests.get(f"{base}/api/v0/tasks", params=only_two, timeout=10).json()["data"]["result"]
    assert (
        len(limited["result"]) == 2
        and limited["total"] > 2
        and limited["num_after_truncation"] < limited["total"]
    )


def test_restart_keeps_everything(
    servers: list[CliServer], filled: CliServer, tmp_path: Path, store_location: str | Path
) -> None:
    before = requests.get(
        f"http://{filled.address}/api/v0/tasks", params={"detail": "true"}, timeout=10
    ).json()
    assert filled.stop()["events_stored"] == len(EVENTS)
    again = start(servers, "serve", *serve_store_args(store_location, tmp_path))
    after = requests.get(f"http://{again.address}/api/v0/tasks", params={"detail": "true"}, timeout=10).json()
    assert after == before and before["data"]["result"]["result"]
    assert _post(again, EVENTS).status_code == 200
    # its memory of ids survived too
    assert f"serve_duplicates_total {float(len(EVENTS))}" in _settled_metrics(again)


def test_sessions_kept_apart_and_retention(store_location: str | Path) -> None:
    store = open_store(store_location)
    other = [dict(e, sessionName="session_other", eventId="x" + e["eventId"]) for e in EVENTS]
    store.ingest(EVENTS, now=1000.0)
    store.ingest(other, now=2000.0)
    assert len(store.sessions()) == 2

    def rows(resource: str, session: str | None = None) -> list[dict[str, Any]]:
        only = [ColumnFilter("session", True, session)] if session else []
        return store.select(resource, only, limit=10**6).rows

    assert len(rows(TASKS)) == 2 * len(rows(TASKS, "session_other"))
    resources = ("tasks", "actors", "jobs", "nodes", "workers")
    first = EVENTS[0]["sessionName"]
    old = sum(len(rows(r, first)) for r in resources)
    assert old > 0
    assert store.prune(Retention(max_age_s=500), now=2100.0) == old
    assert store.sessions() == ["session_other"]
    tasks_before = {row["task_id"] for row in rows(TASKS)}
    assert FLAKY in tasks_before
    assert store.prune(Retention(max_rows=3), now=2100.0) > 0
    assert sum(len(rows(r)) for r in resources) == 3
    # pruned rows take their history with them: an entity's attempts are the rows kept, no more
    # (which 3 are kept is the database's choice among rows updated at the same time)
    kept = {(row["task_id"], row["attempt_number"]) for row in rows(TASKS)}
    for task in tasks_before:
        attempts = {(row["task_id"], attempt) for attempt, _, row in store.entity_rows(TASKS, task)}
        assert attempts == {key for key in kept if key[0] == task}, task
    assert len(kept) < len(tasks_before)


def test_our_aggregator_feeds_the_store(servers: list[CliServer], tmp_path: Path) -> None:
    """The aggregator's HTTP exporter is the store's intake: no extra process in between."""
    store = start(servers, "serve", "--store", str(tmp_path / "events.sqlite3"))
    agg = start(
        servers,
        "aggregator",
        "--export-addr",
        f"http://{store.address}/v1/ray-events",
        "--exposable-event-types",
        "TASK_DEFINITION_EVENT,TASK_LIFECYCLE_EVENT,ACTOR_DEFINITION_EVENT,ACTOR_LIFECYCLE_EVENT",
    )
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "40", "--types", TASK_TYPES)
    agg.stop()
    stats = store.stop()
    assert stats["events_stored"] == sent["sent"] == 40
