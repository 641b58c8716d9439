"""A Ray user's path as README's "See your cluster" writes it, end to end, on one live cluster.

`serve --ray-dashboard-port 0` runs; a live Ray 2.60 head (with its dashboard) is wired ONLY by
`ray-otel-events ray-env` (helpers/ray_cluster.py runs the real command), `ray-otel-events collect`
runs beside it (its log files, the submitted job's driver log among them), and it is started with the OTLP
tracing hook pointed at the same `serve` (OTEL_EXPORTER_OTLP_ENDPOINT, its recorder's path through
an aggregator of ours that exports there too). `ray job submit` runs a workload (a named actor, an
actor whose constructor raises, an actor in a placement group asking for 0.25 CPU, tasks) and a
plain driver runs nested tasks, a failing task, a retried one and another actor. While the cluster
is up its dashboard and Ray's CLI are asked; once it is stopped, `serve`'s two ports must give the
same answers: `ray list tasks|actors`, `ray summary tasks`, `ray job list|status|logs`, the Logs
page's files of the node and the driver log, the jobs
list and a job, actors (resources, exit detail, a failed constructor's stderr, death causes), the
Overview's events and the node; the hook's records add spans and log lines in the one real
session, never another session, name or state. Once `serve` has stopped too, the store file alone
gives a worker's prints and `logging` lines (`ray-otel-events logs TASK_ID --store FILE`) with Ray's
task, attempt, job, actor and worker ids and the span's. Ray's CLI works against either port; what would
change a cluster is refused, saying why. Headless Chromium shows the pages; screenshots go to
build/screenshots/ray-jobs-*.png.

One cluster serves every test here (a live cluster costs most of a minute); the last test stops
`serve` to read its exit stats.
"""

from __future__ import annotations

import json
import os
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
from helpers.agg_procs import CliServer, clean_env, cli_in_process
from helpers.collector_procs import Collector
from helpers.ray_cluster import ray_bin, ray_cli_answers, ray_cluster
from helpers.tracing_procs import OTLP_HOOK
from test_ray_dashboard import CLOCK_READS_MS, SCREENSHOTS, _console_errors, _get, _wait_click

pytestmark = pytest.mark.ray

SUBMISSION = "raysubmit_ledger"
DRIVER_LOG = f"job-driver-{SUBMISSION}.log"  # Ray's job manager's file of the submitted job's driver
WORKLOAD = """
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init()

@ray.remote
def square(x):
    return x * x

@ray.remote
class Ledger:
    def __init__(self):
        self.total = 0

    def add(self, x):
        self.total += x
        return self.total

@ray.remote
class Broken:
    def __init__(self):
        raise RuntimeError("constructor fails")

    def f(self):
        return 1

@ray.remote(num_cpus=0.25)
class Grouped:
    def ping(self):
        return "pong"

assert ray.get([square.remote(i) for i in range(3)]) == [0, 1, 4]
ledger = Ledger.options(name="ledger").remote()
assert ray.get([ledger.add.remote(1), ledger.add.remote(2)]) == [1, 3]
broken = Broken.remote()
try:
    ray.get(broken.f.remote())
except ray.exceptions.RayActorError:
    pass
group = placement_group([{"CPU": 0.25}])
ray.get(group.ready())
grouped = Grouped.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group)).remote()
assert ray.get(grouped.ping.remote()) == "pong"
print("workload done")
"""
DRIVER = """
import json, logging, os, sys, time, urllib.error, urllib.request
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
plain = Plain.remote()
assert ray.get(plain.get.remote()) == 1
assert ray.get(leaf.remote(9)) == 9

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
print("ids", json.dumps({"task_id": task_id, "pid": pid, "method_id": method_id, "actor_id": actor_id,
                  "job_id": ray.get_runtime_context().get_job_id()}))
"""
# Task attempts: the driver's 16 (parent, 6 leaves, boom, flaky twice, Plain's two, chatty, quiet,
# Speaker's two); the submitted job's at least 10 (3 squares, Ledger's three, Broken's constructor,
# Grouped's two, the supervisor's constructor). Actors: Ledger, Broken, Grouped, Plain, Speaker and
# the job's supervisor.
TASKS_AT_LEAST = 26
ACTORS = 6
# What the driver's `chatty` task wrote: printed to stdout and stderr, and logged
CHATTY_LINES = {"hello from chatty 7", "a line to stderr", "logged warning 7"}
# Ray's job table takes a submitted job's start when it is submitted and its end when its
# supervisor saw the entrypoint exit; the store has the supervisor actor's first and last
# transitions, which Ray's GCS stamps after those (by ~0.4 s and ~15 ms on this machine, more
# under load). So a submitted job's times are checked by what caused what, not by a tolerance.
JOB_KEYS = (
    "type",
    "job_id",
    "submission_id",
    "status",
    "entrypoint",
    "error_type",
    "metadata",
    "runtime_env",
    "driver_node_id",
    "driver_info",
)
# `ray list tasks` without --detail: the attempt's identity, name and state, compared row by row
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


@dataclass
class Recorded:
    live: dict[str, Any]  # the live dashboard's HTTP answers
    live_cli: dict[str, subprocess.CompletedProcess[str]]  # Ray's CLI against the live dashboard
    our_cli: dict[str, subprocess.CompletedProcess[str]]  # the same, against our dashboard port
    ours: str  # http://HOST:PORT of our dashboard port
    main: str  # http://HOST:PORT of serve's own port
    server: CliServer  # serve
    collected: dict[str, Any]  # the collector's counters at its stop, after the cluster's
    store: Path  # serve's store file
    driver_ids: dict[str, Any]  # what the driver printed: chatty's task id and pid, Speaker's ids
    job_id: str  # the submitted job's driver job
    driver_job: str  # the plain driver's job
    broken: str  # the actor whose constructor raised
    grouped: str  # the actor in the placement group
    node_id: str
    captured_ms: int  # when the live answers were asked for (everything had ended)


def _cli_commands(address: str, job_id: str) -> dict[str, list[str]]:
    listed = ["--address", address, "--format", "json", "--limit", "1000"]
    return {
        "job list": ["job", "list", "--address", address],
        "job status": ["job", "status", SUBMISSION, "--address", address],
        "job status by id": ["job", "status", job_id, "--address", address],
        "job logs": ["job", "logs", SUBMISSION, "--address", address],
        "list tasks": ["list", "tasks", *listed, "--detail"],
        "list actors": ["list", "actors", *listed, "--detail"],
        "list tasks brief": ["list", "tasks", *listed],
        "list actors brief": ["list", "actors", *listed],
        "summary tasks": ["summary", "tasks", "--address", address],
    }


def _cli_env() -> dict[str, str]:
    return {k: v for k, v in clean_env({"RAY_AUTH_MODE": "disabled"}).items() if k != "RAY_ADDRESS"}


def ask_ray_cli(address: str, job_id: str) -> dict[str, subprocess.CompletedProcess[str]]:
    commands = _cli_commands(address, job_id)
    return dict(zip(commands, ray_cli_answers(list(commands.values()), _cli_env()), strict=True))


def _settled(base: str) -> bool:
    """Both jobs ended, every task ended, every actor (the supervisor's included) dead."""
    tasks = _get(base, "/api/v0/tasks?detail=1&limit=10000")["data"]["result"]["result"]
    actors = _get(base, "/logical/actors")["data"]["actors"].values()
    jobs = _get(base, "/api/jobs/")
    return (
        len(tasks) >= TASKS_AT_LEAST
        and all(t["state"] in ("FINISHED", "FAILED") for t in tasks)
        and len(actors) == ACTORS
        and all(a["state"] == "DEAD" for a in actors)
        and len(jobs) == 2
        and all(j["status"] == "SUCCEEDED" for j in jobs)
    )


def _live_paths(job_id: str, broken: str, node_id: str) -> dict[str, str]:
    return {
        "jobs": "/api/jobs/",
        "job": f"/api/jobs/{SUBMISSION}",
        "job by id": f"/api/jobs/{job_id}",
        "list jobs": "/api/v0/jobs?detail=1&limit=100",
        "actors": "/logical/actors",
        "events": "/events",
        "cluster events": "/api/v0/cluster_events?limit=100",
        "nodes": "/nodes?view=summary",
        "node": f"/nodes/{node_id}",
        "broken stderr": f"/api/v0/logs/file?actor_id={broken}&suffix=err&lines=1000&filter_ansi_code=true",
        "logs": f"/api/v0/logs?node_id={node_id}",
        "driver log": f"/api/v0/logs/file?node_id={node_id}&filename={DRIVER_LOG}&lines=1000",
    }


def _brief(cli: dict[str, subprocess.CompletedProcess[str]]) -> tuple[set[tuple[Any, ...]], ...]:
    """`ray list tasks|actors` (no --detail) as sets of rows, and `ray summary tasks` untimed."""
    for name in ("list tasks brief", "list actors brief", "summary tasks"):
        assert cli[name].returncode == 0, (name, cli[name].stdout + cli[name].stderr)
    tasks = {tuple(row.get(k) for k in TASK_FIELDS) for row in json.loads(cli["list tasks brief"].stdout)}
    actors = {tuple(row.get(k) for k in ACTOR_FIELDS) for row in json.loads(cli["list actors brief"].stdout)}
    stats, rows = _untimed(cli["summary tasks"].stdout)
    return tasks, actors, {(tuple(stats), tuple(rows))}


def _untimed(summary: str) -> tuple[list[str], list[tuple[str, ...]]]:
    """`ray summary tasks`: its stats lines, and its table's rows (name, counts, type) in name
    order (Ray lists them in its task table's order), without the time it was asked."""
    lines = [line for line in summary.splitlines() if line.strip()]
    table = next(i for i, line in enumerate(lines) if line.startswith("Table"))
    rows = sorted(tuple(re.split(r"\s{2,}", line.strip())[1:]) for line in lines[table + 3 :])
    return lines[1:table], rows


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    pytest.importorskip("ray")
    work = tmp_path_factory.mktemp("user_path")
    (work / "app").mkdir()
    (work / "app" / "workload.py").write_text(WORKLOAD)
    serve = CliServer("serve", "--store", str(work / "events.sqlite3"), "--ray-dashboard-port", "0")
    # The hooks' recorder path to serve too (RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS): our aggregator.
    aggregator = CliServer("aggregator", "--export-addr", f"http://{serve.address}/v1/ray-events")
    try:
        line = serve.read_line(30)
        assert line.startswith("listening ray-dashboard=127.0.0.1:"), line
        ours = "http://" + line.split("=", 1)[1]
        main = f"http://{serve.address}"
        not_wiring = {  # the hook's settings (README: OTEL_EXPORTER_OTLP_ENDPOINT), and the PATH
            "OTEL_EXPORTER_OTLP_ENDPOINT": main,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "RAY_OTEL_EVENTS_SPOOL_DIR": str(work / "spool"),
            "RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS": aggregator.address,
            # the entrypoint's `python` is this interpreter
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        with ray_cluster(
            f"{main}/v1/ray-events", dashboard=True, tracing_hook=OTLP_HOOK, extra_env=not_wiring
        ) as cluster:
            live_url = cluster.dashboard
            assert live_url is not None
            # beside `ray start`, as the docs say (the session is there: it follows it at once)
            temp_dir = Path(cluster.temp_dir)  # named relative: stopping the cluster leaves it running
            state = work / "collector-state"  # its default pass a second: beside a live cluster
            collector = Collector(
                main, Path(temp_dir.name), state, "--poll-interval", "1", cwd=temp_dir.parent
            )
            assert collector.read_line().startswith("collecting session=session_")
            submit = [ray_bin(), "job", "submit", "--address", live_url, "--submission-id", SUBMISSION]
            submit += ["--metadata-json", '{"team": "ledger"}', "--working-dir", str(work / "app")]
            run = subprocess.run(
                [*submit, "--", "python", "workload.py"],
                env=cluster.env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert run.returncode == 0 and "workload done" in run.stdout, run.stdout + run.stderr
            run = subprocess.run(
                [sys.executable, "-c", DRIVER, main],
                env=cluster.env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert run.returncode == 0, run.stdout + run.stderr
            # Ray's own echo to the driver still works: the hook's capture only adds to the streams
            # (and its echoed lines may come after the driver's own last line).
            assert "hello from chatty 7" in run.stdout + run.stderr
            driver_ids = next(
                json.loads(line[4:]) for line in run.stdout.splitlines() if line.startswith("ids ")
            )
            deadline = time.monotonic() + 120
            while not (_settled(live_url) and _settled(ours)):
                assert time.monotonic() < deadline, "the live cluster or our store never settled"
                time.sleep(0.25)
            jobs = {j["type"]: j for j in _get(live_url, "/api/jobs/")}
            actors = _get(live_url, "/logical/actors")["data"]["actors"].values()
            broken = next(a["actorId"] for a in actors if a["className"] == "Broken")
            grouped = next(a["actorId"] for a in actors if a["className"] == "Grouped")
            node_id = _get(live_url, "/nodes?view=summary")["data"]["summary"][0]["raylet"]["nodeId"]
            captured_ms = int(time.time() * 1000)
            job_id = jobs["SUBMISSION"]["job_id"]
            paths = _live_paths(job_id, broken, node_id)
            live = {name: _answer(live_url, path) for name, path in paths.items()}
            live_cli = ask_ray_cli(live_url, job_id)
        # after `ray stop`, the collector's stop ships what the cluster's processes wrote last
        try:
            collected = collector.stop()
        finally:
            collector.close()
        # The cluster's processes are gone: whatever the hooks' recorders sent our aggregator is in
        # it, and it flushes that to serve as it stops. Then `ray stop`'s last sends (the hook's
        # forwarder, Ray's aggregator at exit) reach serve: the answer once ours is the live one
        # (each answer is a Ray CLI interpreter: no extra one after the wait).
        aggregator.stop()
        deadline = time.monotonic() + 60
        while _brief(our_cli := ask_ray_cli(ours, job_id)) != _brief(live_cli):
            if time.monotonic() > deadline:
                break  # the tests below say what differs
            time.sleep(0.5)
        yield Recorded(
            live,
            live_cli,
            our_cli,
            ours,
            main,
            serve,
            collected,
            work / "events.sqlite3",
            driver_ids,
            job_id,
            jobs["DRIVER"]["job_id"],
            broken,
            grouped,
            node_id,
            captured_ms,
        )
        if serve.returncode is None:
            serve.stop()
    finally:
        aggregator.close()
        serve.close()


def _answer(base: str, path: str) -> Any:
    response = requests.get(base + path, timeout=30)
    assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:300]}"
    return response.json() if "json" in response.headers.get("Content-Type", "") else response.text


def _same_job(mine: dict[str, Any], theirs: dict[str, Any], captured_ms: int) -> None:
    """The same job; a driver's times as Ray's (CLOCK_READS_MS), a submitted one's between its
    causes and effects: its supervisor registered after the submission and before the job ended,
    and exited after the job ended, before the live answers were captured (ms are truncated)."""
    differ = {k: (mine[k], theirs[k]) for k in JOB_KEYS if mine[k] != theirs[k]}
    assert not differ, differ
    times = (mine["start_time"], mine["end_time"], theirs["start_time"], theirs["end_time"])
    if mine["type"] == "DRIVER":
        assert abs(times[0] - times[2]) <= CLOCK_READS_MS and abs(times[1] - times[3]) <= CLOCK_READS_MS, (
            times
        )
    else:
        assert times[2] - 1 <= times[0] <= times[3] and times[3] - 1 <= times[1] <= captured_ms, times


def test_the_submitted_job_as_the_live_cluster_showed_it(recorded: Recorded) -> None:
    live, our_cli = recorded.live, recorded.our_cli
    mine = {j["job_id"]: j for j in _get(recorded.ours, "/api/jobs/")}
    theirs = {j["job_id"]: j for j in live["jobs"]}
    assert set(mine) == set(theirs) == {recorded.job_id, recorded.driver_job}
    for job_id, job in theirs.items():
        _same_job(mine[job_id], job, recorded.captured_ms)
    submitted = mine[recorded.job_id]
    assert submitted["type"] == "SUBMISSION" and submitted["submission_id"] == SUBMISSION
    assert submitted["metadata"] == {"team": "ledger"} and submitted["entrypoint"] == "python workload.py"
    # What only Ray's EXPORT_SUBMISSION_JOB file holds (Ray 2.60 sends no submission-job events),
    # shipped by the collector: Ray's own message and the entrypoint's exit code.
    assert submitted["message"] == theirs[recorded.job_id]["message"] == "Job finished successfully."
    assert submitted["driver_exit_code"] == theirs[recorded.job_id]["driver_exit_code"]
    for name in ("job", "job by id"):
        path = _live_paths(recorded.job_id, "", "")[name]
        _same_job(_get(recorded.ours, path), live[name], recorded.captured_ms)
    listed = {
        j["job_id"]: j
        for j in _get(recorded.ours, "/api/v0/jobs?detail=1&limit=100")["data"]["result"]["result"]
    }
    for job in live["list jobs"]["data"]["result"]["result"]:
        _same_job(listed[job["job_id"]], job, recorded.captured_ms)

    # Ray's CLI, against the store as against the live dashboard
    for name in ("job list", "job status", "job status by id", "job logs"):
        assert our_cli[name].returncode == recorded.live_cli[name].returncode == 0, (name, our_cli[name])
    for text in (f"submission_id='{SUBMISSION}'", "type=<JobType.SUBMISSION", "metadata={'team': 'ledger'}"):
        assert text in our_cli["job list"].stdout and text in recorded.live_cli["job list"].stdout, text
    for name in ("job status", "job status by id"):
        asked = SUBMISSION if name == "job status" else recorded.job_id
        for answer in (our_cli[name], recorded.live_cli[name]):
            assert f"Job '{asked}' succeeded" in answer.stdout + answer.stderr, answer
    # the driver's output, from the file the collector shipped, as the live cluster printed it
    assert "workload done" in recorded.live_cli["job logs"].stdout
    ours, theirs = (_without_log_prefix(a["job logs"].stdout) for a in (our_cli, recorded.live_cli))
    assert ours == theirs, our_cli["job logs"]
    assert "Traceback" not in our_cli["job logs"].stdout + our_cli["job logs"].stderr


def test_the_logs_page_lists_and_shows_the_nodes_files_as_live(recorded: Recorded) -> None:
    """Ray's Logs page of the node, over what the collector shipped: every log file the live page
    listed, in Ray's groups. The live page also lists what the collector does not read: folders
    (`events/`, `old/`...) and files that are not `.out`, `.err` or `.log` (debug_state.txt)."""
    live = recorded.live["logs"]["data"]["result"]
    mine = _get(recorded.ours, f"/api/v0/logs?node_id={recorded.node_id}")["data"]["result"]
    read = re.compile(r"[^/]+\.(out|err|log)")
    for group, files in live.items():
        kept = sorted(f for f in files if read.fullmatch(f))
        # (a file written after the live answer was taken is listed too: more, never fewer)
        assert set(kept) <= set(mine.get(group, [])), (group, sorted(set(kept) - set(mine.get(group, []))))
    assert sum(map(len, mine.values())) >= 30, mine  # raylet, gcs, dashboard's modules, workers, drivers
    assert DRIVER_LOG in mine["internal"], mine
    # the job page's driver log, as the live page showed it
    shown = _answer(recorded.ours, _live_paths("", "", recorded.node_id)["driver log"])
    assert shown == recorded.live["driver log"] and "workload done" in shown
    counters = recorded.collected
    assert counters["log_bytes_shipped"] > 0 and counters.get("batches_dropped", 0) == 0, counters


def test_ray_lists_and_summary_match(recorded: Recorded) -> None:
    live, our_cli = recorded.live_cli, recorded.our_cli
    keys = ("name", "func_or_class_name", "type", "state", "job_id", "required_resources", "error_type")
    tasks = [json.loads(answer["list tasks"].stdout) for answer in (our_cli, live)]
    mine, theirs = ({tuple(json.dumps(t[k], sort_keys=True) for k in keys) for t in found} for found in tasks)
    assert mine == theirs, (sorted(mine - theirs), sorted(theirs - mine))
    assert any(t["name"] == "ledger:Ledger.__init__" for t in tasks[0])
    keys = ("class_name", "name", "state", "job_id", "ray_namespace", "required_resources", "death_cause")
    actors = [
        {a["actor_id"]: a for a in json.loads(answer["list actors"].stdout)} for answer in (our_cli, live)
    ]
    assert set(actors[0]) == set(actors[1])
    for actor_id, actor in actors[1].items():
        differ = {k: (actors[0][actor_id][k], actor[k]) for k in keys if actors[0][actor_id][k] != actor[k]}
        assert not differ, (actor["class_name"], differ)
    assert "creation_task_failure_context" in actors[0][recorded.broken]["death_cause"]

    def table(answer: subprocess.CompletedProcess[str]) -> list[str]:
        lines = answer.stdout.split("Table (group by func_name):", 1)[1].strip().splitlines()[2:]
        return sorted(" ".join(line.split()[1:]) for line in lines)  # without the row number

    assert table(our_cli["summary tasks"]) == table(live["summary tasks"])
    assert any(
        row.startswith("ledger:Ledger.__init__ FINISHED: 1") for row in table(our_cli["summary tasks"])
    )


def test_rays_brief_lists_and_summary_row_by_row(recorded: Recorded) -> None:
    """`ray list tasks|actors` without --detail, every attempt's id and state, and the summary's
    stats lines too: the hook's records never add a task, a session, a name or a state."""
    live, ours = _brief(recorded.live_cli), _brief(recorded.our_cli)
    only_live, only_ours = live[0] - ours[0], ours[0] - live[0]
    assert not only_live and not only_ours, f"tasks differ:\nonly live: {only_live}\nonly ours: {only_ours}"
    ours_tasks = json.loads(recorded.our_cli["list tasks brief"].stdout)
    assert len(ours_tasks) == len(json.loads(recorded.live_cli["list tasks brief"].stdout))
    assert len(ours_tasks) >= TASKS_AT_LEAST
    assert ours[1] == live[1]
    assert ours[2] == live[2]
    (stats_rows,) = ours[2]
    assert ("ledger:Ledger.__init__", "FINISHED: 1", "ACTOR_CREATION_TASK") in stats_rows[1]
    names = {row["func_or_class_name"] for row in ours_tasks}
    assert {
        "leaf",
        "parent",
        "boom",
        "flaky",
        "Ledger.__init__",
        "Ledger.add",
        "Plain.__init__",
        "Plain.get",
    } <= names
    boom = next(r for r in ours_tasks if r["func_or_class_name"] == "boom")
    assert boom["state"] == "FAILED" and boom["error_type"] == "TASK_EXECUTION_EXCEPTION", boom
    flaky = sorted(
        (r for r in ours_tasks if r["func_or_class_name"] == "flaky"), key=lambda r: r["attempt_number"]
    )
    assert [(r["attempt_number"], r["state"]) for r in flaky] == [(0, "FAILED"), (1, "FAILED")]
    actors = json.loads(recorded.our_cli["list actors brief"].stdout)
    assert len(actors) == ACTORS
    assert {r["name"] for r in actors} == {"ledger", "", f"_ray_internal_job_actor_{SUBMISSION}"}


def test_one_session_with_the_clusters_name_and_the_hooks_records_in_it(recorded: Recorded) -> None:
    sessions = requests.get(recorded.main + "/api/sessions", timeout=30).json()
    names = [s["name"] for s in sessions["sessions"]]
    assert len(names) == 1 and names[0].startswith("session_"), sessions
    assert sessions["current"] == names[0]
    live_tasks = json.loads(recorded.live_cli["list tasks brief"].stdout)
    for base in (recorded.main, recorded.ours):  # our state API, and Ray's dashboard views
        listed = requests.get(base + "/api/v0/tasks?limit=1000", timeout=30).json()
        assert len(listed["data"]["result"]["result"]) == len(live_tasks), base
    # The hook's records arrived: the tasks' spans, and the lines they printed.
    traces = requests.get(recorded.main + "/api/ui/traces?limit=100", timeout=30).json()["traces"]
    assert traces, "no spans stored"
    ours_tasks = json.loads(recorded.our_cli["list tasks brief"].stdout)
    leaf = next(r for r in ours_tasks if r["func_or_class_name"] == "leaf")
    lines = requests.get(recorded.main + f"/api/ui/tasks/{leaf['task_id']}/logs", timeout=30).json()
    assert any(line["body"].startswith("leaf says") for line in lines["logs"]), lines


def test_actors_events_and_node_as_the_live_dashboard_showed_them(recorded: Recorded) -> None:
    live = recorded.live
    ours = {
        name: _answer(recorded.ours, path)
        for name, path in _live_paths(recorded.job_id, recorded.broken, recorded.node_id).items()
    }
    # Actors: what each asked for (a placement group's 0.25 CPU, not its bundle resources)
    keys = ("className", "name", "state", "requiredResources", "exitDetail", "pid", "jobId")
    for actor_id, theirs in live["actors"]["data"]["actors"].items():
        mine = ours["actors"]["data"]["actors"][actor_id]
        differ = {k: (mine[k], theirs[k]) for k in keys if mine[k] != theirs[k]}
        assert not differ, (theirs["className"], differ)
    assert ours["actors"]["data"]["actors"][recorded.grouped]["requiredResources"] == {"CPU": 0.25}
    # A failed constructor's stderr: the traceback, as the worker printed it (Ray's file also
    # starts with the worker's `:job_id:` and `:actor_name:` markers)
    theirs_err = [line for line in live["broken stderr"].splitlines() if not line.startswith(":")]
    assert ours["broken stderr"].splitlines() == theirs_err
    assert "RuntimeError: constructor fails" in ours["broken stderr"]
    # The Overview's Events card: Ray's job manager's started and completed events
    keys_of = ("sourceType", "sourceHostname", "message", "customFields", "severity", "label")
    events = [
        sorted(
            (tuple(json.dumps(e[k]) for k in keys_of), int(e["timestamp"]))
            for e in answer["data"]["events"]["global"]
        )
        for answer in (ours["events"], live["events"])
    ]
    assert [e[0] for e in events[0]] == [e[0] for e in events[1]]
    # Ray stamps its events when its job manager logs them (the completion when its monitor loop
    # next polls); ours are the job's start and end, which those follow: each within the job's
    # life as the live cluster recorded it (seconds, as Ray's events)
    job = live["job"]
    started_s, ended_s = job["start_time"] // 1000, job["end_time"] // 1000
    window = {"Started": (started_s, ended_s), "Completed": (ended_s, recorded.captured_ms // 1000)}
    for keys, mine_s in events[0]:
        low, high = window[json.loads(keys[2]).split()[0]]
        assert low - 1 <= mine_s <= high, (keys[2], mine_s, low, high)
    assert {e["message"] for e in ours["cluster events"]["data"]["result"]["result"]} == {
        f"Started a ray job {SUBMISSION}.",
        f"Completed a ray job {SUBMISSION} with a status SUCCEEDED.",
    }
    # The node: its host name where Ray shows one
    for name in ("nodes", "node"):
        theirs_node = live[name]["data"]["summary"][0] if name == "nodes" else live[name]["data"]["detail"]
        mine_node = ours[name]["data"]["summary"][0] if name == "nodes" else ours[name]["data"]["detail"]
        assert mine_node["hostname"] == theirs_node["hostname"]
        for key in ("nodeManagerHostname", "nodeName", "nodeManagerAddress"):
            assert mine_node["raylet"][key] == theirs_node["raylet"][key], key


def test_ray_cli_on_either_port(recorded: Recorded) -> None:
    """`ray job ...`, `ray list ...` answer alike on serve's port and its dashboard port; what would
    change a cluster is refused with the reason; Ray's page requests on serve's port name the
    dashboard port."""
    our_cli = recorded.our_cli
    on_main = ask_ray_cli(recorded.main, recorded.job_id)
    for name, answer in on_main.items():
        assert answer.returncode == 0, (name, answer)
        if not name.startswith("summary"):  # (the summary is stamped with the time it was made)
            assert _without_log_prefix(answer.stdout) == _without_log_prefix(our_cli[name].stdout), name
    refused = ray_cli_answers(
        [
            ["job", "stop", SUBMISSION, "--address", recorded.main],
            ["job", "submit", "--address", recorded.ours, "--", "echo", "hi"],
            ["job", "logs", SUBMISSION, "--follow", "--address", recorded.ours],
        ],
        _cli_env(),
    )
    for answer in refused[:2]:
        assert answer.returncode != 0 and "stored events of Ray clusters" in answer.stdout + answer.stderr
    assert "cannot stop jobs" in refused[0].stdout + refused[0].stderr
    assert "cannot submit jobs" in refused[1].stdout + refused[1].stderr
    assert refused[2].returncode == 0 and "workload done" in refused[2].stdout
    elsewhere = requests.get(recorded.main + "/logical/actors", timeout=30)
    assert elsewhere.status_code == 404
    assert f"--ray-dashboard-port: {recorded.ours}/logical/actors" in elsewhere.text


def _without_log_prefix(text: str) -> str:
    """Ray's CLI log lines without their time stamps and the address they name."""
    return "\n".join(line.split(" -- ", 1)[-1] for line in text.splitlines() if "server address" not in line)


# What a page's shown log viewer must display: a failed constructor's traceback, as the worker
# printed it to stderr (the live cluster's STDERR tab shows it)
LOGGED = {"actor-broken": ["Exception raised in creation task", "RuntimeError: constructor fails"]}


# Scrolls every scrollable element inside Ray's log viewers to their end (arguments[0]) or start.
SCROLL_LOG_VIEWERS = """
for (const e of document.querySelectorAll("div[class^='hljs-'], div[class^='hljs-'] *")) {
  if (e.scrollHeight > e.clientHeight) e.scrollTop = arguments[0] ? e.scrollHeight : 0;
}
"""


def _log_viewer_text(browser: Any) -> str:
    """The text of the log viewer a user sees: Ray's virtualised list, classed by highlight
    theme (`hljs-light`); the other tabs' viewers stay rendered, hidden. Empty while it loads."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        viewers = browser.find_elements(By.XPATH, "//div[starts-with(@class, 'hljs-')]")
        return "\n".join(v.text for v in viewers if v.is_displayed())
    except StaleElementReferenceException:  # re-rendered between finding and reading
        return ""


def test_the_pages_in_chromium(recorded: Recorded) -> None:
    from selenium.webdriver.common.by import By
    from test_web_page import headless_chromium

    browser = headless_chromium(1300)
    pages = [
        (
            "jobs",
            "jobs",
            [SUBMISSION, recorded.job_id, recorded.driver_job, "SUCCEEDED", "python workload.py"],
        ),
        ("job", f"jobs/{recorded.job_id}", [SUBMISSION, "SUCCEEDED", "python workload.py", "Task Timeline"]),
        (
            "job-by-submission",
            f"jobs/{SUBMISSION}",
            [recorded.job_id, "SUCCEEDED", "workload done"],
        ),
        (
            "overview",
            "overview",
            [
                f"Started a ray job {SUBMISSION}.",
                f"Completed a ray job {SUBMISSION} with a status SUCCEEDED.",
            ],
        ),
        ("actor-broken", f"actors/{recorded.broken}", ["Broken", "DEAD"]),
        ("actor-grouped", f"actors/{recorded.grouped}", ["Grouped", "DEAD", '"CPU": 0.25']),
        ("node", f"cluster/nodes/{recorded.node_id}", ["Node details fetched", f"ACTOR ({ACTORS})"]),
        # the node's files as the collector shipped them, and the driver's log in Ray's viewer
        ("logs", f"logs/?nodeId={recorded.node_id}", ["raylet.out", "gcs_server.out", DRIVER_LOG]),
        ("logs-driver", f"logs/viewer?nodeId={recorded.node_id}&fileName={DRIVER_LOG}", ["workload done"]),
    ]
    hostname = _get(recorded.ours, "/nodes?view=summary")["data"]["summary"][0]["hostname"]
    next(texts for name, _, texts in pages if name == "node").append(hostname)
    try:
        for name, route, texts in pages:
            browser.get(f"{recorded.ours}/#/{route}")
            if name == "actor-broken":  # the logs pane opens on stdout; a user clicks STDERR
                _wait_click(browser, "//button[@role='tab' and normalize-space()='stderr']")
            # the traceback is also in the page's Exit Detail: it is looked for in the log viewer
            logged = LOGGED.get(name, [])
            deadline = time.monotonic() + 30
            seen, seen_logged, to_end = "", "", False
            while not (all(t in seen for t in texts) and all(t in seen_logged for t in logged)):
                # what the page shows, with its log viewers scrolled to one end then the other, as a
                # user scrolls: Ray's viewer renders only the lines in view (a worker that crashed
                # while the job ran once pushed the driver's last line out of it)
                seen += browser.find_element(By.TAG_NAME, "body").text
                seen_logged += _log_viewer_text(browser)
                browser.execute_script(SCROLL_LOG_VIEWERS, to_end)
                to_end = not to_end
                if time.monotonic() > deadline:
                    browser.save_screenshot(str(SCREENSHOTS / f"ray-jobs-{name}-failed.png"))
                    body, viewer = browser.find_element(By.TAG_NAME, "body").text, _log_viewer_text(browser)
                    missing = [t for t in texts if t not in seen]
                    missing += [t for t in logged if t not in seen_logged]
                    raise AssertionError(
                        f"{route}: {missing} not on the page:\n{body[:3000]}\nlog viewer:\n{viewer}"
                    )
                time.sleep(0.3)
            if name == "overview":  # the Events card is below the fold
                card = browser.find_element(
                    By.XPATH, f"//*[contains(text(), 'Started a ray job {SUBMISSION}')]"
                )
                browser.execute_script("arguments[0].scrollIntoView()", card)
            browser.save_screenshot(str(SCREENSHOTS / f"ray-jobs-{name}.png"))
            body = browser.find_element(By.TAG_NAME, "body").text
            for wrong in ("Job Query Error", "Request Status: Error", "Something went wrong", "bundle_group"):
                assert wrong not in body, (route, wrong, body[:3000])
            failed = _console_errors(browser)
            assert not failed, f"{route}: {failed}"
    finally:
        browser.quit()


def test_serve_without_the_dashboard_port_names_it_and_refuses_changes(tmp_path: Path) -> None:
    serve = CliServer("serve", "--store", str(tmp_path / "s.sqlite3"))
    try:
        main = f"http://{serve.address}"
        elsewhere = requests.get(main + "/nodes?view=summary", timeout=30)
        assert elsewhere.status_code == 404 and "started with --ray-dashboard-port" in elsewhere.text
        assert _get(main, "/api/jobs/") == []
        events = _get(main, "/api/v0/cluster_events")["data"]["result"]
        assert events["result"] == [] and events["total"] == 0
        bad = requests.get(main + "/api/v0/cluster_events?limit=many", timeout=30)
        assert bad.status_code == 400 and "limit must be an integer" in bad.text
        for method, path, what in (
            ("POST", "/api/jobs/", "submit jobs"),
            ("POST", "/api/jobs/raysubmit_x/stop", "stop jobs"),
            ("DELETE", "/api/jobs/raysubmit_x", "delete jobs"),
            ("PUT", "/api/packages/gcs/_ray_pkg_x.zip", "take a job's working directory"),
        ):
            refused = requests.request(method, main + path, timeout=30)
            assert refused.status_code == 405 and f"it cannot {what}" in refused.text, (path, refused.text)
        missing = requests.get(main + "/api/jobs/raysubmit_x/logs/tail", timeout=30)
        assert missing.status_code == 404 and "raysubmit_x" in missing.text
        assert requests.get(main + "/api/jobs/raysubmit_x/logs", timeout=30).status_code == 404
        serve.stop()
    finally:
        serve.close()


def _logs(task_id: str, *source: str) -> list[dict[str, Any]]:
    """`ray-otel-events logs TASK_ID --format json`, answered in this process (a reader: half a
    second saved per answer)."""
    out = cli_in_process("logs", task_id, *source, "--format", "json")
    assert out.returncode == 0, out.stderr
    lines: list[dict[str, Any]] = json.loads(out.stdout)
    return lines


@pytest.fixture(scope="module")
def serve_stats(recorded: Recorded) -> dict[str, Any]:
    """`serve`'s exit stats (the driver waited for its workers' lines to reach it): the tests that
    use this come last in this file, since they find `serve` stopped and only the store file left."""
    return recorded.server.stop()


def test_serve_kept_the_hooks_event_records_aside_and_refused_none(serve_stats: dict[str, Any]) -> None:
    """The hook's own event records arrived (through our aggregator) and were set aside, Ray's
    events being the state; no event was refused."""
    stats = serve_stats
    assert stats["hook_events"] > 0 and stats["rejected_events"] == 0, stats
    assert stats["spans"] > 0 and stats["log_lines"] > 0, stats


def test_worker_prints_and_logging_kept_in_the_store_file_with_rays_ids(
    recorded: Recorded, serve_stats: dict[str, Any]
) -> None:
    """The cluster and `serve` both gone: `ray-otel-events logs TASK_ID --store FILE` shows each
    line a worker wrote with Ray's own task id, attempt, job id, actor id, worker pid and the span's
    trace and span ids."""
    ids, store = recorded.driver_ids, str(recorded.store)
    lines = _logs(ids["task_id"], "--store", store)
    by_body = {line["body"]: line for line in lines}
    assert sorted(line["body"] for line in lines if line["body"] in CHATTY_LINES) == sorted(CHATTY_LINES), (
        lines
    )
    assert not any(body.startswith(":task_name:") for body in by_body)  # Ray's markers are not output
    for body in CHATTY_LINES:
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
    assert len({by_body[b]["span_id"] for b in CHATTY_LINES}) == 1  # all inside the one execution span
    method_lines = _logs(ids["method_id"], "--store", store)
    speaks = next(line for line in method_lines if line["body"] == "actor speaks")
    assert speaks["actor_id"] == ids["actor_id"] and speaks["task_id"] == ids["method_id"], speaks
    # The actor's constructor ran as its creation task: its line is tied to that task.
    creation = [
        line
        for line in _logs("ffffffffffffffff" + ids["actor_id"], "--store", store)
        if line["body"] == "actor constructed"
    ]
    assert creation and creation[0]["actor_id"] == ids["actor_id"], creation
