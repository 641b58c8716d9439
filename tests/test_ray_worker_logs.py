"""Real Ray workers' output kept by the local tracing hook, beside its spans.

`ray start --tracing-startup-hook=<our local hook>`: a task's print is written, with Ray's task id
and attempt and the span's ids, as a JSON line in `<spans dir>/<pid>.logs.jsonl`. (The OTLP hook's
side, lines stored by `serve` and read back from its store file, runs on the shared cluster of
tests/test_ray_user_path.py.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.agg_procs import run_json_script

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

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
