"""A live Ray 2.60 cluster's events in our store: Ray's own `ray list tasks` against both agree.

`ray start --head` (with its dashboard) exports its events to `serve`; a workload runs tasks, a
task that fails, one retried until it gives up, and an actor. Then `ray list tasks --address`
runs against the live dashboard and against `serve`, and the two must list the same task
attempts with the same name, state, type, job and error type; `ray summary tasks` agrees too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.agg_procs import CliServer, start
from helpers.ray_cluster import ray_bin, ray_cluster

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

WORKLOAD = """
import ray
ray.init()

@ray.remote
def ok(x):
    return x

@ray.remote
def boom():
    raise ValueError("state test failure")

@ray.remote(max_retries=1, retry_exceptions=True)
def flaky():
    raise RuntimeError("fails every attempt")

@ray.remote
class Acc:
    def add(self, x):
        return x

assert ray.get([ok.remote(i) for i in range(3)]) == [0, 1, 2]
for failing in (boom, flaky):
    try:
        ray.get(failing.remote())
    except ray.exceptions.RayTaskError:
        pass
acc = Acc.remote()
assert ray.get(acc.add.remote(2)) == 2
"""
COMPARED = (
    "task_id",
    "attempt_number",
    "name",
    "state",
    "type",
    "job_id",
    "func_or_class_name",
    "error_type",
)


def _ray_list(address: str, env: dict[str, str]) -> list[dict[str, Any]]:
    out = subprocess.run(
        [ray_bin(), "list", "tasks", "--address", address, "--format", "json", "--limit", "1000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def _comparable(rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {tuple(row.get(k) for k in COMPARED) for row in rows}


def test_live_cluster_and_our_store_list_the_same_tasks(servers: list[CliServer], tmp_path: Path) -> None:
    serve = start(servers, "serve", "--store", str(tmp_path / "events.sqlite3"))
    ours_url = f"http://{serve.address}"
    with ray_cluster(f"{ours_url}/v1/ray-events", dashboard=True) as cluster:
        assert cluster.dashboard is not None
        run = subprocess.run(
            [sys.executable, "-c", WORKLOAD], env=cluster.env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stdout + run.stderr
        env = {k: v for k, v in cluster.env.items() if k != "RAY_ADDRESS"}
        deadline = time.monotonic() + 120
        while True:  # both sides settle: the live GCS and our store, each fed on its own schedule
            live = _ray_list(cluster.dashboard, env)
            ours = _ray_list(ours_url, env)
            settled = all(row["state"] in ("FINISHED", "FAILED") for row in live)
            if settled and _comparable(live) == _comparable(ours):
                break
            if time.monotonic() > deadline:
                missing = _comparable(live) - _comparable(ours)
                extra = _comparable(ours) - _comparable(live)
                raise AssertionError(f"not the same tasks:\nonly live: {missing}\nonly ours: {extra}")
            time.sleep(0.5)
        summary = subprocess.run(
            [ray_bin(), "summary", "tasks", "--address", ours_url], env=env, capture_output=True, text=True
        )
        assert summary.returncode == 0, summary.stderr
    names = {row["func_or_class_name"] for row in ours}
    assert {"ok", "boom", "flaky", "Acc.__init__", "Acc.add"} <= names
    flaky = sorted((r for r in ours if r["func_or_class_name"] == "flaky"), key=lambda r: r["attempt_number"])
    assert [(r["attempt_number"], r["state"]) for r in flaky] == [(0, "FAILED"), (1, "FAILED")]
    boom = next(r for r in ours if r["func_or_class_name"] == "boom")
    assert boom["error_type"] == "TASK_EXECUTION_EXCEPTION"
    assert "flaky" in summary.stdout and "FAILED" in summary.stdout
