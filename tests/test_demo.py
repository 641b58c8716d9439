"""`ray-otel-events demo` end to end: real serve, aggregator and worker processes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any


def _cli(*args: str) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_demo_stores_every_event_and_says_so(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_otel_events",
            "demo",
            "--tasks",
            "12",
            "--workdir",
            str(tmp_path),
            "--no-serve",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    store = tmp_path / "events.sqlite3"
    total_line = next(line for line in proc.stdout.splitlines() if line.startswith("total"))
    with sqlite3.connect(store) as db:
        kept = [ids for (ids,) in db.execute("SELECT event_ids FROM state_rows")]
        assert all(isinstance(ids, bytes) for ids in kept)  # each id as its 8-byte hash (kept_ids)
        seen = sum(len(ids) // 8 for ids in kept)
        assert db.execute("SELECT COUNT(*) FROM spans").fetchone()[0] >= 25  # 12 tasks x 2 + the driver
    assert int(total_line.split()[3]) == seen  # the summary's stored column is the store's truth
    assert "every event sent was stored or counted" in proc.stdout
    assert "demo driver" in proc.stdout and "ray.remote_worker" in proc.stdout  # the trace tree
    assert "(simulate pid=" in proc.stdout  # the tasks' prints, echoed as Ray does
    assert list((tmp_path / "spans").glob("*.json"))

    tasks = json.loads(_cli("list", "tasks", "--store", str(store), "--format", "json", "--limit", "100"))
    simulate = [t for t in tasks if t["func_or_class_name"] == "simulate"]
    assert len(simulate) == 12 and len({t["job_id"] for t in tasks}) == 1  # spans and by-hand join
    failed = [t for t in simulate if t["state"] == "FAILED"]
    assert len(failed) == 2 and all(t["error_type"] == "TASK_EXECUTION_EXCEPTION" for t in failed)
    logs = _cli("logs", failed[0]["task_id"], "--store", str(store))
    assert "simulating input" in logs and "is unlucky" in logs  # print and logging, tied to the task
