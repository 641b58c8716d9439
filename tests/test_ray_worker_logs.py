"""Real Ray workers' output kept after the cluster is gone.

`ray start --tracing-startup-hook=<our OTLP hook>` with OTLP going to `serve` (and Ray's own events
too): a task prints to stdout and stderr and logs a warning, an actor prints in its constructor and
in a method. Once the cluster is stopped, `ray-otel-events logs TASK_ID` (against `serve`, and
against the store file after `serve` has stopped too) shows each line with Ray's own task id,
attempt, job id, actor id, worker pid and the span's trace and span ids.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.agg_procs import CliServer, cli_in_process, run_json_script, start

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

HOOK = "ray_otel_events.tracing.setup_otlp_tracing:setup_tracing"
WORKLOAD = """
import json, logging, os, sys, time, urllib.error, urllib.request
import ray
ray.init()

@ray.remote
def chatty(x):
    print(f"hello from chatty {x}")
    print("a line to stderr", file=sys.stderr)
    logging.getLogger("user.code").warning("logged warning %d", x)
    print("no newline at the end", end="")
    return ray.get_runtime_context().get_task_id(), os.getpid()

@ray.remote
def quiet():
    return 1

@ray.remote
class Speaker:
    def __init__(self):
        print("actor constructed")

    def speak(self):
        print("actor speaks")
        ctx = ray.get_runtime_context()
        return ctx.get_task_id(), ctx.get_actor_id()

task_id, pid = ray.get(chatty.remote(7))
ray.get(quiet.remote())
speaker = Speaker.remote()
method_id, actor_id = ray.get(speaker.speak.remote())

def stored(task):
    try:
        with urllib.request.urlopen(f"{sys.argv[1]}/api/ui/tasks/{task}/logs", timeout=10) as answer:
            return {line["body"] for line in json.load(answer)["logs"]}
    except urllib.error.HTTPError:
        return set()

# Ray ends the job's workers and actors without exit hooks: the job lasts until serve holds their
# lines (the hook sends its log batches every 100 ms here).
wanted = {
    task_id: {"hello from chatty 7", "a line to stderr", "logged warning 7"},
    method_id: {"actor speaks"},
    "ffffffffffffffff" + actor_id: {"actor constructed"},
}
deadline = time.monotonic() + 60
while not all(bodies <= stored(task) for task, bodies in wanted.items()):
    assert time.monotonic() < deadline, {task: stored(task) for task in wanted}
    time.sleep(0.1)
print(json.dumps({"task_id": task_id, "pid": pid, "method_id": method_id, "actor_id": actor_id,
                  "job_id": ray.get_runtime_context().get_job_id()}))
"""


def _logs(task_id: str, *source: str) -> list[dict[str, Any]]:
    """`ray-otel-events logs TASK_ID --format json`, answered in this process (a reader: half a
    second saved per answer, and the waits below ask again and again)."""
    out = cli_in_process("logs", task_id, *source, "--format", "json")
    assert out.returncode == 0, out.stderr
    lines: list[dict[str, Any]] = json.loads(out.stdout)
    return lines


def test_worker_prints_and_logging_are_stored_with_rays_ids(servers: list[CliServer], tmp_path: Path) -> None:
    from helpers.ray_cluster import ray_cluster

    store = tmp_path / "events.sqlite3"
    serve = start(servers, "serve", "--store", str(store))
    base = f"http://{serve.address}"
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": base,
        "OTEL_BLRP_SCHEDULE_DELAY": "100",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with ray_cluster(f"{base}/v1/ray-events", tracing_hook=HOOK, extra_env=otel) as cluster:
        ids, stdout, stderr = run_json_script([sys.executable, "-c", WORKLOAD, base], cluster.env, 300)
        # Ray's own echo to the driver still works: our capture only adds to the streams.
        assert "hello from chatty 7" in stdout + stderr
    task_bodies = {"hello from chatty 7", "a line to stderr", "logged warning 7"}
    serve.stop()  # the cluster and serve both gone: the store file alone answers
    lines = _logs(ids["task_id"], "--store", str(store))
    by_body = {line["body"]: line for line in lines}
    assert sorted(line["body"] for line in lines if line["body"] in task_bodies) == sorted(task_bodies), lines
    assert not any(body.startswith(":task_name:") for body in by_body)  # Ray's markers are not output
    for body in task_bodies:
        line = by_body[body]
        assert line["task_id"] == ids["task_id"] and line["attempt"] == 0, line
        assert line["job_id"] == ids["job_id"] and line["pid"] == ids["pid"], line
        assert line["actor_id"] is None
        assert len(line["trace_id"]) == 32 and line["trace_id"] != "0" * 32, line
        assert len(line["span_id"]) == 16 and line["span_id"] != "0" * 16, line
    assert by_body["hello from chatty 7"]["stream"] == "stdout"
    assert by_body["a line to stderr"]["stream"] == "stderr"
    assert (
        by_body["logged warning 7"]["severity"] == "WARN" and by_body["logged warning 7"]["stream"] == "log"
    )
    assert len({by_body[b]["span_id"] for b in task_bodies}) == 1  # all inside the one execution span
    method_lines = _logs(ids["method_id"], "--store", str(store))
    speaks = next(line for line in method_lines if line["body"] == "actor speaks")
    assert speaks["actor_id"] == ids["actor_id"] and speaks["task_id"] == ids["method_id"], speaks
    # The actor's constructor ran as its creation task: its line is tied to that task.
    creation = [
        line
        for line in _logs("ffffffffffffffff" + ids["actor_id"], "--store", str(store))
        if line["body"] == "actor constructed"
    ]
    assert creation and creation[0]["actor_id"] == ids["actor_id"], creation


LOCAL_WORKLOAD = """
import json, sys, time
from pathlib import Path
import ray
ray.init()

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


def test_local_hook_writes_worker_output_beside_the_spans(tmp_path: Path) -> None:
    """The local hook: the same records, as JSON lines in `<spans dir>/<pid>.logs.jsonl`."""
    from helpers.ray_cluster import ray_cluster

    spans_dir = tmp_path / "spans"
    local_hook = "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing"
    env = {"RAY_OTEL_EVENTS_SPANS_DIR": str(spans_dir)}
    with ray_cluster("http://127.0.0.1:9/unused", tracing_hook=local_hook, extra_env=env) as cluster:
        task_id = run_json_script([sys.executable, "-c", LOCAL_WORKLOAD, str(spans_dir)], cluster.env, 300)[
            0
        ]["task_id"]

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
