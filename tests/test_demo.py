"""`ray-otel-events demo` end to end: real sink, aggregator and worker processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path


def test_demo_delivers_every_event_and_says_so(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "demo", "--tasks", "12", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    delivered = Counter(json.loads(line)["eventType"] for line in lines)
    assert delivered["TASK_DEFINITION_EVENT"] == 12
    assert delivered["ACTOR_DEFINITION_EVENT"] == 2
    assert {"DRIVER_JOB_DEFINITION_EVENT", "NODE_DEFINITION_EVENT", "WORKER_DEFINITION_EVENT"} <= set(
        delivered
    )
    total_line = next(line for line in proc.stdout.splitlines() if line.startswith("total"))
    assert int(total_line.split()[3]) == len(lines)  # the summary's delivered column is the file's truth
    assert "every event sent was delivered or counted" in proc.stdout
    job = next(json.loads(x) for x in lines if "DRIVER_JOB_DEFINITION" in x)["driverJobDefinitionEvent"][
        "jobId"
    ]
    tasks = [json.loads(x)["taskLifecycleEvent"] for x in lines if "TASK_LIFECYCLE" in x]
    assert {t["jobId"] for t in tasks} == {job}  # events from spans and by hand join on one job
    assert "demo driver" in proc.stdout and "ray.remote_worker" in proc.stdout  # the trace tree
    assert list((tmp_path / "spans").glob("*.json"))
    failed = [json.loads(x) for x in lines if '"FAILED"' in x]
    assert failed and all("rayErrorInfo" in e["taskLifecycleEvent"] for e in failed)
