"""TracedProcessPoolExecutor under every start method, end to end in real processes: fork, spawn,
forkserver, Python's default, and `max_tasks_per_child` with no context (ProcessPoolExecutor then
spawns). Each run checks the spans (submit and execution, linked), the task events (as event log
records) and the task logs (records tied to the execution span, lines echoed by the submitter)."""

from __future__ import annotations

import multiprocessing
import re
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from helpers.tracing_procs import (
    LOCAL_HOOK,
    logs_by_pid,
    run_pool_output,
    script_env,
    sid,
    spans_by_pid,
    tid,
)

from ray_otel_events.events.builders import TaskStatus
from ray_otel_events.executor import TracedProcessPoolExecutor
from ray_otel_events.otel.log_records import from_log_body

TASKS = 4
CHATTY = "tracing_workload.chatty"
FINISHED = ["PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED"]


@pytest.mark.parametrize(
    "start_method,max_tasks_per_child,expected",
    [
        ("fork", None, "fork"),
        ("spawn", None, "spawn"),
        ("forkserver", None, "forkserver"),
        (None, None, "default"),
        (None, 2, "spawn"),
    ],
    ids=["fork", "spawn", "forkserver", "default", "max_tasks_per_child-no-context"],
)
def test_spans_events_and_task_logs_under_every_start_method(
    tmp_path: Path, start_method: str | None, max_tasks_per_child: int | None, expected: str
) -> None:
    env = script_env(tmp_path, {"RAY_OTEL_EVENTS_EVENT_LOGS": "1"})
    spec = {
        "hook": LOCAL_HOOK,
        "chatty": TASKS,
        "start_method": start_method,
        "max_tasks_per_child": max_tasks_per_child,
    }
    summary, stdout, stderr = run_pool_output(spec, env)
    submitter = summary["pid"]
    results = summary["chatty"]
    assert [r["n"] for r in results] == list(range(TASKS))

    # The workers were started the way asked: a forked one inherits the submitter's module state,
    # a forkserver one is the server's child, a spawned one the submitter's.
    method = summary["default_method"] if expected == "default" else expected
    for result in results:
        assert result["inherited"] == (submitter if method == "fork" else None), result
        assert (result["ppid"] == submitter) == (method != "forkserver"), result
    if max_tasks_per_child:
        assert len({r["pid"] for r in results}) >= TASKS // max_tasks_per_child

    # Spans: a PRODUCER in the submitter, its CONSUMER child in the worker that ran the task.
    spans = spans_by_pid(tmp_path)
    producers = [s for s in spans[submitter] if s["name"] == f"{CHATTY} ray.remote"]
    consumers = {
        s["parent_id"]: s for pid, lines in spans.items() if pid != submitter for s in lines
        if s["name"] == f"{CHATTY} ray.remote_worker"
    }  # fmt: skip
    assert len(producers) == TASKS and len(consumers) == TASKS
    worker_pids = {r["pid"] for r in results}
    for producer in producers:
        consumer = consumers[sid(producer)]
        assert tid(consumer) == tid(producer)
        assert int(consumer["attributes"]["ray.pid"]) in worker_pids
        assert [e["name"] for e in consumer["events"]] == ["RUNNING", "FINISHED"]

    # Task events, as event log records: each task's lifecycle, submitter's half and worker's half.
    records = [r for lines in logs_by_pid(tmp_path).values() for r in lines]
    states: dict[str, list[str]] = {}
    for record in sorted((r for r in records if r.get("event_name")), key=lambda r: r["timestamp"]):
        if "taskLifecycleEvent" in record["body"]:
            lifecycle = from_log_body(record["body"]).task_lifecycle_event
            names = [TaskStatus.Name(t.state) for t in lifecycle.state_transitions]
            states.setdefault(lifecycle.task_id.hex(), []).extend(names)
    assert len(states) == TASKS + 4  # the chatty tasks, and the helper's four pid_of tasks
    assert all(transitions == FINISHED for transitions in states.values()), states
    task_ids = {c["attributes"]["ray.task_id"] for c in consumers.values()}
    assert task_ids <= set(states)

    # Task logs: prints and logging as records inside the execution span, echoed by the submitter.
    output = [r for r in records if not r.get("event_name")]
    by_span = {sid(c): c for c in consumers.values()}
    bodies = sorted(r["body"] for r in output)
    assert bodies == sorted(f"{w} {n}" for w in ("hello", "oops", "careful") for n in range(TASKS))
    for record in output:
        span = by_span[record["span_id"]]
        assert record["trace_id"] == tid(span)
    assert sorted(re.findall(r"^\(chatty pid=\d+\) (hello \d)$", stdout, re.M)) == [
        f"hello {n}" for n in range(TASKS)
    ]
    for word in ("oops", "careful"):
        found = re.findall(rf"^\(chatty pid=\d+\) ({word} \d)$", stderr, re.M)
        assert sorted(found) == [f"{word} {n}" for n in range(TASKS)], stderr[-2000:]
    assert "Traceback" not in stderr


def test_arguments_the_pool_refuses_raise_as_they_do_there_and_leave_no_thread() -> None:
    """fork cannot replace workers, so ProcessPoolExecutor refuses it with max_tasks_per_child."""
    fork = multiprocessing.get_context("fork")
    with pytest.raises(ValueError) as plain:
        ProcessPoolExecutor(2, fork, max_tasks_per_child=2)
    with pytest.raises(ValueError) as traced:
        TracedProcessPoolExecutor(2, fork, max_tasks_per_child=2)
    assert str(traced.value) == str(plain.value)
    assert not [t for t in threading.enumerate() if t.name == "ray-otel-events-task-logs"]
