"""A job submitted with `ray job submit`, and Ray's dashboard and CLI over the store, compared with
the live cluster that ran it.

One live Ray 2.60 cluster (with its dashboard) exports every event type to
`serve --ray-dashboard-port 0`. `ray job submit` runs a workload (a named actor, an actor whose
constructor raises, an actor in a placement group asking for 0.25 CPU, tasks) and a plain driver
runs one task. While the cluster is up, its dashboard and Ray's CLI are asked; once it is stopped,
`serve`'s two ports must give the same answers: `ray job list|status|logs`, `ray list
tasks|actors`, `ray summary tasks`, the jobs list and a job, actors (resources, exit detail, a failed
constructor's stderr, death causes), the Overview's events and the node. Ray's CLI works against
either port; what would change a cluster is refused, saying why. Headless Chromium shows the
pages; screenshots go to build/screenshots/ray-jobs-*.png.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import CliServer, clean_env
from helpers.ray_cluster import ray_bin, ray_cli_answers, ray_cluster
from test_ray_dashboard import ABSENT, CLOCK_READS_MS, SCREENSHOTS, _get, _wait_click

from ray_otel_events.store.state_merge import SUBMITTED_MESSAGE

SUBMISSION = "raysubmit_ledger"
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
assert ray.get(ledger.add.remote(2)) == 2
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
import ray
ray.init()

@ray.remote
def hello():
    return "hi"

assert ray.get(hello.remote()) == "hi"
"""
# Every event type the store folds, submission jobs' included: Ray 2.60 sends none of those (its
# job manager only writes them to files with the Export API on), and the Python switch is given
# so that a Ray that does send them is covered by the same setup.
EXPOSED = (
    "TASK_DEFINITION_EVENT,TASK_LIFECYCLE_EVENT,TASK_PROFILE_EVENT,ACTOR_TASK_DEFINITION_EVENT,"
    "DRIVER_JOB_DEFINITION_EVENT,DRIVER_JOB_LIFECYCLE_EVENT,ACTOR_DEFINITION_EVENT,ACTOR_LIFECYCLE_EVENT,"
    "NODE_DEFINITION_EVENT,NODE_LIFECYCLE_EVENT,WORKER_DEFINITION_EVENT,WORKER_LIFECYCLE_EVENT,"
    "PLACEMENT_GROUP_DEFINITION_EVENT,PLACEMENT_GROUP_LIFECYCLE_EVENT,"
    "SUBMISSION_JOB_DEFINITION_EVENT,SUBMISSION_JOB_LIFECYCLE_EVENT"
)
PYTHON_EVENTS = "PLATFORM_EVENT,SUBMISSION_JOB_DEFINITION_EVENT,SUBMISSION_JOB_LIFECYCLE_EVENT"
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


@dataclass
class Recorded:
    live: dict[str, Any]  # the live dashboard's HTTP answers
    live_cli: dict[str, subprocess.CompletedProcess[str]]  # Ray's CLI against the live dashboard
    ours: str  # http://HOST:PORT of our dashboard port
    main: str  # http://HOST:PORT of serve's own port
    job_id: str  # the submitted job's driver job
    driver_job: str  # the plain driver's job
    broken: str  # the actor whose constructor raised
    grouped: str  # the actor in the placement group
    node_id: str
    captured_ms: int  # when the live answers were asked for (everything had ended)


def _cli_commands(address: str, job_id: str) -> dict[str, list[str]]:
    return {
        "job list": ["job", "list", "--address", address],
        "job status": ["job", "status", SUBMISSION, "--address", address],
        "job status by id": ["job", "status", job_id, "--address", address],
        "job logs": ["job", "logs", SUBMISSION, "--address", address],
        "list tasks": ["list", "tasks", "--address", address, "--format", "json", "--detail"],
        "list actors": ["list", "actors", "--address", address, "--format", "json", "--detail"],
        "summary tasks": ["summary", "tasks", "--address", address],
    }


def ask_ray_cli(address: str, job_id: str) -> dict[str, subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in clean_env({"RAY_AUTH_MODE": "disabled"}).items() if k != "RAY_ADDRESS"}
    commands = _cli_commands(address, job_id)
    return dict(zip(commands, ray_cli_answers(list(commands.values()), env), strict=True))


def _settled(base: str) -> bool:
    """Both jobs ended, every task ended, the four actors (the supervisor's included) dead."""
    tasks = _get(base, "/api/v0/tasks?detail=1&limit=10000")["data"]["result"]["result"]
    actors = _get(base, "/logical/actors")["data"]["actors"].values()
    jobs = _get(base, "/api/jobs/")
    return (
        len(tasks) >= 10
        and all(t["state"] in ("FINISHED", "FAILED") for t in tasks)
        and len(actors) == 4
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
    }


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    pytest.importorskip("ray")
    work = tmp_path_factory.mktemp("jobs")
    (work / "app").mkdir()
    (work / "app" / "workload.py").write_text(WORKLOAD)
    serve = CliServer("serve", "--store", str(work / "events.sqlite3"), "--ray-dashboard-port", "0")
    try:
        line = serve.read_line(30)
        assert line.startswith("listening ray-dashboard=127.0.0.1:"), line
        ours = "http://" + line.split("=", 1)[1]
        main = f"http://{serve.address}"
        extra = {
            "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES": EXPOSED,
            "RAY_ENABLE_PYTHON_RAY_EVENT_TYPES": PYTHON_EVENTS,
            # the entrypoint's `python` is this interpreter
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        with ray_cluster(f"{main}/v1/ray-events", dashboard=True, extra_env=extra) as cluster:
            live_url = cluster.dashboard
            assert live_url is not None
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
                [sys.executable, "-c", DRIVER], env=cluster.env, capture_output=True, text=True, timeout=300
            )
            assert run.returncode == 0, run.stdout + run.stderr
            deadline = time.monotonic() + 120
            while not (_settled(live_url) and _settled(ours)):
                assert time.monotonic() < deadline, "the live cluster or our store never settled"
                time.sleep(0.5)
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
        yield Recorded(
            live,
            live_cli,
            ours,
            main,
            job_id,
            jobs["DRIVER"]["job_id"],
            broken,
            grouped,
            node_id,
            captured_ms,
        )
        serve.stop()
    finally:
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


@pytest.fixture(scope="module")
def our_cli(recorded: Recorded) -> dict[str, subprocess.CompletedProcess[str]]:
    return ask_ray_cli(recorded.ours, recorded.job_id)


def test_the_submitted_job_as_the_live_cluster_showed_it(
    recorded: Recorded, our_cli: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    live = recorded.live
    mine = {j["job_id"]: j for j in _get(recorded.ours, "/api/jobs/")}
    theirs = {j["job_id"]: j for j in live["jobs"]}
    assert set(mine) == set(theirs) == {recorded.job_id, recorded.driver_job}
    for job_id, job in theirs.items():
        _same_job(mine[job_id], job, recorded.captured_ms)
    submitted = mine[recorded.job_id]
    assert submitted["type"] == "SUBMISSION" and submitted["submission_id"] == SUBMISSION
    assert submitted["metadata"] == {"team": "ledger"} and submitted["entrypoint"] == "python workload.py"
    # What the event stream cannot tell (Ray 2.60 exports no submission-job events): the exit
    # code and Ray's message; ours says so instead of guessing.
    assert theirs[recorded.job_id]["message"] == "Job finished successfully."
    assert submitted["message"] == SUBMITTED_MESSAGE
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
    assert "workload done" in recorded.live_cli["job logs"].stdout
    logs = our_cli["job logs"].stdout + our_cli["job logs"].stderr
    assert f"The driver's output of job {SUBMISSION} was not collected by this store" in logs, logs
    assert "Traceback" not in logs


def test_ray_lists_and_summary_match(
    recorded: Recorded, our_cli: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    live = recorded.live_cli
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


def test_ray_cli_on_either_port(
    recorded: Recorded, our_cli: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    """`ray job ...`, `ray list ...` answer alike on serve's port and its dashboard port; what would
    change a cluster is refused with the reason; Ray's page requests on serve's port name the
    dashboard port."""
    env = {k: v for k, v in clean_env({"RAY_AUTH_MODE": "disabled"}).items() if k != "RAY_ADDRESS"}
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
        env,
    )
    for answer in refused[:2]:
        assert answer.returncode != 0 and "stored events of Ray clusters" in answer.stdout + answer.stderr
    assert "cannot stop jobs" in refused[0].stdout + refused[0].stderr
    assert "cannot submit jobs" in refused[1].stdout + refused[1].stderr
    assert refused[2].returncode == 0 and "was not collected by this store" in refused[2].stdout
    elsewhere = requests.get(recorded.main + "/logical/actors", timeout=30)
    assert elsewhere.status_code == 404
    assert f"--ray-dashboard-port: {recorded.ours}/logical/actors" in elsewhere.text


def _without_log_prefix(text: str) -> str:
    """Ray's CLI log lines without their time stamps and the address they name."""
    return "\n".join(line.split(" -- ", 1)[-1] for line in text.splitlines() if "server address" not in line)


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
            [recorded.job_id, "SUCCEEDED", "was not collected by this store"],
        ),
        (
            "overview",
            "overview",
            [
                f"Started a ray job {SUBMISSION}.",
                f"Completed a ray job {SUBMISSION} with a status SUCCEEDED.",
            ],
        ),
        ("actor-broken", f"actors/{recorded.broken}", ["Broken", "DEAD", "RuntimeError: constructor fails"]),
        ("actor-grouped", f"actors/{recorded.grouped}", ["Grouped", "DEAD", '"CPU": 0.25']),
        ("node", f"cluster/nodes/{recorded.node_id}", ["Node details fetched", "ACTOR (4)"]),
    ]
    hostname = _get(recorded.ours, "/nodes?view=summary")["data"]["summary"][0]["hostname"]
    pages[-1][2].append(hostname)
    try:
        for name, route, texts in pages:
            browser.get(f"{recorded.ours}/#/{route}")
            if name == "actor-broken":  # the logs pane opens on stdout; a user clicks STDERR
                _wait_click(browser, "//button[@role='tab' and normalize-space()='stderr']")
            deadline = time.monotonic() + 30
            while not all(t in browser.find_element(By.TAG_NAME, "body").text for t in texts):
                if time.monotonic() > deadline:
                    browser.save_screenshot(str(SCREENSHOTS / f"ray-jobs-{name}-failed.png"))
                    body = browser.find_element(By.TAG_NAME, "body").text
                    missing = [t for t in texts if t not in body]
                    raise AssertionError(f"{route}: {missing} not on the page:\n{body[:3000]}")
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
            failed = [
                e["message"]
                for e in browser.get_log("browser")
                if e["level"] == "SEVERE" and not any(part in e["message"] for part in ABSENT)
            ]
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
