"""The parts compose: Ray's own events and our OTLP tracing hook, both sent to one `serve`.

A live Ray 2.60 cluster (with its dashboard) exports its events to `serve`, and the OTLP hook sends
the same cluster's spans, task logs and its own task events there too, as the docs set it up to
keep workers' output. A workload runs tasks, nested tasks, a failing task, a retried one and actors
(one named). The hook is also given an aggregator of ours that exports to `serve`, its recorder's
path there. Ray's CLI is asked `ray list tasks`, `ray list actors` and `ray summary tasks` of the
live dashboard; once the cluster is stopped it must answer the same from `serve`: the hook's
records add spans and log lines, never another session or another name or state.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from helpers.agg_procs import CliServer
from helpers.ray_cluster import ray_cli_answers, ray_cluster
from helpers.tracing_procs import OTLP_HOOK

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

WORKLOAD = """
import json
import ray
ray.init()

@ray.remote
def leaf(x):
    print(f"leaf says {x}")
    return x

@ray.remote
def parent(n):
    return sum(ray.get([leaf.remote(i) for i in range(n)]))

@ray.remote
def boom():
    raise ValueError("compose test failure")

@ray.remote(max_retries=1, retry_exceptions=True)
def flaky():
    raise RuntimeError("fails every attempt")

@ray.remote
class Ledger:
    def __init__(self):
        self.total = 0

    def add(self, x):
        self.total += x
        return self.total

@ray.remote
class Plain:
    def get(self):
        return 1

assert ray.get(parent.remote(3)) == 3
assert ray.get([leaf.remote(i) for i in range(2)]) == [0, 1]
for failing in (boom, flaky):
    try:
        ray.get(failing.remote())
    except ray.exceptions.RayTaskError:
        pass
ledger = Ledger.options(name="ledger").remote()
assert ray.get([ledger.add.remote(1), ledger.add.remote(2)]) == [1, 3]
plain = Plain.remote()
assert ray.get(plain.get.remote()) == 1
print(json.dumps({"leaf": ray.get(leaf.remote(9)), "job_id": ray.get_runtime_context().get_job_id()}))
"""
TASK_FIELDS = (
    "task_id",
    "attempt_number",
    "name",
    "state",
    "type",
    "job_id",
    "func_or_class_name",
    "error_type",
)
ACTOR_FIELDS = ("actor_id", "class_name", "name", "state", "job_id", "pid", "node_id", "ray_namespace")
ENDED = ("FINISHED", "FAILED")


@dataclass
class Answers:
    tasks: list[dict[str, Any]]
    actors: list[dict[str, Any]]
    summary: tuple[list[str], list[tuple[str, ...]]]


@dataclass
class Composed:
    live: Answers
    ours: Answers
    serve: str  # http://HOST:PORT of serve's own port
    dashboard: str  # http://HOST:PORT of serve's Ray dashboard port
    server: CliServer


def _ask(address: str, env: dict[str, str]) -> Answers:
    """Ray's CLI, against ADDRESS: every task attempt and actor, and the task summary."""
    tasks, actors, summary = ray_cli_answers(
        [
            ["list", "tasks", "--address", address, "--format", "json", "--limit", "1000"],
            ["list", "actors", "--address", address, "--format", "json", "--limit", "1000"],
            ["summary", "tasks", "--address", address],
        ],
        env,
    )
    for answer in (tasks, actors, summary):
        assert answer.returncode == 0, answer.stdout + answer.stderr
    return Answers(json.loads(tasks.stdout), json.loads(actors.stdout), _untimed(summary.stdout))


def _untimed(summary: str) -> tuple[list[str], list[tuple[str, ...]]]:
    """`ray summary tasks`: its stats lines, and its table's rows (name, counts, type) in name
    order (Ray lists them in its task table's order), without the time it was asked."""
    lines = [line for line in summary.splitlines() if line.strip()]
    table = next(i for i, line in enumerate(lines) if line.startswith("Table"))
    rows = sorted(tuple(re.split(r"\s{2,}", line.strip())[1:]) for line in lines[table + 3 :])
    return lines[1:table], rows


def _tasks(answers: Answers) -> set[tuple[Any, ...]]:
    return {tuple(row.get(k) for k in TASK_FIELDS) for row in answers.tasks}


def _actors(answers: Answers) -> set[tuple[Any, ...]]:
    return {tuple(row.get(k) for k in ACTOR_FIELDS) for row in answers.actors}


def _settled(answers: Answers) -> bool:
    return (
        len(answers.tasks) >= 14
        and all(row["state"] in ENDED for row in answers.tasks)
        and len(answers.actors) == 2
    )


def _same(live: Answers, ours: Answers) -> bool:
    return _tasks(live) == _tasks(ours) and _actors(live) == _actors(ours) and live.summary == ours.summary


@pytest.fixture(scope="module")
def composed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Composed]:
    folder = tmp_path_factory.mktemp("compose")
    serve = CliServer("serve", "--store", str(folder / "events.sqlite3"), "--ray-dashboard-port", "0")
    # The hooks' recorder path to serve too (RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS): our aggregator.
    aggregator = CliServer("aggregator", "--export-addr", f"http://{serve.address}/v1/ray-events")
    try:
        line = serve.read_line(30)
        assert line.startswith("listening ray-dashboard=127.0.0.1:"), line
        dashboard = "http://" + line.split("=", 1)[1]
        base = f"http://{serve.address}"
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": base,
            "OTEL_BLRP_SCHEDULE_DELAY": "100",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "RAY_OTEL_EVENTS_SPOOL_DIR": str(folder / "spool"),
            "RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS": aggregator.address,
        }
        with ray_cluster(
            f"{base}/v1/ray-events", dashboard=True, tracing_hook=OTLP_HOOK, extra_env=otel
        ) as cluster:
            assert cluster.dashboard is not None
            run = subprocess.run(
                [sys.executable, "-c", WORKLOAD], env=cluster.env, capture_output=True, text=True, timeout=300
            )
            assert run.returncode == 0, run.stdout + run.stderr
            env = {k: v for k, v in cluster.env.items() if k != "RAY_ADDRESS"}
            deadline = time.monotonic() + 120
            while not _settled(live := _ask(cluster.dashboard, env)):
                assert time.monotonic() < deadline, f"the live cluster never settled: {live}"
                time.sleep(0.5)
        deadline = time.monotonic() + 60  # the forwarder and Ray's aggregator send what they hold
        while not _same(live, ours := _ask(base, env)):
            if time.monotonic() > deadline:
                break  # the tests below say what differs
            time.sleep(0.5)
        aggregator.stop()  # flushes what it holds to serve
        ours = _ask(base, env)
        yield Composed(live, ours, base, dashboard, serve)
    finally:
        aggregator.close()
        serve.close()


def test_rays_cli_answers_from_serve_what_the_live_cluster_did(composed: Composed) -> None:
    live, ours = composed.live, composed.ours
    only_live, only_ours = _tasks(live) - _tasks(ours), _tasks(ours) - _tasks(live)
    assert not only_live and not only_ours, f"tasks differ:\nonly live: {only_live}\nonly ours: {only_ours}"
    assert len(ours.tasks) == len(live.tasks)
    assert _actors(ours) == _actors(live)
    assert ours.summary == live.summary
    assert ("ledger:Ledger.__init__", "FINISHED: 1", "ACTOR_CREATION_TASK") in ours.summary[1]
    names = {row["func_or_class_name"] for row in ours.tasks}
    assert {"leaf", "parent", "boom", "flaky", "Ledger.__init__", "Ledger.add", "Plain.get"} <= names
    flaky = sorted(
        (r for r in ours.tasks if r["func_or_class_name"] == "flaky"), key=lambda r: r["attempt_number"]
    )
    assert [(r["attempt_number"], r["state"]) for r in flaky] == [(0, "FAILED"), (1, "FAILED")]
    assert {r["name"] for r in ours.actors} == {"ledger", ""}


def test_one_session_with_the_clusters_name_and_the_hooks_records_in_it(composed: Composed) -> None:
    sessions = requests.get(composed.serve + "/api/sessions", timeout=30).json()
    names = [s["name"] for s in sessions["sessions"]]
    assert len(names) == 1 and names[0].startswith("session_"), sessions
    assert sessions["current"] == names[0]
    for base in (composed.serve, composed.dashboard):  # our state API, and Ray's dashboard views
        listed = requests.get(base + "/api/v0/tasks?limit=1000", timeout=30).json()
        assert len(listed["data"]["result"]["result"]) == len(composed.live.tasks), base
    # The hook's records arrived: the tasks' spans, and the lines they printed.
    traces = requests.get(composed.serve + "/api/ui/traces?limit=100", timeout=30).json()["traces"]
    assert traces, "no spans stored"
    leaf = next(r for r in composed.ours.tasks if r["func_or_class_name"] == "leaf")
    lines = requests.get(composed.serve + f"/api/ui/tasks/{leaf['task_id']}/logs", timeout=30).json()
    assert any(line["body"].startswith("leaf says") for line in lines["logs"]), lines
    # and its own event records, set aside (Ray's events are the state), none refused
    stats = composed.server.stop()
    assert stats["hook_events"] > 0 and stats["rejected_events"] == 0, stats
