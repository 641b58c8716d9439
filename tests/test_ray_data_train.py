"""Ray Data and Ray Train v2 after the cluster is gone, on ONE live Ray 2.60 cluster.

`serve --ray-dashboard-port 0` runs; a live head (with its dashboard) is wired by `ray-env` and
writes Ray's Export API files (`RAY_enable_export_api_write_config`, the six types the collector
ships). A driver runs two small Ray Data pipelines and a two-worker Train v2 run (a plain function:
no torch); `ray job submit` runs one entrypoint that succeeds, one that exits 3 with a driver, and
one that exits 2 before starting any. The live dashboard's `/api/data/datasets/{job_id}`,
`/api/train/v2/runs/v1` (Train v2's runs in Ray 2.60; `/api/train/v2/runs` is Train v1's) and Ray's
`ray job list|status|logs` are taken; the per-node collector (`ray-otel-events collect`, a real
subprocess beside the head) ships the export files and the log files to `serve`, and the export
files to a bridge whose OTLP spans go to a real sink; the cluster is stopped; our answers must be the
live ones, and the sink must hold the datasets', operators' and Train run's spans with the ids the
bridge gives. Screenshots go to build/screenshots/ray-data-*.png.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import CliServer, clean_env, cli_in_process
from helpers.bridge_procs import ServerGroup, otlp_spans, url, wait_until
from helpers.collector_procs import Collector
from helpers.ray_cluster import ray_cli_answers, ray_cluster, stop_cluster
from test_ray_dashboard import CLOCK_READS_MS, SCREENSHOTS, _console_errors, _get
from test_ray_user_path import _without_log_prefix

from ray_otel_events.otel.export_spans import (
    dataset_span_id,
    operator_span_id,
    train_attempt_span_id,
    train_run_span_id,
)
from ray_otel_events.otel.from_ray_events import job_span_id, trace_id_for_job
from ray_otel_events.store.sqlite_store import EventStore

pytestmark = pytest.mark.ray

DRIVER = Path(__file__).resolve().parent / "helpers" / "data_train_driver.py"
EXPORT_TYPES = (
    "EXPORT_DATASET_METADATA,EXPORT_DATASET_OPERATOR_EVENT,EXPORT_DATASET_OPERATOR_SCHEMA,"
    "EXPORT_TRAIN_RUN,EXPORT_TRAIN_RUN_ATTEMPT,EXPORT_SUBMISSION_JOB"
)
# Submitted entrypoints: one that succeeds, one whose driver exits 3, one that never starts a driver.
SUBMITTED = {
    "raysubmit_fine": ["python", "-c", "import ray; ray.init()"],
    "raysubmit_exit3": ["python", "-c", "import ray, sys; ray.init(); sys.exit(3)"],
    "raysubmit_nodriver": ["sh", "-c", "exit 2"],
}


@dataclass
class Recorded:
    live: dict[str, Any]  # the live dashboard's answers
    live_cli: dict[str, subprocess.CompletedProcess[str]]
    export_lines: list[dict[str, Any]]  # every export-event line the cluster wrote
    session: str
    node_id: str
    job_id: str  # the driver's job
    ours: str  # our dashboard port
    main: str  # serve's own port
    server: CliServer
    store: Path
    collected: dict[str, dict[str, int]]  # the collector's counters at its stop, by destination
    spans: list[dict[str, Any]]  # what the bridge sent the sink


def _cli_commands(address: str) -> dict[str, list[str]]:
    commands = {"job list": ["job", "list", "--address", address]}
    for submission in SUBMITTED:
        commands[f"status {submission}"] = ["job", "status", submission, "--address", address]
    for submission in ("raysubmit_fine", "raysubmit_exit3"):  # the two that ran a driver
        commands[f"logs {submission}"] = ["job", "logs", submission, "--address", address]
    return commands


def ask_ray_cli(address: str) -> dict[str, subprocess.CompletedProcess[str]]:
    commands = _cli_commands(address)
    env = {k: v for k, v in clean_env({"RAY_AUTH_MODE": "disabled"}).items() if k != "RAY_ADDRESS"}
    return dict(zip(commands, ray_cli_answers(list(commands.values()), env), strict=True))


def export_lines(temp_dir: str) -> list[dict[str, Any]]:
    """Each line of the session's export-event files, as the collector reads them."""
    found = []
    for path in sorted(Path(temp_dir).glob("session_2*/logs/export_events/event_*.log")):
        found += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return found


def _bridged(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spans the bridge made of the export files: datasets, operators, the Train run's."""
    names = ("dataset ", "operator ", "train ")
    return [s for s in spans if s["name"].startswith(names) or "ray.dataset_id" in s["_attrs"]]


def post_export(base: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"{base}/v1/ray-export-events", json=body, timeout=30)


def _ended(base: str) -> bool:
    jobs = _get(base, "/api/jobs/")
    return len(jobs) >= 4 and all(j["status"] in ("SUCCEEDED", "FAILED") for j in jobs)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    pytest.importorskip("ray.data")
    work = tmp_path_factory.mktemp("data_train")
    group = ServerGroup(work)
    started: dict[str, CliServer] = {}

    def start_bridge() -> None:  # while serve and the cluster start
        sink, started["out"] = group.sink("otlp")  # type: ignore[assignment]
        started["bridge"] = group.bridge("--otlp-endpoint", url(sink))

    bridging = threading.Thread(target=start_bridge)
    bridging.start()
    serve = CliServer("serve", "--store", str(work / "events.sqlite3"), "--ray-dashboard-port", "0")
    try:
        line = serve.read_line(30)
        assert line.startswith("listening ray-dashboard=127.0.0.1:"), line
        ours = "http://" + line.split("=", 1)[1]
        main = f"http://{serve.address}"
        extra = {
            "RAY_enable_export_api_write_config": EXPORT_TYPES,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        with ray_cluster(f"{main}/v1/ray-events", dashboard=True, extra_env=extra, num_cpus=2) as cluster:
            live_url = cluster.dashboard
            assert live_url is not None
            bridging.join()
            bridge = url(started["bridge"])
            # beside `ray start`, as the docs say; named relative, so stopping the cluster (which
            # ends every process naming its temp dir) leaves it running for its last pass
            temp_dir = Path(cluster.temp_dir)
            collector = Collector(
                main,
                Path(temp_dir.name),
                work / "collector-state",
                "--to-export-events",
                bridge,
                "--poll-interval",
                "1",
                cwd=temp_dir.parent,
            )
            announced = {collector.read_line(), collector.read_line()}
            assert {a.split(" to=")[1] for a in announced} == {main, bridge}, announced
            run = subprocess.run(
                [sys.executable, str(DRIVER)], env=cluster.env, capture_output=True, text=True, timeout=300
            )
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            driver_ended = time.time()
            job_id = json.loads(run.stdout.strip().splitlines()[-1])["job_id"]
            # `ray job submit --no-wait` of each, from one interpreter (Ray's CLI takes seconds to start)
            submits = [
                [
                    *("job", "submit", "--address", live_url, "--submission-id", submission, "--no-wait"),
                    *("--metadata-json", json.dumps({"case": submission}), "--", *entrypoint),
                ]
                for submission, entrypoint in SUBMITTED.items()
            ]
            for submitted in ray_cli_answers(submits, cluster.env):
                assert submitted.returncode == 0, submitted
            deadline = time.monotonic() + 120
            while not _ended(live_url):
                assert time.monotonic() < deadline, _get(live_url, "/api/jobs/")
                time.sleep(0.2)
            live = {
                "datasets": _get(live_url, f"/api/data/datasets/{job_id}"),
                "train runs": _get(live_url, "/api/train/v2/runs/v1"),
                "jobs": _get(live_url, "/api/jobs/"),
                "driver ended": driver_ended,
            }
            v1 = requests.get(live_url + "/api/train/v2/runs", timeout=30)  # Train v1's, in Ray 2.60
            live["train v1 runs"] = [v1.status_code, v1.text]
            version = _get(live_url, "/api/version")
            node_id = _get(live_url, "/nodes?view=summary")["data"]["summary"][0]["raylet"]["nodeId"]
            live_cli = ask_ray_cli(live_url)
            # `ray stop` (this cluster's processes only); its files stay until the block ends:
            # the collector's stop ships what the cluster's processes wrote last
            stop_cluster(str(temp_dir))
            try:
                collected = collector.stop()
            finally:
                collector.close()
            lines = export_lines(str(temp_dir))  # every line the cluster wrote
        operators = sum(len(d["operators"]) for d in live["datasets"]["datasets"])
        wanted = 2 + operators + 1 + 1 + 2  # datasets, operators, the run, its attempt, 2 workers
        spans = wait_until(lambda: _bridged(otlp_spans(started["out"])), wanted)  # type: ignore[arg-type]
        yield Recorded(
            live,
            live_cli,
            lines,
            version["session_name"],
            node_id,
            job_id,
            ours,
            main,
            serve,
            work / "events.sqlite3",
            collected,
            spans,
        )
    finally:
        bridging.join()
        serve.close()
        group.close()


def by_file(lines: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The lines as the collector POSTs them: a file (one source type) at a time, in its order."""
    files: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        files.setdefault(line["source_type"], []).append(line)
    return list(files.values())


def test_the_export_files_hold_datasets_train_runs_and_submissions(recorded: Recorded) -> None:
    kinds = {line["source_type"] for line in recorded.export_lines}
    assert kinds >= {
        "EXPORT_DATASET_METADATA",
        "EXPORT_DATASET_OPERATOR_SCHEMA",
        "EXPORT_TRAIN_RUN",
        "EXPORT_TRAIN_RUN_ATTEMPT",
        "EXPORT_SUBMISSION_JOB",
    }, kinds
    # the collector shipped every line to serve and to the bridge, each once, none refused
    for destination in (recorded.main, *(u for u in recorded.collected if u != recorded.main)):
        counters = recorded.collected[destination]
        assert counters["export_events_shipped"] == len(recorded.export_lines), (destination, counters)
        for problem in ("export_events_rejected", "post_failures", "final_pass_files_unsent"):
            assert counters.get(problem, 0) == 0, (destination, counters)
    assert recorded.collected[recorded.main]["log_bytes_shipped"] > 0
    # At least once: the same lines again, newest first, change nothing
    for batch in by_file(recorded.export_lines):
        body = {
            "sessionName": recorded.session,
            "nodeId": recorded.node_id,
            "hostname": "head",
            "events": batch[::-1],
        }
        assert post_export(recorded.main, body).json()["accepted"] == len(batch)


def test_datasets_as_the_live_dashboard_gave_them(recorded: Recorded) -> None:
    live = recorded.live["datasets"]["datasets"]
    mine = _get(recorded.ours, f"/api/data/datasets/{recorded.job_id}")["datasets"]
    assert [d["dataset"] for d in mine] == [d["dataset"] for d in live] and len(live) == 2
    for ours, theirs in zip(mine, live, strict=True):
        # Differ, and why: `total_rows` is counted by Ray Data's stats actor and in no event (ours
        # None); `end_time` is when the stats actor was told, the metadata's later (a few ms; over
        # a second on a loaded machine), written by the driver before it ended;
        # `progress` and `total` are counted from the operator's tasks, and an operator Ray Data
        # runs in the driver (AggregateNumRows, for `count()`) has none (ours None, not a guess).
        assert theirs["end_time"] <= ours["end_time"] <= recorded.live["driver ended"]
        assert ours["total_rows"] is None
        unknown = {"progress", "total"} if ours["operators"][-1]["name"] == "AggregateNumRows" else set()
        differ = {
            k: (ours.get(k), v)
            for k, v in theirs.items()
            if k not in ("operators", "total_rows", "end_time") and ours.get(k) != v
        }
        assert set(differ) <= unknown and all(ours[k] is None for k in differ), differ
        for op, live_op in zip(ours["operators"], theirs["operators"], strict=True):
            differ = {k: (op.get(k), v) for k, v in live_op.items() if k != "total_rows" and op.get(k) != v}
            if op["name"] == "AggregateNumRows":
                assert set(differ) <= unknown and all(op[k] is None for k in differ), differ
            else:
                assert not differ, (op["operator"], differ)


def test_train_runs_as_the_live_dashboard_gave_them(recorded: Recorded) -> None:
    live = recorded.live["train runs"]["train_runs"]
    mine = _get(recorded.ours, "/api/train/v2/runs/v1")["train_runs"]
    assert len(mine) == len(live) == 1
    ours, theirs = mine[0], live[0]
    assert theirs["status"] == "FINISHED" and len(theirs["attempts"][0]["workers"]) == 2
    # Every field as the live one but the run's job's times: Ray's job table stamps them with one
    # clock read and the event the store has them from with another (CLOCK_READS_MS).
    job, live_job = ours.pop("job_details"), theirs.pop("job_details")
    assert ours == theirs
    for key in ("start_time", "end_time"):
        assert abs(job.pop(key) - live_job.pop(key)) <= CLOCK_READS_MS
    assert job == live_job


def test_train_v1_path_as_the_live_dashboard_answered_it(recorded: Recorded) -> None:
    ours = requests.get(recorded.ours + "/api/train/v2/runs", timeout=30)
    assert [ours.status_code, ours.text] == recorded.live["train v1 runs"]


def _status_lines(answer: subprocess.CompletedProcess[str]) -> list[str]:
    """`ray job status`'s verdict and status message, without its log prefixes and colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", answer.stdout + answer.stderr)
    lines = [re.sub(r"^\S+ \S+\s+\w+ cli\.py:\d+ -- ", "", line) for line in text.splitlines()]
    return [line for line in lines if "address" not in line and not set(line) <= {"-"}]


def test_submitted_jobs_as_the_live_cluster_listed_them(recorded: Recorded) -> None:
    live = {j["submission_id"] or j["job_id"]: j for j in recorded.live["jobs"]}
    mine = {j["submission_id"] or j["job_id"]: j for j in _get(recorded.ours, "/api/jobs/")}
    assert set(mine) == set(live) == {*SUBMITTED, recorded.job_id}
    assert live["raysubmit_nodriver"]["job_id"] is None  # its entrypoint never started a driver
    assert live["raysubmit_fine"]["message"] == "Job finished successfully."
    assert live["raysubmit_exit3"]["driver_exit_code"] == 3
    for name, job in live.items():
        ours = dict(mine[name])
        if job["type"] == "DRIVER":  # a driver's times: two clock reads (CLOCK_READS_MS)
            for key in ("start_time", "end_time"):
                assert abs(ours.pop(key) - job[key]) <= CLOCK_READS_MS
            job = {k: v for k, v in job.items() if k not in ("start_time", "end_time")}
        assert ours == job, name
    ours_cli = ask_ray_cli(recorded.ours)
    for name, answer in recorded.live_cli.items():
        assert ours_cli[name].returncode == answer.returncode == 0, (name, ours_cli[name].stderr)
        if name.startswith("status"):
            assert _status_lines(ours_cli[name]) == _status_lines(answer), name
    for submission in SUBMITTED:
        for answer in (ours_cli["job list"], recorded.live_cli["job list"]):
            assert f"submission_id='{submission}'" in answer.stdout
    # the drivers' output, from the files the collector shipped, as the live cluster printed it
    for name in ("logs raysubmit_fine", "logs raysubmit_exit3"):
        ours, theirs = (_without_log_prefix(a[name].stdout) for a in (ours_cli, recorded.live_cli))
        assert ours == theirs and theirs.strip(), (name, ours_cli[name].stdout, ours_cli[name].stderr)
    code_3 = "driver_exit_code=3"
    assert code_3 in ours_cli["job list"].stdout and code_3 in recorded.live_cli["job list"].stdout


def test_the_bridge_made_spans_of_the_datasets_and_the_train_run(recorded: Recorded) -> None:
    """The collector's export files through the bridge: spans in the driver's job's trace, with the
    ids the bridge gives (tests/test_bridge_export_events.py)."""
    spans, session, job = recorded.spans, recorded.session, bytes.fromhex(recorded.job_id)
    assert {s["traceId"] for s in spans} == {trace_id_for_job(session, job).hex()}
    datasets = [s for s in spans if s["name"].startswith("dataset ")]
    live = recorded.live["datasets"]["datasets"]
    assert sorted(s["_attrs"]["ray.dataset_id"] for s in datasets) == sorted(d["dataset"] for d in live)
    for dataset in datasets:
        assert dataset["spanId"] == dataset_span_id(session, dataset["_attrs"]["ray.dataset_id"]).hex()
        assert dataset["parentSpanId"] == job_span_id(session, job).hex()
        operators = [s for s in spans if s.get("parentSpanId") == dataset["spanId"]]
        assert [s["name"] for s in operators] == dataset["_attrs"]["ray.dataset.operators"]
        dataset_id = dataset["_attrs"]["ray.dataset_id"]
        for op in operators:
            operator_id = op["_attrs"]["ray.dataset.operator_id"]
            assert op["spanId"] == operator_span_id(session, dataset_id, operator_id).hex()
    (run,) = [s for s in spans if s["name"] == "train run tiny-run"]
    assert run["spanId"] == train_run_span_id(session, run["_attrs"]["ray.train.run_id"]).hex()
    assert run["parentSpanId"] == job_span_id(session, job).hex()
    (attempt,) = [s for s in spans if s.get("parentSpanId") == run["spanId"]]
    attempt_id = attempt["_attrs"]["ray.train.attempt_id"]
    assert attempt["spanId"] == train_attempt_span_id(session, attempt_id).hex()
    workers = [s for s in spans if s.get("parentSpanId") == attempt["spanId"]]
    assert sorted(w["name"] for w in workers) == ["train worker 0", "train worker 1"]
    live_workers = recorded.live["train runs"]["train_runs"][0]["attempts"][0]["workers"]
    assert sorted(w["_attrs"]["ray.actor_id"] for w in workers) == sorted(w["actor_id"] for w in live_workers)


def test_our_cli_lists_datasets_and_train_runs(recorded: Recorded) -> None:
    listed = cli_in_process("list", "datasets", "--address", recorded.main, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    live = recorded.live["datasets"]["datasets"]
    assert [r["dataset_id"] for r in rows] == [d["dataset"] for d in live]
    assert (
        rows[-1]["operators"]
        == "Input -> ReadRange->MapBatches(double)->Filter(<lambda>)->Project -> AggregateNumRows"
    )
    assert rows[-1]["topology"][1]["input_dependencies"] == ["Input_0"]
    assert {r["state"] for r in rows} == {"FINISHED"}
    table = cli_in_process("list", "train-runs", "--address", recorded.main)
    assert table.returncode == 0, table.stderr
    assert "tiny-run" in table.stdout and "FINISHED" in table.stdout
    run = json.loads(
        cli_in_process("list", "train-runs", "--address", recorded.main, "--format", "json").stdout
    )[0]
    assert (run["name"], run["attempts"], run["workers"], run["job_id"]) == (
        "tiny-run",
        1,
        2,
        recorded.job_id,
    )
    filtered = cli_in_process("list", "datasets", "--address", recorded.main, "--filter", "job_id=ffffffff")
    assert filtered.returncode == 0 and filtered.stdout.startswith("0 of 0 matching (2 datasets stored)")


def test_bad_export_posts_are_refused_and_bad_events_named(recorded: Recorded) -> None:
    for body, reason in (
        ([], "must be a JSON object"),
        ({"sessionName": "x", "nodeId": "", "hostname": "", "events": []}, "sessionName"),
        ({"sessionName": recorded.session, "nodeId": "", "hostname": "", "events": {}}, '"events"'),
    ):
        answer = post_export(recorded.main, body)  # type: ignore[arg-type]
        assert answer.status_code == 400 and reason in answer.json()["error"], answer.text
    good = next(line for line in recorded.export_lines if line["source_type"] == "EXPORT_TRAIN_RUN")
    events = [good, {"event_id": "e1"}, {**good, "source_type": "EXPORT_TASK"}, 7]
    answer = post_export(
        recorded.main, {"sessionName": recorded.session, "nodeId": "", "hostname": "", "events": events}
    )
    assert answer.status_code == 200
    found = answer.json()
    assert (found["accepted"], found["rejected"]) == (1, 3)
    assert found["errors"][0].startswith("event 1 (e1): ") and "EXPORT_TASK" in found["errors"][1]


def test_the_job_page_shows_its_ray_data(recorded: Recorded) -> None:
    from selenium.webdriver.common.by import By
    from test_ray_dashboard import _wait_click
    from test_web_page import headless_chromium

    browser = headless_chromium(1300)
    try:
        browser.get(f"{recorded.ours}/#/jobs/{recorded.job_id}")
        _wait_click(browser, "//h4[normalize-space()='Ray Data Overview']")  # it opens on a click
        datasets = [d["dataset"] for d in recorded.live["datasets"]["datasets"]]
        _wait_for(browser, [*datasets, "FINISHED", "10 / 10"])
        # the newest dataset's row opens on a click, listing its operators
        _wait_click(browser, f"//tr[.//*[normalize-space()='{datasets[0]}']]/td[1]")
        _wait_for(browser, ["Map(<lambda>)"])  # its operators, by name
        section = browser.find_element(By.XPATH, "//*[normalize-space()='Ray Data Overview']")
        browser.execute_script("arguments[0].scrollIntoView()", section)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SCREENSHOTS / "ray-data-job.png"))
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "Something went wrong" not in body and "NaN" not in body, body[:3000]
        assert not _console_errors(browser)
    finally:
        browser.quit()


def _wait_for(browser: Any, texts: list[str]) -> None:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + 30
    while not all(t in browser.find_element(By.TAG_NAME, "body").text for t in texts):
        if time.monotonic() > deadline:
            browser.save_screenshot(str(SCREENSHOTS / "ray-data-job-failed.png"))
            body = browser.find_element(By.TAG_NAME, "body").text
            raise AssertionError(f"{[t for t in texts if t not in body]} not on the page:\n{body[:3000]}")
        time.sleep(0.3)


def test_the_entities_survive_rebuild_and_go_with_their_session(recorded: Recorded, tmp_path: Path) -> None:
    recorded.server.stop()
    store = tmp_path / "copy.sqlite3"  # serve's store as it left it, rebuilt and pruned here
    with sqlite3.connect(recorded.store) as source, sqlite3.connect(store) as copy:
        source.backup(copy)
    rebuilt = cli_in_process("store", "rebuild", "--store", str(store))
    assert rebuilt.returncode == 0, rebuilt.stderr
    after = cli_in_process("list", "train-runs", "--store", str(store), "--format", "json")
    assert json.loads(after.stdout)[0]["name"] == "tiny-run"
    opened = EventStore(store)
    try:
        assert len(opened.export_entities("EXPORT_DATASET_METADATA", recorded.session)) == 2
        opened.drop_session(recorded.session)
        assert opened.export_entities("EXPORT_DATASET_METADATA", None) == []
    finally:
        opened.close()
