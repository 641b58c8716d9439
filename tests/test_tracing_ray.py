"""Our hooks in real Ray 2.60: `ray start --tracing-startup-hook` and `ray.init(_tracing_startup_hook=)`.

Driver and worker spans land in the spans folder with Ray's parent/child links, custom spans in
tasks and actor methods nest under their execution spans, and the task events derived from the
spans reach a real aggregator (and its sink). The local hook also keeps a task's output: a print is
written, with Ray's task id and attempt and the span's ids, as a JSON line in
`<spans dir>/<pid>.logs.jsonl` (the OTLP hook's side, lines stored by `serve` and read back from its
store file, runs on the shared cluster of tests/test_ray_user_path.py). Each cluster has its own
ports and temp dir, and only its own processes are stopped (by pid), never with `ray stop`, which
would stop every cluster here.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.agg_procs import CliServer, free_port, read_jsonl, run_json_script
from helpers.ray_cluster import start_head, stop_cluster
from helpers.tracing_procs import HELPERS, LOCAL_HOOK, script_env, sid, spans_by_pid

pytest.importorskip("ray")
if not Path("/proc/self/cmdline").exists():
    pytest.skip("finds the cluster's processes through /proc", allow_module_level=True)

pytestmark = pytest.mark.ray
DRIVER = str(HELPERS / "tracing_ray_driver.py")
# A bare ray.init() otherwise turns token auth on and writes ~/.ray/auth_token, which then breaks
# every later cluster on this machine that was started without it.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _run_driver(*args: str, env: dict[str, str]) -> dict[str, Any]:
    summary: dict[str, Any] = run_json_script([sys.executable, DRIVER, *args], env, 300)[0]
    return summary


def _wait_for_spans(spans_dir: Path, summary: dict[str, Any], timeout_s: float = 60.0) -> None:
    """Until the workload's last spans are on disk. An actor call's span is written before the call
    returns; a task's within 50 ms in the background or, at the latest, when Ray ends the worker
    after the job (atexit). Under load that can be after the driver has exited."""
    wanted = {"0x" + summary[k]["span_id"] for k in ("leaf", "mid", "acc")}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        spans = [s for lines in spans_by_pid(spans_dir).values() for s in lines]
        if wanted <= {sid(s) for s in spans} and any(
            s["name"] == "__main__.boom ray.remote_worker" for s in spans
        ):
            return
        time.sleep(0.1)


def _check_trace(spans_dir: Path, summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One trace under the driver's root span, linked across driver, task and actor processes."""
    _wait_for_spans(spans_dir, summary)
    spans = spans_by_pid(spans_dir)
    driver = summary["pid"]
    assert driver in spans, f"no driver span file in {sorted(spans)}"
    by_id = {sid(s): s for lines in spans.values() for s in lines}
    root = by_id["0x" + summary["root"]]
    assert root["name"] == "driver-root" and root["parent_id"] is None
    trace_ids = {s["context"]["trace_id"] for s in by_id.values()}
    assert trace_ids == {root["context"]["trace_id"]}

    def chain(span_id: str) -> list[str]:
        names = []
        span: dict[str, Any] | None = by_id["0x" + span_id]
        while span is not None:
            names.append(span["name"])
            span = by_id.get(span["parent_id"]) if span["parent_id"] else None
        return names

    assert chain(summary["leaf"]["span_id"]) == [
        "custom-in-task",
        "__main__.leaf ray.remote_worker",
        "__main__.leaf ray.remote",
        "driver-root",
    ]
    assert chain(summary["mid"]["span_id"]) == [
        "custom-in-task",
        "__main__.leaf ray.remote_worker",
        "__main__.leaf ray.remote",  # submitted from inside mid, in mid's worker
        "__main__.mid ray.remote_worker",
        "__main__.mid ray.remote",
        "driver-root",
    ]
    assert chain(summary["acc"]["span_id"]) == [
        "custom-in-actor",
        "Acc.add ray.remote_worker",
        "Acc.add ray.remote",
        "driver-root",
    ]
    # Each span sits in the file of the process that made it; the execution spans in workers.
    for pid, lines in spans.items():
        for span in lines:
            if "ray.pid" in span["attributes"]:
                assert span["attributes"]["ray.pid"] == str(pid)
    assert summary["leaf"]["pid"] != driver and summary["acc"]["pid"] in spans
    boom = next(s for s in by_id.values() if s["name"] == "__main__.boom ray.remote_worker")
    assert boom["status"] == {"status_code": "ERROR", "description": "ValueError: traced failure"}
    assert summary["boom"].startswith("RayTaskError")
    return by_id


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`ray start --head --tracing-startup-hook=<our local hook>`, with an aggregator and sink for events."""
    base = tmp_path_factory.mktemp("ray-cli")
    sink = CliServer("sink", "--out", str(base / "sink.jsonl"))
    aggregator = CliServer("aggregator", "--export-addr", f"http://{sink.address}/v1/events")
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray puts unix sockets in it
    port = free_port()
    env = script_env(
        base / "spans",
        {
            "RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS": aggregator.address,
            "RAY_OTEL_EVENTS_SYNC_TASK_EVENTS": "1",
            "RAY_ADDRESS": f"127.0.0.1:{port}",
            **RAY_ENV,
        },
    )
    try:
        start_head(env, temp_dir, port, num_cpus=2, tracing_hook=LOCAL_HOOK)
        yield {
            "env": env,
            "spans": base / "spans",
            "sink": sink,
            "aggregator": aggregator,
            "out": base / "sink.jsonl",
            "temp_dir": temp_dir,
        }
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        aggregator.close()
        sink.close()


LOCAL_WORKLOAD = """
import json, sys, time
from pathlib import Path
import ray
ray.init(runtime_env={"env_vars": json.loads(sys.argv[2])})

@ray.remote
def chatty():
    print("local hook line")
    return ray.get_runtime_context().get_task_id()

task_id = ray.get(chatty.remote())
# the job lasts until the worker has written its line (Ray ends workers without exit hooks)
deadline = time.monotonic() + 60
while not any("local hook line" in p.read_text() for p in Path(sys.argv[1]).glob("*.logs.jsonl")):
    assert time.monotonic() < deadline, "the worker's line was never written"
    time.sleep(0.1)
print(json.dumps({"task_id": task_id}))
"""


def test_local_hook_writes_worker_output_beside_the_spans(
    cli_cluster: dict[str, Any], tmp_path: Path
) -> None:
    """The local hook: the same records, as JSON lines in `<spans dir>/<pid>.logs.jsonl`.

    On the module's `ray start` cluster (a cluster's start is most of a live test's time), before
    the test below stops it: this job's driver and workers (its runtime_env) get a spans folder of
    their own and no aggregator, so nothing of it reaches the folder and sink the test below reads
    whole."""
    spans_dir = tmp_path / "spans"
    own = {
        "RAY_OTEL_EVENTS_SPANS_DIR": str(spans_dir),
        "RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS": "",
        "RAY_OTEL_EVENTS_SYNC_TASK_EVENTS": "0",
    }
    env = {**cli_cluster["env"], **own}
    task_id = run_json_script(
        [sys.executable, "-c", LOCAL_WORKLOAD, str(spans_dir), json.dumps(own)], env, 300
    )[0]["task_id"]

    def found() -> dict[str, Any] | None:
        for path in spans_dir.glob("*.logs.jsonl"):
            for text in path.read_text().splitlines():
                record = json.loads(text)
                if record.get("body") == "local hook line":
                    return record
        return None

    record = found()  # the driver waited for it
    assert record is not None, list(spans_dir.iterdir())
    attributes = record["attributes"]
    assert attributes["ray.task_id"] == task_id and attributes["ray.task_attempt"] == 0, record
    assert attributes["log.iostream"] == "stdout" and "ray.job_id" in attributes
    assert record["trace_id"] not in ("", "0x" + "0" * 32) and record["span_id"] not in ("", "0x" + "0" * 16)


def test_ray_start_hook_spans_link_across_processes_and_events_reach_the_aggregator(
    cli_cluster: dict[str, Any],
) -> None:
    summary = _run_driver("connect", env=cli_cluster["env"])
    by_id = _check_trace(cli_cluster["spans"], summary)

    # Task events: the driver flushed at exit; workers sent each task's events before it returned
    # (RAY_OTEL_EVENTS_SYNC_TASK_EVENTS: Ray kills the actor without exit hooks when the job ends).
    # Wait (bounded) for the last terminal state to pass the aggregator to the sink.
    def terminal_states() -> int:
        return sum(
            t["state"] in ("FINISHED", "FAILED")
            for e in read_jsonl(cli_cluster["out"])
            for t in e.get("taskLifecycleEvent", {}).get("stateTransitions", [])
        )

    deadline = time.monotonic() + 60
    while terminal_states() < 6 and time.monotonic() < deadline:  # leaf x2, mid, boom, Acc.__init__, add
        time.sleep(0.1)
    stop_cluster(cli_cluster["temp_dir"])
    stats = cli_cluster["aggregator"].stop()
    cli_cluster["sink"].stop()
    events = read_jsonl(cli_cluster["out"])
    assert stats["received_total"] >= len(events) > 0
    definitions = {
        e["taskDefinitionEvent"]["taskId"]: e["taskDefinitionEvent"]
        for e in events
        if "taskDefinitionEvent" in e
    }
    names = sorted(d["taskName"] for d in definitions.values())
    assert names == ["Acc.__init__", "boom", "leaf", "leaf", "mid"]
    states: dict[str, list[str]] = {}
    for e in sorted((e for e in events if "taskLifecycleEvent" in e), key=lambda e: e["timestamp"]):
        lifecycle = e["taskLifecycleEvent"]
        states.setdefault(lifecycle["taskId"], []).extend(t["state"] for t in lifecycle["stateTransitions"])
    by_name = {definitions[t]["taskName"]: s for t, s in states.items() if t in definitions}
    assert by_name["mid"] == ["PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED"]
    assert sorted(by_name) == ["Acc.__init__", "boom", "leaf", "mid"]
    assert all(s[-1] in ("FINISHED", "FAILED") for s in states.values()), states
    assert by_name["boom"] == ["PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING", "FAILED"]
    actor_defs = [e["actorDefinitionEvent"] for e in events if "actorDefinitionEvent" in e]
    assert [a["className"] for a in actor_defs] == ["Acc"]
    actor_task_defs = [
        e["actorTaskDefinitionEvent"]["actorTaskName"] for e in events if "actorTaskDefinitionEvent" in e
    ]
    assert actor_task_defs == ["Acc.add"]
    # The nested leaf's parent is mid (derived ids on both sides of each span pair).
    mid_id = next(t for t, d in definitions.items() if d["taskName"] == "mid")
    nested = [d for d in definitions.values() if d["taskName"] == "leaf" and d["parentTaskId"] == mid_id]
    assert len(nested) == 1
    # Ray's own task spans, taken by our processor, say so (a bridge must not derive their events again).
    task_spans = [s for s in by_id.values() if s["name"].endswith((" ray.remote", " ray.remote_worker"))]
    assert len(task_spans) == 12
    assert {s["attributes"].get("ray_otel_events.producer") for s in task_spans} == {
        "task_event_span_processor"
    }


def test_ray_init_hook_spans_link_across_processes(tmp_path: Path) -> None:
    temp_dir = tempfile.mkdtemp(prefix="ri", dir="/tmp")
    try:
        env = script_env(tmp_path / "spans", RAY_ENV)
        summary = _run_driver("init", LOCAL_HOOK, temp_dir, env=env)
        _check_trace(tmp_path / "spans", summary)
        # A processor that does not say it reads spans only would make every worker's spans SDK spans
        # (the task-output keeper once did): twice the cost of a traced task in the worker.
        assert summary["leaf"]["execution_span"] == "DirectSpan"
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
