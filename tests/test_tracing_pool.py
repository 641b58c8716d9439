"""TracedProcessPoolExecutor with the local hook, in real processes: spans, links, logs, exceptions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.tracing_procs import LOCAL_HOOK, logs_by_pid, run_pool, script_env, sid, spans_by_pid, tid

from ray_otel_events.otel.log_records import from_log_body

SQUARE = "tracing_workload.square"
RAY_SPAN_KEYS = [
    "name",
    "context",
    "kind",
    "parent_id",
    "start_time",
    "end_time",
    "status",
    "attributes",
    "events",
    "links",
    "resource",
]


def _pairs(spans: dict[int, list[dict[str, Any]]], parent_pid: int, function: str) -> list[tuple[dict, dict]]:
    """(producer in the submitting process, consumer in a worker) per task of `function`."""
    producers = [s for s in spans[parent_pid] if s["name"] == f"{function} ray.remote"]
    consumers = {
        s["parent_id"]: s
        for pid, lines in spans.items()
        if pid != parent_pid
        for s in lines
        if s["name"] == f"{function} ray.remote_worker"
    }
    return [(p, consumers.get(sid(p))) for p in producers]


@pytest.mark.parametrize(
    "start_method,max_tasks_per_child",
    [("fork", None), ("spawn", 2)],
    ids=["fork-os_exit", "spawn-max_tasks_per_child"],
)
def test_every_span_lands_although_workers_end_with_os_exit(
    tmp_path: Path, start_method: str, max_tasks_per_child: int | None
) -> None:
    """Pool workers end with os._exit (no atexit), here after their last task or after every 2 tasks."""
    spec = {
        "hook": LOCAL_HOOK,
        "tasks": 9,
        "start_method": start_method,
        "max_tasks_per_child": max_tasks_per_child,
        "max_workers": 2,
    }
    summary, stderr = run_pool(spec, script_env(tmp_path))
    assert summary["squares"] == [i * i for i in range(9)]
    # Our hook's provider: every submission span was deferred (created off the submitting thread).
    assert summary["provider"] == "CachingTracerProvider" and summary["deferred_spans"] == 13
    spans = spans_by_pid(tmp_path)
    parent = summary["pid"]
    workers = set(spans) - {parent}
    if max_tasks_per_child:
        assert len(workers) >= 5, "13 tasks at 2 per child need at least 7 workers over time"
    pairs = _pairs(spans, parent, SQUARE)
    assert len(pairs) == 9
    for producer, consumer in pairs:
        assert consumer is not None, f"no worker span for {sid(producer)}; stderr: {stderr[-2000:]}"
        assert tid(consumer) == tid(producer)
        assert producer["kind"] == "SpanKind.PRODUCER" and consumer["kind"] == "SpanKind.CONSUMER"
        assert consumer["attributes"]["ray.pid"] != producer["attributes"]["ray.pid"]
    # pid_of x4 ran too, and nothing else: every consumer has its producer.
    worker_spans = [s for pid in workers for s in spans[pid]]
    assert len(worker_spans) == 13
    assert "Traceback" not in stderr


def test_parent_child_custom_spans_and_the_line_format(tmp_path: Path) -> None:
    summary, _ = run_pool(
        {"hook": LOCAL_HOOK, "tasks": 2, "custom": True, "map_chunks": 5}, script_env(tmp_path)
    )
    assert summary["mapped"] == [i * i for i in range(5)]
    spans = spans_by_pid(tmp_path)
    parent = summary["pid"]
    custom = summary["custom"]
    worker = spans[custom["pid"]]
    by_id = {sid(s): s for lines in spans.values() for s in lines}
    outer = by_id["0x" + custom["outer"]]
    inner = by_id["0x" + custom["inner"]]
    consumer = by_id[outer["parent_id"]]
    producer = by_id[consumer["parent_id"]]
    assert inner["parent_id"] == sid(outer)
    assert consumer["name"] == "tracing_workload.with_custom_spans ray.remote_worker"
    assert producer["name"] == "tracing_workload.with_custom_spans ray.remote"
    assert producer in spans[parent] and consumer in worker and outer in worker
    assert {tid(s) for s in (inner, outer, consumer, producer)} == {tid(producer)}
    # Ray's attributes, and the state transitions of the attempt as span events.
    attrs = consumer["attributes"]
    assert attrs["ray.remote"] == "function" and attrs["ray.function"] == "tracing_workload.with_custom_spans"
    assert attrs["ray.pid"] == str(custom["pid"])
    assert (
        len(attrs["ray.node_id"]) == 56
        and len(attrs["ray.worker_id"]) == 56
        and len(attrs["ray.task_id"]) == 48
    )
    assert attrs["ray.job_id"] == producer["attributes"]["ray.job_id"]
    assert [e["name"] for e in consumer["events"]] == ["RUNNING", "FINISHED"]
    # map(chunksize=2) over 5 items: 3 chunks, each one traced task named after the function.
    assert len(_pairs(spans, parent, SQUARE)) == 2 + 3
    # The exact line format of Ray's bundled hook: to_json(indent=None), same keys in the same order.
    raw = (tmp_path / f"{parent}.json").read_text().splitlines()[0]
    assert list(json.loads(raw)) == RAY_SPAN_KEYS
    assert ", " in raw and "\n" not in raw and not raw.startswith(" ")
    assert not list(tmp_path.glob("*.logs.jsonl")), "event log records are opt-in for the local hook"
    # No aggregator and no log records: no event processor, so no span is marked as handled.
    assert all("ray_otel_events.producer" not in s["attributes"] for lines in spans.values() for s in lines)


def test_exceptions_reach_the_caller_unchanged_and_mark_the_span(tmp_path: Path) -> None:
    summary, _ = run_pool({"hook": LOCAL_HOOK, "fail": True}, script_env(tmp_path))
    failure = summary["failure"]
    assert failure["type"] == "TaskFailure"
    assert failure["args"] == [7, "task failed with 7"] and failure["code"] == 7
    assert 'in fail\n    raise TaskFailure(code, f"task failed with {code}")' in failure["cause"]
    spans = spans_by_pid(tmp_path)
    [(producer, consumer)] = _pairs(spans, summary["pid"], "tracing_workload.fail")
    assert consumer["status"]["status_code"] == "ERROR"
    assert consumer["status"]["description"] == "TaskFailure: (7, 'task failed with 7')"
    exception = next(e for e in consumer["events"] if e["name"] == "exception")
    assert exception["attributes"]["exception.type"] == "tracing_workload.TaskFailure"
    assert [e["name"] for e in consumer["events"] if e["name"] != "exception"] == ["RUNNING", "FAILED"]
    assert producer["status"]["status_code"] == "UNSET"


def test_lifecycle_log_records_carry_the_spans_trace_and_span_ids(tmp_path: Path) -> None:
    env = script_env(tmp_path, {"RAY_OTEL_EVENTS_EVENT_LOGS": "1"})  # off by default for this hook
    summary, _ = run_pool({"hook": LOCAL_HOOK, "tasks": 3, "fail": True}, env)
    spans = spans_by_pid(tmp_path)
    logs = logs_by_pid(tmp_path)
    span_ids = {(tid(s), sid(s)): s for lines in spans.values() for s in lines}
    records = [r for lines in logs.values() for r in lines]
    assert records
    for record in records:
        span = span_ids[(record["trace_id"], record["span_id"])]
        event = from_log_body(record["body"])  # the whole RayEvent, losslessly
        assert record["event_name"] == f"ray.{record['attributes']['ray.event_type'].lower()}"
        assert record["severity_text"] == "INFO"
        if span["kind"] == "SpanKind.CONSUMER":
            assert span["attributes"]["ray.task_id"] == event.task_lifecycle_event.task_id.hex()
    # Per task: definition + PENDING_ARGS_AVAIL + SUBMITTED_TO_WORKER from the submitter, RUNNING and
    # FINISHED/FAILED from the worker, all under one task id.
    states: dict[str, list[str]] = {}
    for record in sorted(records, key=lambda r: r["timestamp"]):
        body = record["body"]
        if "taskLifecycleEvent" in body:
            lifecycle = body["taskLifecycleEvent"]
            states.setdefault(lifecycle["taskId"], []).extend(
                t["state"] for t in lifecycle["stateTransitions"]
            )
    finished = ["PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED"]
    failed = ["PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING", "FAILED"]
    assert sorted(states.values()) == sorted([finished] * 7 + [failed])
    definitions = [r for r in records if r["event_name"] == "ray.task_definition_event"]
    assert {r["body"]["taskDefinitionEvent"]["taskId"] for r in definitions} == set(states)
    assert all(r["span_id"] in {sid(s) for s in spans[summary["pid"]]} for r in definitions)


def test_hook_runs_once_in_the_submitter_and_once_in_each_worker(tmp_path: Path) -> None:
    log = tmp_path / "hook.log"
    env = script_env(tmp_path, {"TRACING_TEST_HOOK_LOG": str(log)})
    summary, _ = run_pool(
        {
            "hook": "tracing_workload:counting_hook",
            "tasks": 6,
            "start_method": "spawn",
            "max_tasks_per_child": 2,
        },
        env,
    )
    pids = [int(line) for line in log.read_text().split()]
    assert len(pids) == len(set(pids)), "a process ran the hook twice"
    assert summary["pid"] in pids
    assert set(summary["worker_pids"]) <= set(pids) and len(pids) >= 1 + 5


def test_a_users_own_hook_from_our_building_blocks(tmp_path: Path) -> None:
    user_dir = tmp_path / "user"
    env = script_env(tmp_path / "unused", {"USER_SPANS_DIR": str(user_dir)})
    summary, stderr = run_pool(
        {"hook": "tracing_workload:user_hook", "tasks": 3, "start_method": "spawn"}, env
    )
    spans = spans_by_pid(user_dir)
    assert len(_pairs(spans, summary["pid"], SQUARE)) == 3
    assert all(consumer is not None for _, consumer in _pairs(spans, summary["pid"], SQUARE)), stderr
    assert not (tmp_path / "unused").exists()


BAGGAGE_SCRIPT = """
import json, sys
from opentelemetry import baggage, context, trace
from ray_otel_events.executor import TracedProcessPoolExecutor

def seen():
    span_context = trace.get_current_span().get_span_context()
    return baggage.get_baggage("tenant"), span_context.trace_id

if __name__ == "__main__":
    with TracedProcessPoolExecutor(1, tracing_startup_hook=sys.argv[1]) as pool:
        token = context.attach(baggage.set_baggage("tenant", "a b"))
        with trace.get_tracer("t").start_as_current_span("outer") as outer:
            with_baggage = pool.submit(seen).result()
        context.detach(token)
        plain = pool.submit(seen).result()
    print(json.dumps([with_baggage[0], with_baggage[1] == outer.get_span_context().trace_id, plain[0]]))
"""


def test_baggage_travels_with_the_task_and_only_with_it(tmp_path: Path) -> None:
    """A submitter's baggage makes the task's context travel as a full carrier: the task sees it,
    in the submitter's trace; a task submitted without baggage sees none."""
    proc = subprocess.run(
        [sys.executable, "-c", BAGGAGE_SCRIPT, LOCAL_HOOK],
        env=script_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["a b", True, None]
