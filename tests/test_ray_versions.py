"""Clusters of four Ray releases in one store: each release's recorded events, replayed into one
`serve` (each its own session), give back what that release's own `ray list` said on its live cluster.

The fixtures (tests/fixtures/ray-versions/<release>/) were recorded by
tests/helpers/ray_versions_capture.py: a live head of each release, from its own venv, ran
tests/helpers/ray_versions_workload.py while its aggregator exported to our `sink`; `events.jsonl`
holds every event POSTed, `tasks.json`, `actors.json` and `jobs.json` the live cluster's
`ray list tasks --detail`, `ray list actors` and `ray list jobs` answers (that release's CLI
against its own dashboard). `make test-ray-versions` runs the same against live clusters.

Each release's events also go through our aggregator, as its core workers and GCS send them (gRPC
AddEvents), into the same `serve` in a session of their own, and must give the same answers.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import requests
from helpers.agg_procs import CliServer, free_port, wait_until
from helpers.ray_versions import (
    ACTOR_FIELDS,
    FIXTURES,
    JOB_FIELDS,
    RELEASES,
    TASK_FIELDS,
    LiveAnswers,
    actor_tasks,
    ours,
    project,
    session_of,
)

from ray_otel_events.otel import posted_events
from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.protobuf.common_pb2 import TaskStatus
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.protobuf.events_task_lifecycle_event_pb2 import TaskLifecycleEvent
from ray_otel_events.store import fold_schema, raw_events, state_merge


def _tasks_only(release: str) -> bool:
    """Whether the recording holds task events only, so our store can show nothing else: Ray 2.49
    sends no other, and a GCS that gave up on its exporter agent (capture.json; the 2.52.1 recording,
    made on a loaded machine) sends none of its own (actors, jobs, nodes)."""
    captured = json.loads((FIXTURES / "ray-versions" / release / "capture.json").read_text())
    return release == "2.49.2" or bool(captured["gcs_gave_up"])


def _recorded(release: str) -> tuple[list[dict[str, Any]], LiveAnswers]:
    folder = FIXTURES / "ray-versions" / release
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    live = LiveAnswers(
        *(json.loads((folder / f"{name}.json").read_text()) for name in ("tasks", "actors", "jobs"))
    )
    return events, live


def _histories(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each task attempt's transitions: (state, ms). Ray's CLI prints a transition's time as local
    time (`Humanify.timestamp`); the recordings were made with the machine's clock in UTC."""

    def ms(value: Any) -> int:
        if isinstance(value, int):
            return value
        when = datetime.datetime.fromisoformat(value).replace(tzinfo=datetime.UTC)
        return int(when.timestamp() * 1000 + 0.5)

    return sorted(
        (row["task_id"], row["attempt_number"], [(e["state"], ms(e["created_ms"])) for e in row["events"]])
        for row in rows
    )


@pytest.fixture(scope="module")
def one_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One `serve` holding every release's events (sent in POSTs of 16, the releases interleaved)."""
    server = CliServer("serve", "--store", str(tmp_path_factory.mktemp("versions") / "events.sqlite3"))
    try:
        url = f"http://{server.address}"
        streams = {release: _recorded(release)[0] for release in RELEASES}
        longest = max(len(events) for events in streams.values())
        for start_at in range(0, longest, 16):
            for events in streams.values():
                batch = events[start_at : start_at + 16]
                if batch:
                    answer = requests.post(f"{url}/v1/ray-events", json=batch, timeout=60)
                    assert answer.status_code == 200, answer.text
        yield url
    finally:
        server.close()


BY_GRPC = "_grpc"  # the session suffix of a release's events sent through our aggregator


def _as_core_workers_send(release: str) -> list[bytes]:
    """A release's events as its core workers and GCS send them to an aggregator (AddEvents), in a
    session of their own: the wire our reader makes of their JSON. 2.49's execution events become
    TASK_LIFECYCLE_EVENTs, the bytes 2.49 sends (type 2, field 9, its `taskState` map entries
    StateTransitions on the wire)."""
    events = [
        {
            **event,
            "sessionName": event["sessionName"] + BY_GRPC,
            "eventId": base64.b64encode(b"g" + base64.b64decode(event["eventId"])).decode(),
        }
        for event in _recorded(release)[0]
    ]
    parts, errors = posted_events.read_posted_events(json.dumps(events).encode())
    assert errors == [] and len(parts) == len(events)
    return [part.wire for part in parts]


@pytest.fixture(scope="module")
def by_grpc(one_store: str) -> Iterator[str]:
    """Every release's events also through our aggregator (gRPC AddEvents in, JSON POSTs out) to the
    same `serve`, each release's in a session of its own (BY_GRPC)."""
    aggregator = CliServer(
        "aggregator",
        "--export-addr",
        f"{one_store}/v1/ray-events",
        "--exposable-event-types",
        "ALL",
        "--metrics-port",
        str(free_port()),
    )
    try:
        request = svc.AddEventsRequest()
        for release in RELEASES:
            for wire in _as_core_workers_send(release):
                request.events_data.events.add().MergeFromString(wire)
        with grpc.insecure_channel(aggregator.address) as channel:
            svc_grpc.EventAggregatorServiceStub(channel).AddEvents(request, timeout=60)
        stats = aggregator.stop()  # after what it holds is sent
        sent = len(request.events_data.events)
        published = sum(sum(p["published"].values()) for p in stats["publishers"].values())
        assert stats["received_total"] == published == sent, stats
        yield one_store
    finally:
        aggregator.close()


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("path", ["posted", "grpc"])
def test_each_release_lists_as_its_live_cluster_did(by_grpc: str, release: str, path: str) -> None:
    events, live = _recorded(release)
    session = session_of(events) + (BY_GRPC if path == "grpc" else "")
    wait_until(lambda: len(ours(by_grpc, session).tasks) == len(live.tasks), f"{release}'s tasks by {path}")
    answers = ours(by_grpc, session)
    assert len(answers.tasks) == len(live.tasks) == 14
    assert project(answers.tasks, TASK_FIELDS) == project(live.tasks, TASK_FIELDS)
    assert actor_tasks(answers.tasks) == actor_tasks(live.tasks)
    assert _histories(answers.tasks) == _histories(live.tasks)  # 2.49's from its `taskState` maps
    states = {(t["func_or_class_name"], t["attempt_number"]): t["state"] for t in answers.tasks}
    assert states[("flaky", 1)] == states[("flaky", 0)] == "FAILED"
    if _tasks_only(release):
        assert answers.actors == [] and answers.jobs == []
        return
    assert project(answers.actors, ACTOR_FIELDS) == project(live.actors, ACTOR_FIELDS)
    assert project(answers.jobs, JOB_FIELDS) == project(live.jobs, JOB_FIELDS)


def test_the_store_keeps_the_releases_apart(by_grpc: str) -> None:
    listed = requests.get(f"{by_grpc}/api/sessions", timeout=30).json()["sessions"]
    sessions = {session_of(_recorded(release)[0]) for release in RELEASES}
    assert {row["name"] for row in listed} == sessions | {name + BY_GRPC for name in sessions}


def test_fixtures_stay_small() -> None:
    for release in RELEASES:
        size = sum(f.stat().st_size for f in (FIXTURES / "ray-versions" / release).iterdir())
        assert size < 300_000, (release, size)


def _execution_event(task_state: Any) -> dict[str, Any]:
    return {
        "eventId": "AAAA",
        "eventType": "TASK_EXECUTION_EVENT",
        "sessionName": "session_249",
        "taskExecutionEvent": {
            "taskId": "AAAAAAAAAAAAAAAAAQAAAA==",
            "taskAttempt": 1,
            "taskState": task_state,
        },
    }


def test_a_2_49_state_map_folds_as_later_transitions() -> None:
    """Ray 2.49's `taskState` (TaskStatus number to time) folds as the same states by name, in time
    order (2.49's TaskStatus numbers are 2.60's, which adds 13); a number our protos do not know
    stays that number, never another state."""
    times = {"11": "2026-12-02T00:43:03.000000002Z", "2": "2026-12-02T00:43:03.000000001Z"}
    prepared = state_merge.prepare(_execution_event({**times, "99": "2026-12-02T00:43:03.000000003Z"}))
    assert prepared.key is not None and prepared.piece is not None
    assert prepared.key[:3] == ("tasks", "00000000000000000000000001000000", 1)
    row: dict[str, Any] = {}
    state_merge.apply(row, prepared.piece)
    assert [e["state"] for e in row["events"]] == ["PENDING_NODE_ASSIGNMENT", "FINISHED", "99"]
    row = {}
    state_merge.apply(row, state_merge.prepare(_execution_event(times)).piece)  # type: ignore[arg-type]
    assert row["state"] == "FINISHED" and row["end_time_ms"] is not None


def test_a_2_49_state_map_of_the_wrong_shape_is_refused() -> None:
    prepared = state_merge.prepare(_execution_event(["2026-12-02T00:43:03Z"]))
    with pytest.raises(TypeError, match="taskState is a list"):
        state_merge.apply({}, prepared.piece)  # type: ignore[arg-type]


def test_a_task_field_no_fold_reads_shows_in_the_detail() -> None:
    """`get` and the task page add the fields of a task's events that no fold reads: those a later
    Ray sends and those our schema names but the folds do not read, so a field `make proto` adds
    shows with no other edit (the folds' keys are fold_schema's, not the schema's)."""
    lifecycle = TaskLifecycleEvent.DESCRIPTOR.fields
    read = {*dataclasses.astuple(fold_schema.RAY_KEYS), "taskId", "taskAttempt"}  # the route's keys too
    unread = [f for f in lifecycle if f.json_name not in read]
    assert {f.name for f in unread} >= {"is_debugger_paused", "actor_repr_name"}
    payload: dict[str, Any] = {f.json_name: f"value of {f.name}" for f in unread}
    payload.update(taskId="AAAAAAAAAAAAAAAAAQAAAA==", taskAttempt=0, laterRayField={"x": 1}, nodeId="AQ==")
    shown = raw_events.new_fields([{"eventType": "TASK_LIFECYCLE_EVENT", "taskLifecycleEvent": payload}])
    assert shown == {**{f.name: f"value of {f.name}" for f in unread}, "later_ray_field": {"x": 1}}


def test_a_2_49_task_detail_adds_only_what_no_fold_reads() -> None:
    """2.49's execution payload is one the task folds read: the detail adds its fields they do not
    read (a later Ray's, say), not the payload whole."""
    event = _execution_event({"11": "2026-12-02T00:43:03.000000002Z"})
    event["taskExecutionEvent"].update(workerPid=7, laterRayField=1)
    assert raw_events.new_fields([event]) == {"later_ray_field": 1}


def test_the_bridge_reads_2_49_events_as_later_releases_send_them() -> None:
    """The bridge's reader (compiled where built, else the Python path) takes every event 2.49 sent:
    its execution events as TASK_LIFECYCLE_EVENTs with the states of their `taskState` maps."""
    events, live = _recorded("2.49.2")
    parts, errors = posted_events.read_posted_events(json.dumps(events).encode())
    assert errors == [] and len(parts) == len(events)
    read = [RayEvent.FromString(p.wire) for p in parts]
    assert sum(e.event_type == RayEvent.TASK_LIFECYCLE_EVENT for e in read) == sum(
        e["eventType"] == "TASK_EXECUTION_EVENT" for e in events
    )
    last_state: dict[tuple[str, int], tuple[int, int]] = {}
    for event in read:
        if event.event_type == RayEvent.TASK_LIFECYCLE_EVENT:
            body = event.task_lifecycle_event
            for t in body.state_transitions:
                key = (body.task_id.hex(), body.task_attempt)
                last_state[key] = max(last_state.get(key, (0, 0)), (t.timestamp.ToNanoseconds(), t.state))
    listed = {(t["task_id"], t["attempt_number"]): t["state"] for t in live.tasks}  # not the driver's
    assert {key: TaskStatus.Name(last_state[key][1]) for key in listed} == listed


def test_a_2_49_event_of_the_wrong_shape_is_named() -> None:
    bad = json.dumps([_execution_event("not a map")]).encode()
    parts, errors = posted_events.read_posted_events(bad)
    assert parts == [] and errors == ["[0]: TASK_EXECUTION_EVENT: taskState is a str, not a map"]
