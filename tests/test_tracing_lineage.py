"""The lineage mode: user spans and task logs under the spans the bridge makes from Ray's events.

First the tracer and log processor alone, with the SDK's in-memory exporter and a given lineage.
Then one live Ray 2.60 cluster, wired for events only (no tracing hook), exports its events to the
bridge, which sends its spans and records to a real `serve`; a driver sets up the lineage mode by
Ray's `worker_process_setup_hook` and runs nested tasks, a sync and an async actor, a task that
succeeds on its retry and one that fails, each starting a span and writing a line inside and
outside it. At `serve`, every user span has the trace and, as its parent, the span the bridge made
for the very attempt it ran in; the lines carry the same ids; the driver's span sits under the
job's span. Last, a second, small cluster started with `ray-env --lineage`'s variable sets up the
workers of a driver that gives no runtime_env (the cluster-wide way), and its user span is looked
for only once the cluster is stopped: nothing waited in a worker to be sent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import CliServer
from helpers.bridge_procs import start_bridge, url
from helpers.ray_cluster import ray_cluster, ray_env
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags

from ray_otel_events.config import ConfigError, LineageConfig
from ray_otel_events.events.ray_releases import WORKER_SETUP_HOOK_VARIABLE
from ray_otel_events.tracing.lineage import (
    HOOK,
    LineageLogProcessor,
    LineageTracerProvider,
    caller_links,
)

ATTEMPT = SpanContext(0xA1, 0xB2, is_remote=True, trace_flags=TraceFlags(1))
CALLER = "00-0000000000000000000000000000c0de-00000000000000ca-01"


def _provider(found: tuple[SpanContext, bool] | None, caller: str = "") -> tuple[Any, InMemorySpanExporter]:
    config = LineageConfig.from_env({"TRACEPARENT": caller} if caller else {})
    provider = LineageTracerProvider(lineage=lambda: found, caller_links=caller_links(config))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_a_span_with_no_parent_goes_under_the_attempt_and_its_children_under_it() -> None:
    provider, exporter = _provider((ATTEMPT, False), CALLER)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("outer"), tracer.start_as_current_span("inner"):
        pass
    loose = tracer.start_span("loose")
    loose.end()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    outer, inner = spans["outer"], spans["inner"]
    assert outer.parent is not None and (outer.parent.trace_id, outer.parent.span_id) == (0xA1, 0xB2)
    assert outer.context.trace_id == 0xA1 and inner.context.trace_id == 0xA1
    assert inner.parent is not None and inner.parent.span_id == outer.context.span_id
    assert spans["loose"].parent is not None and spans["loose"].parent.span_id == 0xB2
    assert not outer.links  # the caller's link is the driver's alone


def test_the_drivers_spans_go_under_the_job_linked_to_the_caller() -> None:
    provider, exporter = _provider((ATTEMPT, True), CALLER)
    with provider.get_tracer("t").start_as_current_span("driver"):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.parent is not None and span.parent.span_id == 0xB2
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [(0xC0DE, 0xCA)]


def test_outside_ray_spans_are_left_as_the_sdk_makes_them() -> None:
    provider, exporter = _provider(None)
    with provider.get_tracer("t").start_as_current_span("plain"):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.parent is None and span.context.trace_id not in (0, 0xA1)


def test_a_record_with_no_context_gets_the_attempts_ids_one_with_a_span_keeps_its_own() -> None:
    exporter = InMemoryLogRecordExporter()
    logs = LoggerProvider()
    logs.add_log_record_processor(LineageLogProcessor(lambda: (ATTEMPT, False)))
    logs.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    provider, _ = _provider((ATTEMPT, False))
    logger = logs.get_logger("t")
    logger.emit(body="outside")
    with provider.get_tracer("t").start_as_current_span("user") as span:
        logger.emit(body="inside")
        inside_span = span.get_span_context().span_id
    got = {r.log_record.body: r.log_record for r in exporter.get_finished_logs()}
    assert (got["outside"].trace_id, got["outside"].span_id) == (0xA1, 0xB2)
    assert (got["inside"].trace_id, got["inside"].span_id) == (0xA1, inside_span)


@pytest.mark.parametrize(
    "raw",
    [
        "01-0000000000000000000000000000c0de-00000000000000ca-01",
        "00-00000000000000000000000000000000-00000000000000ca-01",
        "00-c0de-ca-01",
        "not a traceparent",
    ],
)
def test_a_bad_traceparent_is_named(raw: str) -> None:
    with pytest.raises(ConfigError, match="TRACEPARENT"):
        LineageConfig.from_env({"TRACEPARENT": raw})


def test_ray_env_prints_the_setup_hook_line_only_when_asked() -> None:
    assert ray_env("http://127.0.0.1:8265", "--lineage")[WORKER_SETUP_HOOK_VARIABLE] == HOOK
    assert WORKER_SETUP_HOOK_VARIABLE not in ray_env("http://127.0.0.1:8265")


# -- live -------------------------------------------------------------------------------------------
WORKLOAD = f"""
import asyncio
import json
import logging
import threading
import ray
from opentelemetry import trace
from ray_otel_events.tracing import lineage

ray.init(runtime_env={{"worker_process_setup_hook": "{HOOK}"}})
lineage.setup()  # Ray runs the hook in its workers only
log = logging.getLogger("lineage-test")  # a worker's loggers take WARNING and up, as Python's do


def mark(label):
    print(f"outside {{label}}", flush=True)
    task = ray.get_runtime_context().get_task_id()
    tracer = trace.get_tracer("lineage-test")  # in the task: a tracer does not pickle
    with tracer.start_as_current_span(f"user {{label}}", attributes={{"test.task_id": task}}):
        log.warning("inside %s", label)


@ray.remote
def leaf(i):
    mark(f"leaf {{i}}")
    return i


@ray.remote
def parent(n):
    mark("parent")
    seen = []  # a thread the task starts: Ray gives it a made-up task id, no attempt of ours
    thread = threading.Thread(target=lambda: seen.append(lineage.attempt_span_context()))
    thread.start()
    thread.join()
    assert seen == [None], seen
    return sum(ray.get([leaf.remote(i) for i in range(n)]))


@ray.remote(max_retries=1, retry_exceptions=True)
def retried():
    mark("retried")
    if ray._private.worker.global_worker.core_worker.get_current_task_attempt_number() == 0:
        raise RuntimeError("the first attempt fails")
    return "second"


@ray.remote(max_retries=0)
def boom():
    mark("boom")
    raise ValueError("lineage test failure")


@ray.remote
class Counter:
    def __init__(self):
        mark("Counter.__init__")
        self.total = 0

    def add(self, x):
        mark("Counter.add")
        self.total += x
        return self.total


@ray.remote
class Waiter:
    async def wait(self, x):
        await asyncio.sleep(0.01)
        mark(f"Waiter.wait {{x}}")
        return x


with trace.get_tracer("lineage-test").start_as_current_span("driver") as span:
    assert ray.get(parent.remote(2)) == 1
    assert ray.get(retried.remote()) == "second"
    try:
        ray.get(boom.remote())
    except ray.exceptions.RayTaskError:
        pass
    counter = Counter.remote()
    assert ray.get([counter.add.remote(1), counter.add.remote(2)]) == [1, 3]
    waiter = Waiter.remote()
    assert ray.get([waiter.wait.remote(i) for i in range(2)]) == [0, 1]
    trace_id = format(span.get_span_context().trace_id, "032x")
print(json.dumps({{"trace_id": trace_id}}))
"""
# The user spans the workload starts in tasks (label -> how many: the retried task runs twice).
USER_SPANS = {
    "user leaf 0": 1,
    "user leaf 1": 1,
    "user parent": 1,
    "user retried": 2,
    "user boom": 1,
    "user Counter.__init__": 1,
    "user Counter.add": 2,
    "user Waiter.wait 0": 1,
    "user Waiter.wait 1": 1,
}


@dataclass
class Run:
    serve: str
    trace_id: str
    spans: list[dict[str, Any]]


def _trace(serve: str, trace_id: str) -> list[dict[str, Any]]:
    answer = requests.get(f"{serve}/api/ui/traces/{trace_id}", timeout=30)
    if answer.status_code == 404:
        return []
    assert answer.status_code == 200, answer.text
    spans: list[dict[str, Any]] = answer.json()["spans"]
    return spans


def _user_spans(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"].startswith("user ")]


def _task_spans(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The bridge's task spans by task id (one per attempt)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        if not span["name"].startswith("user ") and "ray.task_attempt" in span["attributes"]:
            found.setdefault(span["task_id"], []).append(span)
    return found


def _complete(spans: list[dict[str, Any]]) -> bool:
    users = _user_spans(spans)
    counts = {name: sum(s["name"] == name for s in users) for name in USER_SPANS}
    tasks = _task_spans(spans)
    return (
        counts == USER_SPANS
        and all(len(tasks.get(s["attributes"]["test.task_id"], [])) >= 1 for s in users)
        and len(tasks.get(_task_of(users, "user retried"), [])) == 2
        and any(s["name"].startswith("job ") for s in spans)
        and any(s["name"] == "driver" for s in spans)
    )


def _task_of(users: list[dict[str, Any]], name: str) -> str:
    return next((s["attributes"]["test.task_id"] for s in users if s["name"] == name), "")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    folder = tmp_path_factory.mktemp("lineage")
    serve = CliServer("serve", "--store", str(folder / "events.sqlite3"))
    base = f"http://{serve.address}"
    bridge = start_bridge("--otlp-endpoint", base, "--terminal-grace", "1")
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": base,
        "RAY_OTEL_EVENTS_SPOOL_DIR": str(folder / "spool"),
    }
    try:
        with ray_cluster(url(bridge, "/v1/ray-events"), extra_env=otel) as cluster:
            run = subprocess.run(
                [sys.executable, "-c", WORKLOAD],
                env={**cluster.env, "TRACEPARENT": CALLER},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert run.returncode == 0, run.stdout + run.stderr
            # Ray echoes the workers' lines to the driver's stdout, some after the driver's own.
            reported = next(line for line in run.stdout.splitlines() if line.startswith('{"trace_id"'))
            trace_id = json.loads(reported)["trace_id"]
            deadline = time.monotonic() + 90
            while not _complete(spans := _trace(base, trace_id)):
                assert time.monotonic() < deadline, (
                    f"the trace never held every span: {sorted(s['name'] for s in spans)}"
                )
                time.sleep(0.5)
        yield Run(base, trace_id, spans)
    finally:
        bridge.close()
        serve.close()


@pytest.mark.ray
def test_every_user_span_is_the_child_of_the_bridges_span_of_its_attempt(run: Run) -> None:
    users = _user_spans(run.spans)
    tasks = _task_spans(run.spans)
    assert {s["trace_id"] for s in run.spans} == {run.trace_id}
    by_task: dict[str, list[dict[str, Any]]] = {}
    for user in users:
        by_task.setdefault(user["attributes"]["test.task_id"], []).append(user)
    for task_id, mine in by_task.items():
        attempts = {s["attributes"]["ray.task_attempt"]: s["span_id"] for s in tasks[task_id]}
        parents = sorted(s["parent_span_id"] for s in mine)
        # One user span per attempt (the retried task's two too), each under its own attempt's.
        assert parents == sorted(attempts.values()), (task_id, mine, attempts)
    retried = tasks[_task_of(users, "user retried")]
    assert sorted(s["attributes"]["ray.task_attempt"] for s in retried) == [0, 1]


@pytest.mark.ray
def test_the_drivers_span_is_under_the_jobs_span(run: Run) -> None:
    job = next(s for s in run.spans if s["name"].startswith("job "))
    driver = next(s for s in run.spans if s["name"] == "driver")
    assert driver["parent_span_id"] == job["span_id"] and job["parent_span_id"] == ""


@pytest.mark.ray
def test_lines_carry_the_attempts_ids_outside_a_span_and_the_users_inside(run: Run) -> None:
    users = _user_spans(run.spans)
    tasks = _task_spans(run.spans)
    for name in ("user leaf 0", "user boom", "user Counter.__init__", "user Waiter.wait 1"):
        user = next(s for s in users if s["name"] == name)
        task_id = user["attributes"]["test.task_id"]
        label = name.removeprefix("user ")

        def lines(task_id: str = task_id, label: str = label) -> dict[str, dict[str, Any]]:
            answer = requests.get(f"{run.serve}/api/ui/tasks/{task_id}", timeout=30)
            assert answer.status_code == 200, answer.text
            return {
                line["body"]: line
                for line in answer.json()["logs"]
                if line["body"] in (f"outside {label}", f"inside {label}")
            }

        deadline = time.monotonic() + 30
        while len(found := lines()) < 2:
            assert time.monotonic() < deadline, f"{name}: lines never arrived: {found}"
            time.sleep(0.5)
        (attempt_span,) = [s["span_id"] for s in tasks[task_id]]
        assert (found[f"outside {label}"]["trace_id"], found[f"outside {label}"]["span_id"]) == (
            run.trace_id,
            attempt_span,
        )
        assert (found[f"inside {label}"]["trace_id"], found[f"inside {label}"]["span_id"]) == (
            run.trace_id,
            user["span_id"],
        )


# -- the whole cluster, by ray-env --lineage: a driver that gives no runtime_env --------------------
CLUSTER_WIDE = """
import json
import ray
from opentelemetry import trace
from ray_otel_events.tracing import lineage

ray.init()
lineage.setup()


@ray.remote
def work():
    task = ray.get_runtime_context().get_task_id()
    tracer = trace.get_tracer("lineage-test")
    with tracer.start_as_current_span("user work", attributes={"test.task_id": task}):
        return task


task = ray.get(work.remote())
with trace.get_tracer("lineage-test").start_as_current_span("driver") as span:
    trace_id = format(span.get_span_context().trace_id, "032x")
print(json.dumps({"trace_id": trace_id, "task": task}))
"""


@pytest.mark.ray
def test_ray_env_lineage_sets_up_every_worker_of_the_cluster(tmp_path: Path) -> None:
    serve = CliServer("serve", "--store", str(tmp_path / "events.sqlite3"))
    base = f"http://{serve.address}"
    bridge = start_bridge("--otlp-endpoint", base, "--terminal-grace", "1")
    wiring = ray_env(base, "--lineage")
    assert wiring[WORKER_SETUP_HOOK_VARIABLE] == HOOK
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": base,
        "RAY_OTEL_EVENTS_SPOOL_DIR": str(tmp_path / "spool"),
        WORKER_SETUP_HOOK_VARIABLE: wiring[WORKER_SETUP_HOOK_VARIABLE],  # ray-env's line, at `ray start`
    }
    try:
        with ray_cluster(
            url(bridge, "/v1/ray-events"),
            extra_env=otel,
        ) as cluster:
            run = subprocess.run(
                [sys.executable, "-c", CLUSTER_WIDE],
                env=cluster.env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert run.returncode == 0, run.stdout + run.stderr
            reported = json.loads(next(x for x in run.stdout.splitlines() if x.startswith('{"trace_id"')))

            def found() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
                spans = _trace(base, reported["trace_id"])
                return _user_spans(spans), _task_spans(spans).get(reported["task"], [])

            deadline = time.monotonic() + 90
            while not found()[1]:
                assert time.monotonic() < deadline, f"the task's span never arrived: {found()}"
                time.sleep(0.5)
        # Only now, the cluster stopped as `ray stop` stops it (SIGTERM, then SIGKILL), is the user's
        # span looked for: it was in the node's spool before its task returned, and the spool's
        # forwarder outlives the cluster.
        deadline = time.monotonic() + 30
        while not all(found()):
            assert time.monotonic() < deadline, f"the worker's span was lost with the cluster: {found()}"
            time.sleep(0.5)
        (user,), (attempt,) = found()
        assert user["attributes"]["test.task_id"] == reported["task"]
        assert (user["trace_id"], user["parent_span_id"]) == (attempt["trace_id"], attempt["span_id"])
    finally:
        bridge.close()
        serve.close()
