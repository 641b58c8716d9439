"""The lineage mode: user spans and task logs under the spans the bridge makes from Ray's events.

First the tracer and log processor alone, with the SDK's in-memory exporter and a given lineage.
Then one live Ray 2.60 cluster, wired for events only (no tracing hook), exports its events to the
bridge, which sends its spans to a real Arize Phoenix server and its records to a real `serve`; a
driver sets up the lineage mode by Ray's `worker_process_setup_hook` (its spans to Phoenix, its lines
to `serve`) and runs nested tasks, a sync and an async actor, a task that succeeds on its retry and
one that fails, each starting a span and writing a line inside and outside it. Phoenix's own REST
API answers: every task is a span, in Ray's tree (a nested task under its parent's attempt), the
failures ERROR; every user span has the trace and, as its parent, the span the bridge made for the
very attempt it ran in; the driver's span sits under the job's span. At `serve`, the lines carry
the same ids. Last, a second, small cluster started with `ray-env --lineage`'s variable sets up the
workers of a driver that gives no runtime_env (the cluster-wide way), and its user span is looked
for only once the cluster is stopped: nothing waited in a worker to be sent.
"""

from __future__ import annotations

import json
import re
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
from helpers.phoenix import Phoenix
from helpers.ray_cluster import ray_cluster, ray_env
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags
from test_bridge_export_events import FIXTURE, JOB, SESSION, SPANS, _by_file

from ray_otel_events.config import ConfigError, LineageConfig
from ray_otel_events.events.ray_releases import WORKER_SETUP_HOOK_VARIABLE
from ray_otel_events.otel.export_spans import (
    dataset_span_id,
    operator_span_id,
    train_attempt_span_id,
    train_run_span_id,
)
from ray_otel_events.otel.from_ray_events import job_span_id, trace_id_for_job
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


with trace.get_tracer("lineage-test").start_as_current_span("script") as span:
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

# The bridge's span of every task the workload runs (name -> attempts): the driver's (Ray's driver
# task) and Waiter's constructor too, which start no user span.
TASK_SPANS = {
    "driver": 1,
    "leaf": 2,
    "parent": 1,
    "retried": 2,
    "boom": 1,
    "Counter.__init__": 1,
    "Counter.add": 2,
    "Waiter.__init__": 1,
    "Waiter.wait": 2,
}


@dataclass
class Run:
    serve: str
    trace_id: str
    spans: list[dict[str, Any]]
    bridge: str  # the bridge's address, its spans going to `phoenix`
    phoenix: Phoenix


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
            found.setdefault(span["attributes"]["ray.task_id"], []).append(span)
    return found


def _listing(spans: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(name, span id, parent span id) of each span: what an assertion about the tree shows."""
    return sorted((s["name"][:40], s["span_id"], s["parent_span_id"]) for s in spans)


def _tree_text(spans: list[dict[str, Any]]) -> str:
    """The trace as an indented tree, children by name: each span's name (a job's cut), its attempt
    and an ERROR status."""
    children: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        children.setdefault(span["parent_span_id"], []).append(span)
    ids = {s["span_id"] for s in spans}
    lines: list[str] = []

    def walk(span: dict[str, Any], depth: int) -> None:
        name = span["name"].split("\n", 1)[0][:40]
        attempt = span["attributes"].get("ray.task_attempt")
        notes = ([f"attempt {attempt}"] if attempt is not None else []) + (
            ["ERROR"] if span["status"] == "ERROR" else []
        )
        lines.append("  " * depth + name + (f"  ({', '.join(notes)})" if notes else ""))
        for child in sorted(children.get(span["span_id"], []), key=lambda s: s["name"]):
            walk(child, depth + 1)

    for root in sorted((s for s in spans if s["parent_span_id"] not in ids), key=lambda s: s["name"]):
        walk(root, 0)
    return "\n".join(lines)


def _task_names(spans: list[dict[str, Any]]) -> dict[str, int]:
    names = [s["name"] for by_task in _task_spans(spans).values() for s in by_task]
    return {name: names.count(name) for name in sorted(set(names))}


def _complete(spans: list[dict[str, Any]]) -> bool:
    users = _user_spans(spans)
    counts = {name: sum(s["name"] == name for s in users) for name in USER_SPANS}
    tasks = _task_spans(spans)
    return (
        counts == USER_SPANS
        and all(len(tasks.get(s["attributes"]["test.task_id"], [])) >= 1 for s in users)
        and len(tasks.get(_task_of(users, "user retried"), [])) == 2
        and any(s["name"].startswith("job ") for s in spans)
        and any(s["name"] == "script" for s in spans)
        and _task_names(spans) == TASK_SPANS
    )


def _task_of(users: list[dict[str, Any]], name: str) -> str:
    return next((s["attributes"]["test.task_id"] for s in users if s["name"] == name), "")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    folder = tmp_path_factory.mktemp("lineage")
    phoenix = Phoenix(folder / "phoenix")  # first: it takes longest to start
    serve = CliServer("serve", "--store", str(folder / "events.sqlite3"))
    base = f"http://{serve.address}"
    # Spans to Phoenix (the bridge's from Ray's events, the workers' and the driver's own), the
    # records (Ray's events as state, the tasks' lines) to serve.
    signals = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{phoenix.url}/v1/traces",
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": f"{base}/v1/logs",
    }
    bridge = start_bridge("--terminal-grace", "1", env=signals)
    otel = {
        **signals,
        "RAY_OTEL_EVENTS_SPOOL_DIR": str(folder / "spool"),
    }
    try:
        # Ready before the cluster starts: Phoenix's start takes both cores for a while, and a
        # cluster started beside it may lose its GCS's events (job, actors) to Ray's aggregator.
        phoenix.wait_ready()
        with ray_cluster(url(bridge, "/v1/ray-events"), extra_env=otel) as cluster:
            run = subprocess.run(
                [sys.executable, "-c", WORKLOAD],
                env={**cluster.env, "TRACEPARENT": CALLER},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert run.returncode == 0, run.stdout + run.stderr
            # Ray echoes the workers' lines to the driver's stdout from a thread of its own, some
            # after the driver's own line and, under load, one written between its text and its
            # newline: the driver's line is found wherever it stands.
            reported = re.search(r'\{"trace_id": "([0-9a-f]{32})"\}', run.stdout)
            assert reported is not None, run.stdout
            trace_id = reported[1]
            deadline = time.monotonic() + 90
            while not _complete(spans := phoenix.spans(trace_id)):
                assert time.monotonic() < deadline, (
                    f"Phoenix never held every span of the trace: {sorted(s['name'] for s in spans)}"
                )
                time.sleep(0.5)  # each look is a query Phoenix answers from its database
        yield Run(base, trace_id, spans, url(bridge), phoenix)
    finally:
        bridge.close()
        serve.close()
        phoenix.close()


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
def test_the_bridges_task_spans_are_rays_tree_with_its_failures(run: Run) -> None:
    """Every task a span, in Ray's tree: the driver's task under the job, what the driver submits
    (tasks, actor constructors and calls, an async actor's too) under the driver's task, a nested
    task under its parent's attempt; the failing task and the retried task's first attempt ERROR,
    the attempt that succeeded not."""
    users = _user_spans(run.spans)
    tasks = _task_spans(run.spans)
    job = next(s for s in run.spans if s["name"].startswith("job "))
    assert _task_names(run.spans) == TASK_SPANS
    by_user = {u["name"]: tasks[u["attributes"]["test.task_id"]] for u in users}
    ((parent,),) = [by_user["user parent"]]
    (driver,) = [s for spans in tasks.values() for s in spans if s["name"] == "driver"]
    leaves = {span["span_id"] for leaf in ("user leaf 0", "user leaf 1") for span in by_user[leaf]}
    assert len(leaves) == 2
    for spans in tasks.values():
        for span in spans:
            expected = job if span is driver else parent if span["span_id"] in leaves else driver
            assert span["parent_span_id"] == expected["span_id"], (span["name"], _listing(run.spans))
    print(_tree_text(run.spans))  # what docs/tracing.md shows (pytest -s)
    ((boom,),) = [by_user["user boom"]]
    assert boom["status"] == "ERROR"
    retried = sorted(by_user["user retried"], key=lambda s: s["attributes"]["ray.task_attempt"])
    assert [s["status"] == "ERROR" for s in retried] == [True, False], retried
    for name, spans in by_user.items():
        if name not in ("user boom", "user retried"):
            assert all(span["status"] != "ERROR" for span in spans), (name, spans)


@pytest.mark.ray
def test_the_drivers_span_is_under_the_jobs_span(run: Run) -> None:
    job = next(s for s in run.spans if s["name"].startswith("job "))
    driver = next(s for s in run.spans if s["name"] == "script")
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
            time.sleep(0.2)
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
def test_the_collectors_datasets_and_train_runs_are_spans_in_phoenix(run: Run) -> None:
    """A live Ray 2.60 head's export files (tests/fixtures/ray-2.60-export-events.jsonl), POSTed to
    the bridge as `ray-otel-events collect` POSTs them: in Phoenix, each dataset a span under its
    job's span with an operator span each, the Train run under the job, its attempt under it and
    the attempt's two workers under that, with the ids the bridge gives (a trace of its own: the
    fixture's session is not this module's cluster's)."""
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    for batch in _by_file(lines):
        body = {"sessionName": SESSION, "nodeId": "", "hostname": "head", "events": batch}
        answer = requests.post(f"{run.bridge}/v1/ray-export-events", json=body, timeout=30)
        assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text
    trace, job = trace_id_for_job(SESSION, JOB).hex(), job_span_id(SESSION, JOB).hex()
    deadline = time.monotonic() + 60
    while len(spans := run.phoenix.spans(trace)) < SPANS:
        assert time.monotonic() < deadline, f"Phoenix holds {sorted(s['name'] for s in spans)}"
        time.sleep(0.5)  # each look is a query Phoenix answers from its database
    assert len(spans) == SPANS, sorted(s["name"] for s in spans)
    children: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        children.setdefault(span["parent_span_id"], []).append(span)
    topology = {  # each dataset's operators, as its last metadata line lists them
        line["event_data"]["dataset_id"]: line["event_data"]["topology"]["operators"]
        for line in lines
        if line["source_type"] == "EXPORT_DATASET_METADATA"
    }
    datasets = [s for s in spans if s["name"].startswith("dataset ")]
    assert sorted(s["attributes"]["ray.dataset_id"] for s in datasets) == sorted(topology)
    for dataset in datasets:
        dataset_id = dataset["attributes"]["ray.dataset_id"]
        assert dataset["span_id"] == dataset_span_id(SESSION, dataset_id).hex()
        assert dataset["parent_span_id"] == job
        operators = topology[dataset_id]
        assert sorted(s["span_id"] for s in children[dataset["span_id"]]) == sorted(
            operator_span_id(SESSION, dataset_id, op["id"]).hex() for op in operators
        )
        assert sorted(s["name"] for s in children[dataset["span_id"]]) == sorted(
            op["name"] for op in operators
        )
    (train,) = [s for s in spans if s["name"] == "train run tiny-run"]
    assert train["span_id"] == train_run_span_id(SESSION, train["attributes"]["ray.train.run_id"]).hex()
    assert train["parent_span_id"] == job
    (attempt,) = children[train["span_id"]]
    attempt_id = attempt["attributes"]["ray.train.attempt_id"]
    assert attempt["span_id"] == train_attempt_span_id(SESSION, attempt_id).hex()
    workers = sorted(s["name"] for s in children[attempt["span_id"]])
    assert workers == ["train worker 0", "train worker 1"]
    assert {s["trace_id"] for s in spans} == {trace}


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
                time.sleep(0.2)
        # Only now, the cluster stopped as `ray stop` stops it (SIGTERM, then SIGKILL), is the user's
        # span looked for: it was in the node's spool before its task returned, and the spool's
        # forwarder outlives the cluster.
        deadline = time.monotonic() + 30
        while not all(found()):
            assert time.monotonic() < deadline, f"the worker's span was lost with the cluster: {found()}"
            time.sleep(0.2)
        (user,), (attempt,) = found()
        assert user["attributes"]["test.task_id"] == reported["task"]
        assert (user["trace_id"], user["parent_span_id"]) == (attempt["trace_id"], attempt["span_id"])
    finally:
        bridge.close()
        serve.close()
