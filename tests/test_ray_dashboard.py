"""Ray's own dashboard page over our store, compared with the live dashboard of the same run.

One live Ray 2.60 cluster (with its dashboard) exports its events to `serve --ray-dashboard-port 0`
while a job runs tasks (one fails), an actor that is killed and one whose constructor fails. While
the cluster is up, the live dashboard's answers are fetched; then the cluster is stopped and our
dashboard port must answer the same for jobs, task totals, the task table, actors, nodes and the
timeline; `ray job list` / `ray job status` work against it; and headless Chromium shows Ray's
pages (Jobs, a job, Actors, Cluster, a task with its logs) from the store. Screenshots go to
build/screenshots/ray-dashboard-*.png.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import CliServer, clean_env, refused_by_cli
from helpers.otlp_logs import STDERR_LINE, STDOUT_LINE, export_log_lines
from helpers.ray_cluster import ray_bin, ray_cluster
from helpers.ray_workload import tasks_and_actor_class

SCREENSHOTS = Path(__file__).resolve().parent.parent / "build" / "screenshots"
WORKLOAD = (
    tasks_and_actor_class("dashboard test failure", "Counter")
    + """
import time

@ray.remote
class Broken:
    def __init__(self):
        raise RuntimeError("constructor fails")

    def f(self):
        return 1

counter = Counter.remote()
assert ray.get(counter.add.remote(2)) == 2
broken = Broken.remote()
try:
    ray.get(broken.f.remote())
except ray.exceptions.RayActorError:
    pass
ray.kill(counter)
# the job ends once the cluster itself has every task done and both actors dead (their last events
# sent, not cut off by the driver's exit)
from ray.util.state import list_actors, list_tasks
deadline = time.monotonic() + 60
while not (
    all(t.state in ("FINISHED", "FAILED") for t in list_tasks())
    and [a.state for a in list_actors()] == ["DEAD", "DEAD"]
):
    assert time.monotonic() < deadline, (list_tasks(), list_actors())
    time.sleep(0.2)
"""
)
LIVE_PATHS = {
    "jobs": "/api/jobs/",
    "actors": "/logical/actors",
    "nodes": "/nodes?view=summary",
    "tasks": "/api/v0/tasks?detail=1&limit=10000",
    "version": "/api/version",
    "events": "/events",
}
# Ray's GCS stamps a job's or actor's start and end in its tables with one clock read and the
# event it exports with another, a millisecond or a few later: the stream carries the second.
CLOCK_READS_MS = 100
TASK_FIELDS = ("task_id", "attempt_number", "name", "state", "type", "func_or_class_name", "error_type")
# What Ray's own dashboard answers with an error status when that part is absent (no Prometheus,
# Grafana, Serve, Ray Data or platform events): the browser logs each as a failed load.
ABSENT = ("grafana_health", "prometheus_health", "serve/applications", "data/datasets", "platform_events")


@dataclass
class Recorded:
    live: dict[str, Any]  # the live dashboard's answers
    ours: str  # http://HOST:PORT of our dashboard port
    gcs: str  # HOST:PORT of our GCS facade, for `ray logs --address`
    serve: CliServer
    job_id: str


def _get(base: str, path: str) -> Any:
    response = requests.get(base + path, timeout=30)
    assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:300]}"
    return response.json()


def _tasks(answer: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {tuple(r[k] for k in TASK_FIELDS) for r in answer["data"]["result"]["result"]}


def _settled(base: str) -> bool:
    tasks = _get(base, LIVE_PATHS["tasks"])["data"]["result"]["result"]
    actors = _get(base, LIVE_PATHS["actors"])["data"]["actors"].values()
    jobs = _get(base, LIVE_PATHS["jobs"])
    return (
        len(tasks) >= 8
        and all(t["state"] in ("FINISHED", "FAILED") for t in tasks)
        and len(actors) == 2
        and all(a["state"] == "DEAD" for a in actors)
        and bool(jobs)
        and all(j["status"] == "SUCCEEDED" for j in jobs)
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    pytest.importorskip("ray")
    store = tmp_path_factory.mktemp("store") / "events.sqlite3"
    serve = CliServer("serve", "--store", str(store), "--ray-dashboard-port", "0", "--ray-gcs-port", "0")
    try:
        line = serve.read_line(30)
        assert line.startswith("listening ray-dashboard=127.0.0.1:"), line
        ours = "http://" + line.split("=", 1)[1]
        gcs = serve.read_line(30)
        assert gcs.startswith("listening ray-gcs=127.0.0.1:"), gcs
        # wired by ray-env alone (the cluster helper runs it): its type list has the profile
        # events the timeline is built from
        with ray_cluster(f"http://{serve.address}/v1/ray-events", dashboard=True) as cluster:
            assert cluster.dashboard is not None
            run = subprocess.run(
                [sys.executable, "-c", WORKLOAD], env=cluster.env, capture_output=True, text=True, timeout=300
            )
            assert run.returncode == 0, run.stdout + run.stderr
            deadline = time.monotonic() + 120
            while not (_settled(cluster.dashboard) and _settled(ours)):
                assert time.monotonic() < deadline, "the live cluster or our store never settled"
                time.sleep(0.5)
            job_id = _get(cluster.dashboard, LIVE_PATHS["jobs"])[0]["job_id"]
            timeline = f"/api/v0/tasks/timeline?job_id={job_id}"
            while (mine := _slices(_get(ours, timeline))) != (
                theirs := _slices(_get(cluster.dashboard, timeline))
            ):
                assert time.monotonic() < deadline, (sorted(mine - theirs)[:6], sorted(theirs - mine)[:6])
                time.sleep(0.5)  # (a worker sends its profile events a second or so after its tasks)
            live = {name: _get(cluster.dashboard, path) for name, path in LIVE_PATHS.items()}
            live["summary"] = _get(cluster.dashboard, _summary_path(job_id))
            live["timeline"] = _get(cluster.dashboard, timeline)
        # Task log lines reach the store as OTLP log records (here from the OTel SDK's exporter)
        boom = next(r for r in live["tasks"]["data"]["result"]["result"] if r["name"] == "boom")
        export_log_lines(f"http://{serve.address}/v1/logs", boom["task_id"])
        yield Recorded(live, ours, gcs.split("=", 1)[1], serve, job_id)
        serve.stop()
    finally:
        serve.close()


def _slices(trace: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {
        (e["args"]["task_id"], e["args"]["attempt_number"], e["cat"], e["name"], e["ts"], e["dur"])
        for e in trace
        if e["ph"] == "X"
    }


def _summary_path(job_id: str) -> str:
    return f"/api/v0/tasks/summarize?filter_keys=job_id&filter_predicates=%3D&filter_values={job_id}"


def _totals(summary: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in summary["data"]["result"]["result"]["node_id_to_summary"]["cluster"]["summary"].values():
        for state, n in entry["state_counts"].items():
            out[state] = out.get(state, 0) + n
    return out


def test_our_dashboard_answers_what_the_live_one_did(recorded: Recorded) -> None:
    live, ours = recorded.live, recorded.ours
    # Jobs: id, status, entrypoint, times (the driver's own record, as Ray's job head lists it)
    keys = ("job_id", "type", "status", "entrypoint", "submission_id")
    mine = _get(ours, "/api/jobs/")
    assert len(mine) == len(live["jobs"]) == 1
    differ = {k: (mine[0][k], live["jobs"][0][k]) for k in keys if mine[0][k] != live["jobs"][0][k]}
    assert not differ, differ
    for key in ("start_time", "end_time"):
        assert abs(mine[0][key] - live["jobs"][0][key]) <= CLOCK_READS_MS, (key, mine[0], live["jobs"][0])
    one = _get(ours, f"/api/jobs/{recorded.job_id}")
    assert one["status"] == "SUCCEEDED" and one["entrypoint"] == live["jobs"][0]["entrypoint"]
    assert requests.get(ours + "/api/jobs/ffffffff", timeout=30).status_code == 404
    # The job page's task totals, and its task table
    assert _totals(_get(ours, _summary_path(recorded.job_id))) == _totals(live["summary"])
    assert _totals(live["summary"]) == {"FINISHED": 5, "FAILED": 3}
    assert _tasks(_get(ours, LIVE_PATHS["tasks"])) == _tasks(live["tasks"])
    # Actors: class, state, id, pid, exit detail, times
    live_actors = live["actors"]["data"]["actors"]
    our_actors = _get(ours, "/logical/actors")["data"]["actors"]
    assert set(our_actors) == set(live_actors)
    for actor_id, theirs in live_actors.items():
        mine_actor = our_actors[actor_id]
        for key in ("actorId", "className", "state", "jobId", "pid", "exitDetail", "numRestarts"):
            assert mine_actor[key] == theirs[key], (key, mine_actor[key], theirs[key])
        assert mine_actor["address"]["nodeId"] == theirs["address"]["nodeId"]
        assert mine_actor["address"]["workerId"] == theirs["address"]["workerId"]
        for key in ("startTime", "endTime"):
            assert abs(mine_actor[key] - theirs[key]) <= CLOCK_READS_MS, (key, mine_actor[key], theirs[key])
    exits = {a["className"]: a["exitDetail"] for a in our_actors.values()}
    assert "ray.kill" in exits["Counter"] and "constructor fails" in exits["Broken"]
    # Nodes (the cluster's shape; live CPU and memory are not recorded)
    node_keys = ("nodeId", "nodeManagerAddress", "isHeadNode", "resourcesTotal")
    live_nodes = [{k: n["raylet"][k] for k in node_keys} for n in live["nodes"]["data"]["summary"]]
    our_summary = _get(ours, "/nodes?view=summary")["data"]
    assert [{k: n["raylet"][k] for k in node_keys} for n in our_summary["summary"]] == live_nodes
    node_id = live_nodes[0]["nodeId"]
    detail = _get(ours, f"/nodes/{node_id}")["data"]["detail"]
    assert set(detail["actors"]) == set(live_actors)
    status = _get(ours, "/api/cluster_status?format=1")["data"]["clusterStatus"]
    assert f"node_{node_id}" in status and "1.0 CPU" in status

    # The timeline: the same profile slices (task, phase, start, length), workers and nodes
    ours_timeline = _get(ours, f"/api/v0/tasks/timeline?job_id={recorded.job_id}")
    assert _slices(ours_timeline) == _slices(live["timeline"])
    assert {"task:execute", "task::ok", "task::boom"} <= {s[2] for s in _slices(ours_timeline)}
    threads = {e["args"]["name"] for e in ours_timeline if e["name"] == "thread_name"}
    assert threads == {e["args"]["name"] for e in live["timeline"] if e["name"] == "thread_name"}
    assert _get(ours, "/api/version")["ray_version"] == live["version"]["ray_version"]
    assert _get(ours, "/events") == live["events"]
    for path in ("/api/grafana_health", "/api/prometheus_health"):
        answer = requests.get(ours + path, timeout=30)
        assert answer.status_code == 500 and answer.json()["result"] is False


def test_ray_job_cli_and_task_logs_over_our_dashboard(recorded: Recorded) -> None:
    loopback = {
        "RAY_AUTH_MODE": "disabled",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }  # see test_ray_logs_cli
    env = {k: v for k, v in clean_env(loopback).items() if k != "RAY_ADDRESS"}

    def ray(*args: str) -> str:
        out = subprocess.run([ray_bin(), *args], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout + out.stderr

    listed = ray("job", "list", "--address", recorded.ours)
    assert f"job_id='{recorded.job_id}'" in listed and "JobStatus.SUCCEEDED" in listed
    assert f"Job '{recorded.job_id}' succeeded" in ray(
        "job", "status", recorded.job_id, "--address", recorded.ours
    )

    # The request `ray.util.state.get_log` makes: the task's stored lines, as Ray returns the
    # task's slice of its worker's file; `ray logs` itself finds this port through our GCS facade.
    boom = next(
        r["task_id"] for r in recorded.live["tasks"]["data"]["result"]["result"] if r["name"] == "boom"
    )
    logs = ray("logs", "task", "--id", boom, "--address", recorded.gcs)
    assert f"\n{STDOUT_LINE}\n" in logs and STDERR_LINE not in logs, logs
    path = f"/api/v0/logs/file?task_id={boom}&attempt_number=0&lines=-1"
    out = requests.get(recorded.ours + path + "&suffix=out", timeout=30)
    err = requests.get(recorded.ours + path + "&suffix=err", timeout=30)
    assert out.status_code == err.status_code == 200
    assert out.text == STDOUT_LINE + "\n"
    assert err.text == STDERR_LINE + "\n"
    missing = requests.get(recorded.ours + "/api/v0/logs/file?task_id=00ff&suffix=out", timeout=30)
    assert missing.status_code == 404 and "00ff" in missing.text


def test_the_ray_dashboard_page_in_chromium(recorded: Recorded) -> None:
    from selenium.webdriver.common.by import By
    from test_web_page import headless_chromium

    browser = headless_chromium(1300)
    tasks = recorded.live["tasks"]["data"]["result"]["result"]
    boom_row = next(t for t in tasks if t["name"] == "boom")
    boom = boom_row["task_id"]
    worker_file = f"worker-{boom_row['worker_id']}-{boom_row['job_id']}-{boom_row['worker_pid']}.out"
    broken = next(a for a in recorded.live["actors"]["data"]["actors"].values() if a["className"] == "Broken")
    node_id = recorded.live["nodes"]["data"]["summary"][0]["raylet"]["nodeId"]
    job = recorded.job_id
    workers = _get(
        recorded.ours, f"/api/v0/workers?filter_keys=node_id&filter_predicates=%3D&filter_values={node_id}"
    )
    alive = sum(
        1 for w in workers["data"]["result"]["result"] if w["is_alive"]
    )  # running ones only, as Ray's
    pages = [
        ("jobs", "jobs", ["Fetched jobs", job, "SUCCEEDED"]),
        ("job", f"jobs/{job}", ["Total: 8", "Finished: 5", "Failed: 3", "Task Timeline", "SUCCEEDED"]),
        (
            "job-tasks",
            f"jobs/{job}",
            ["Broken.__init__", "Counter.add", "Function or class name", "ACTOR_CREATION_TASK"],
        ),
        ("actors", "actors", ["Counter", "Broken", "DEAD", broken["actorId"]]),
        ("actor", f"actors/{broken['actorId']}", ["Broken", "DEAD", "constructor fails"]),
        ("cluster", "cluster", ["Node summary fetched", node_id[:5], "ALIVE", "1.0 CPU"]),
        ("node", f"cluster/nodes/{node_id}", ["Node details fetched", "ACTOR (2)", f"WORKER ({alive})"]),
        ("task", f"jobs/{job}/tasks/{boom}", ["boom", "FAILED", "ValueError dashboard test failure"]),
        ("task-stdout", f"jobs/{job}/tasks/{boom}", ["boom", STDOUT_LINE]),
        ("logs", f"logs?nodeId={node_id}", [worker_file]),
        ("log-file", f"logs/viewer?nodeId={node_id}&fileName={worker_file}", [STDOUT_LINE]),
        ("overview", "overview", ["Recent jobs", job, "Cluster utilization"]),
    ]
    try:
        for name, route, texts in pages:
            browser.get(f"{recorded.ours}/#/{route}")
            if name == "task-stdout":  # the logs pane opens on stderr; a user clicks STDOUT
                _wait_click(browser, "//button[@role='tab' and normalize-space()='stdout']")
            if name == "job-tasks":  # the lineage bar and the task table open on a click
                _wait_click(browser, "//*[normalize-space()='5 / 8']")
                _wait_click(browser, "//h4[normalize-space()='Task Table']")
            deadline = time.monotonic() + 30
            while not all(t in browser.find_element(By.TAG_NAME, "body").text for t in texts):
                if time.monotonic() > deadline:
                    browser.save_screenshot(str(SCREENSHOTS / f"ray-dashboard-{name}-failed.png"))
                    body = browser.find_element(By.TAG_NAME, "body").text
                    missing = [t for t in texts if t not in body]
                    raise AssertionError(f"{route}: {missing} not on the page:\n{body[:2000]}")
                time.sleep(0.3)
            if name == "job-tasks":
                table = browser.find_element(By.XPATH, "//h4[normalize-space()='Task Table']")
                browser.execute_script("arguments[0].scrollIntoView()", table)
            browser.save_screenshot(str(SCREENSHOTS / f"ray-dashboard-{name}.png"))
            body = browser.find_element(By.TAG_NAME, "body").text
            assert "Request Status: Error" not in body and "Something went wrong" not in body, body[:2000]
            failed = _console_errors(browser)
            assert not failed, f"{route}: {failed}"
    finally:
        browser.quit()


def _console_errors(browser: Any) -> list[str]:
    """The page's SEVERE console messages, but for the requests of parts the store answers as absent."""
    return [
        e["message"]
        for e in browser.get_log("browser")
        if e["level"] == "SEVERE" and not any(part in e["message"] for part in ABSENT)
    ]


def _wait_click(browser: Any, xpath: str) -> None:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + 30
    while True:
        try:
            browser.find_element(By.XPATH, xpath).click()
            return
        except WebDriverException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_bad_requests_get_reasons_and_an_empty_store_renders(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    serve = CliServer(
        "serve",
        "--store",
        str(tmp_path / "s.sqlite3"),
        "--ray-dashboard-port",
        "0",
        env={"TZ": "America/Sao_Paulo"},  # no daylight saving time since 2019: always -03:00
    )
    try:
        ours = "http://" + serve.read_line(30).split("=", 1)[1]
        zone = requests.get(ours + "/timezone", timeout=30).json()
        assert zone == {"offset": "-03:00", "value": "America/Sao_Paulo"}
        page = requests.get(ours + "/", timeout=30)
        assert page.status_code == 200 and "<title>Ray Dashboard</title>" in page.text
        assert _get(ours, "/api/jobs/") == [] and _get(ours, "/logical/actors")["data"]["actors"] == {}
        assert "(no active nodes)" in _get(ours, "/api/cluster_status?format=1")["data"]["clusterStatus"]
        assert _get(ours, "/nodes?view=summary")["data"]["summary"] == []
        bad = {
            "/nodes?view=bogus": "Unknown view bogus",
            "/api/v0/logs": "node id and node ip are not provided",
            "/api/v0/logs/file?task_id=ab&suffix=txt": "suffix must be out or err",
            "/api/v0/logs/file?suffix=out": "one of task_id, actor_id, pid or filename",
            "/api/v0/logs/file?task_id=ab&lines=many": "must be integers",
            "/api/v0/tasks/summarize?summary_by=nope": "func_name or lineage",
            "/api/v0/tasks/summarize?filter_keys=bogus&filter_predicates=%3D&filter_values=1": "bogus",
        }
        for path, reason in bad.items():
            answer = requests.get(ours + path, timeout=30)
            assert answer.status_code == 400 and reason in answer.text, (
                path,
                answer.status_code,
                answer.text,
            )
        for path in ("/api/jobs/nope", "/api/v0/logs/file?filename=raylet.out&node_id=ab", "/static/../../x"):
            assert requests.get(ours + path, timeout=30).status_code == 404, path
        with socket.create_connection((serve.host, int(ours.rsplit(":", 1)[1])), timeout=30) as raw:
            raw.sendall(
                b"GET /static/%2e%2e/%2e%2e/__init__.py HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            assert raw.recv(64).startswith(b"HTTP/1.1 404"), "a file outside the page was served"
        serve.stop()
    finally:
        serve.close()


def test_serve_names_the_ray_extra_when_ray_is_missing(tmp_path: Path) -> None:
    # A `ray` without its dashboard build: as a user without the `ray` extra sees it
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("")
    path = f"{tmp_path}:{Path(__file__).parents[1] / 'src'}"
    out = refused_by_cli(
        "serve", "--store", str(tmp_path / "s.sqlite3"), "--ray-dashboard-port", "0", env={"PYTHONPATH": path}
    )
    assert "ray-otel-events[ray]" in out.stderr
    assert not out.stdout
    assert out.stderr.count("\n") == 1, out.stderr
