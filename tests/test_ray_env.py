"""`ray-otel-events ray-env`, and `serve` telling a cluster wired wrong.

ray-env's lines are evaluated by a real shell; `serve` runs as a process. The per-session checks
are fed the captured Ray 2.60 events with a kind left out, one session per kind. Then one live Ray
2.60 cluster wired only by `ray-env` (tests/helpers/ray_cluster.py takes its variables from the
command) sends every type Ray 2.60 emits and raises no warning, and a second, without
RAY_enable_core_worker_ray_event_to_aggregator, is told what it lacks.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import FIXTURE, CliServer, clean_env, start
from helpers.postgres import serve_store_args
from helpers.ray_cluster import RayCluster, ray_bin, ray_cluster, ray_env
from helpers.ray_workload import tasks_and_actor_class

from ray_otel_events.config import ConfigError, wiring_check_delay_s
from ray_otel_events.services.wiring_watch import serve_url
from ray_otel_events.store.session_checks import SessionJudge

EVENTS: list[dict[str, Any]] = [item.get("event", item) for item in json.loads(Path(FIXTURE).read_text())]

# What a Ray 2.60 node emits when wired by ray-env (seen live; the test below checks each arrives).
RAY_2_60_EMITS = {
    "TASK_DEFINITION_EVENT",
    "TASK_LIFECYCLE_EVENT",
    "ACTOR_TASK_DEFINITION_EVENT",
    "TASK_PROFILE_EVENT",
    "DRIVER_JOB_DEFINITION_EVENT",
    "DRIVER_JOB_LIFECYCLE_EVENT",
    "NODE_DEFINITION_EVENT",
    "NODE_LIFECYCLE_EVENT",
    "ACTOR_DEFINITION_EVENT",
    "ACTOR_LIFECYCLE_EVENT",
    "WORKER_DEFINITION_EVENT",
    "WORKER_LIFECYCLE_EVENT",
}
# Read by the store, exposed by ray-env, never emitted by Ray 2.60: its GCS has no placement-group
# event emitter, its job manager writes submission-job events to export files only, and platform
# events come from Kubernetes providers.
RAY_2_60_NEVER_EMITS = {
    "PLACEMENT_GROUP_DEFINITION_EVENT",
    "PLACEMENT_GROUP_LIFECYCLE_EVENT",
    "SUBMISSION_JOB_DEFINITION_EVENT",
    "SUBMISSION_JOB_LIFECYCLE_EVENT",
    "PLATFORM_EVENT",
}
DELAY_S = "3"  # serve's --wiring-check-delay beside a live cluster (its events arrive over seconds)
# ... and for the captured events: each session's whole batch is one POST, folded in one transaction,
# so no kind of a session is stored a moment after another; the checks run three times as often.
CAPTURED_DELAY_S = "1"
WARNING_NOTHING = "no Ray event has arrived"


def _ray_env(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "ray-env", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )


def _in_a_shell(*args: str) -> dict[str, str]:
    """The environment a shell has after `eval "$(ray-otel-events ray-env ARGS)"`."""
    command = " ".join([sys.executable, "-m", "ray_otel_events", "ray-env", *args])
    out = subprocess.run(
        ["bash", "-c", f'set -e; eval "$({command})"; env -0'],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    return dict(item.split("=", 1) for item in out.stdout.split("\0") if "=" in item)


def test_ray_env_wires_a_shell_for_the_installed_ray() -> None:
    env = _in_a_shell("http://127.0.0.1:8265")
    assert env["RAY_enable_ray_event"] == "1"
    assert env["RAY_enable_core_worker_ray_event_to_aggregator"] == "1"
    assert env["RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR"] == "http://127.0.0.1:8265/v1/ray-events"
    exposed = env["RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES"].split(",")
    assert set(exposed) == RAY_2_60_EMITS | RAY_2_60_NEVER_EMITS and len(exposed) == len(set(exposed))
    python_types = set(env["RAY_ENABLE_PYTHON_RAY_EVENT_TYPES"].split(","))
    assert python_types == {
        "PLATFORM_EVENT",
        "SUBMISSION_JOB_DEFINITION_EVENT",
        "SUBMISSION_JOB_LIFECYCLE_EVENT",
    }
    # The Export API types the collector ships, each a name the installed Ray's writers check.
    export_types = env["RAY_enable_export_api_write_config"].split(",")
    assert set(export_types) == {
        "EXPORT_DATASET_METADATA",
        "EXPORT_DATASET_OPERATOR_EVENT",
        "EXPORT_DATASET_OPERATOR_SCHEMA",
        "EXPORT_TRAIN_RUN",
        "EXPORT_TRAIN_RUN_ATTEMPT",
        "EXPORT_SUBMISSION_JOB",
    }
    spec = importlib.util.find_spec("ray")
    assert spec is not None and spec.origin is not None
    logger_source = (Path(spec.origin).parent / "_private" / "event" / "export_event_logger.py").read_text()
    for name in export_types:
        assert f"SourceType.{name}\n" in logger_source, name
    # The helper every live-Ray test is wired by reads the same lines.
    assert ray_env("http://127.0.0.1:8265") == {k: v for k, v in env.items() if k.startswith("RAY_")}
    said = _ray_env("http://127.0.0.1:8265").stdout.splitlines()
    assert said[-1].startswith("# ") and said[-1].endswith(
        "ray-otel-events collect --to http://127.0.0.1:8265"
    ), said[-1]


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5:8265/v1/ray-events",
        "http://10.0.0.5:8265/v1/ray-events/",
        "http://10.0.0.5:8265/",
        " http://10.0.0.5:8265 ",
    ],
)
def test_ray_env_takes_serve_base_or_its_receiver(url: str) -> None:
    exports = _in_a_shell(f"'{url}'")
    assert (
        exports["RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR"] == "http://10.0.0.5:8265/v1/ray-events"
    )


def test_ray_env_keeps_a_path_prefix_and_quotes_for_the_shell() -> None:
    out = _ray_env("https://proxy.example:8443/ray otel", "--ray-version", "2.60.0")
    assert out.returncode == 0, out.stderr
    address = "'https://proxy.example:8443/ray otel/v1/ray-events'"
    assert f"export RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR={address}" in out.stdout.splitlines()


def test_ray_env_per_release() -> None:
    """2.49 names its execution events differently and knows no actor, job or node events; worker
    events begin with 2.60's line; no release is given `ALL` (2.49-2.53 let nothing through)."""

    def exposed(version: str) -> list[str]:
        out = _ray_env("http://h:1", "--ray-version", version)
        assert out.returncode == 0, out.stderr
        assert f"Ray {version} (--ray-version)" in out.stdout
        line = next(x for x in out.stdout.splitlines() if "EXPOSABLE_EVENT_TYPES=" in x)
        return line.split("=", 1)[1].split(",")

    old = exposed("2.49.2")
    assert "TASK_EXECUTION_EVENT" in old and "TASK_LIFECYCLE_EVENT" not in old
    assert "ACTOR_DEFINITION_EVENT" not in old and "ALL" not in old
    mid = exposed("2.55.0")
    assert {"TASK_LIFECYCLE_EVENT", "NODE_DEFINITION_EVENT", "PLACEMENT_GROUP_DEFINITION_EVENT"} <= set(mid)
    assert "TASK_EXECUTION_EVENT" not in mid and "WORKER_LIFECYCLE_EVENT" not in mid
    assert set(exposed("2.60.0rc1")) == RAY_2_60_EMITS | RAY_2_60_NEVER_EMITS
    older = _ray_env("http://h:1", "--ray-version", "2.55.0").stdout
    assert "RAY_ENABLE_PYTHON_RAY_EVENT_TYPES" not in older
    assert "RAY_enable_export_api_write_config" not in older  # checked in 2.60's package only


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ftp://h:1"], "is not an http:// or https:// URL"),
        (["127.0.0.1:8265"], "is not an http:// or https:// URL"),
        (["http://:8265"], "names no host"),
        (["http://h:99999"], "has a bad port"),
        (["http://h:1/?x=1"], "no query, fragment or user"),
        (["http://h:1", "--ray-version", "2.48.1"], "Ray 2.48.1 does not export its events over HTTP"),
        (["http://h:1", "--ray-version", "2.61.0"], "newer than the releases ray-env knows (2.49 to 2.60)"),
        (["http://h:1", "--ray-version", "two"], "'two' is not a Ray version"),
    ],
)
def test_ray_env_refuses_with_a_reason(args: list[str], message: str) -> None:
    out = _ray_env(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert message in out.stderr and "Traceback" not in out.stderr


def _messages(server: CliServer, level: str) -> list[str]:
    """The messages at `level` in serve's JSON log so far."""
    found = []
    for line in server.log_lines():
        entry = json.loads(line) if line.startswith("{") else {}
        if entry.get("level") == level:
            found.append(entry["message"])
    return found


def _warnings(server: CliServer) -> list[str]:
    return _messages(server, "WARNING")


def _wait_for(condition: Callable[[], Any], what: str | Callable[[], str], timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, (
            f"timed out waiting for {what if isinstance(what, str) else what()}"
        )
        time.sleep(0.2)
    return found


def _sessions(server: CliServer) -> dict[str, dict[str, Any]]:
    answer = requests.get(f"http://{server.address}/api/sessions", timeout=30)
    assert answer.status_code == 200, answer.text
    return {entry["name"]: entry for entry in answer.json()["sessions"]}


# Kinds left out of the captured events -> the checks that must fail (and only those).
LEFT_OUT: dict[str, tuple[set[str], list[str]]] = {
    "whole": (set(), []),
    "no_task_events": (
        {
            "TASK_DEFINITION_EVENT",
            "TASK_LIFECYCLE_EVENT",
            "ACTOR_TASK_DEFINITION_EVENT",
            "TASK_PROFILE_EVENT",
        },
        ["task_events"],
    ),
    "no_definitions": ({"TASK_DEFINITION_EVENT", "ACTOR_TASK_DEFINITION_EVENT"}, ["task_definitions"]),
    "no_lifecycle": ({"TASK_LIFECYCLE_EVENT"}, ["task_lifecycle"]),
    "no_jobs": ({"DRIVER_JOB_DEFINITION_EVENT", "DRIVER_JOB_LIFECYCLE_EVENT"}, ["jobs"]),
    "no_nodes": ({"NODE_DEFINITION_EVENT", "NODE_LIFECYCLE_EVENT"}, ["nodes"]),
    "no_actors": ({"ACTOR_DEFINITION_EVENT", "ACTOR_LIFECYCLE_EVENT"}, ["actors"]),
    "no_workers": ({"WORKER_DEFINITION_EVENT", "WORKER_LIFECYCLE_EVENT"}, ["workers"]),
}


def test_serve_names_what_each_session_lacks_once(
    servers: list[CliServer], store_location: str | Path, tmp_path: Path
) -> None:
    """On either backend: each check fails for its session alone, told once with the fix."""
    store = serve_store_args(store_location, tmp_path)
    serve = start(servers, "serve", *store, "--wiring-check-delay", CAPTURED_DELAY_S)
    url = f"http://{serve.address}"
    fix = f'eval "$(ray-otel-events ray-env {url})"'
    hints = _wait_for(lambda: [m for m in _messages(serve, "INFO") if fix in m], "the line that wires a node")
    assert len(hints) == 1 and "before `ray start`" in hints[0]
    _wait_for(lambda: any(WARNING_NOTHING in w for w in _warnings(serve)), "the no-event warning")
    nothing = [w for w in _warnings(serve) if WARNING_NOTHING in w]
    assert len(nothing) == 1 and fix in nothing[0]

    for name, (left_out, _) in LEFT_OUT.items():
        batch = [
            dict(e, sessionName=f"session_{name}", eventId=f"{name}-{e['eventId']}")
            for e in EVENTS
            if e["eventType"] not in left_out
        ]
        posted = requests.post(f"{url}/v1/ray-events", json=batch, timeout=30)
        assert posted.status_code == 200 and posted.json()["accepted"] == len(batch), posted.text
    expected = sorted(f"session_{n}" for n, (_, checks) in LEFT_OUT.items() if checks)

    def told_sessions() -> list[str]:
        return sorted(m[1] for w in _warnings(serve) if (m := re.match(r"session (\S+) lacks", w)))

    _wait_for(lambda: told_sessions() == expected, "a warning for each session that lacks a kind")
    told = [w for w in _warnings(serve) if w.startswith("session ")]
    sessions = _sessions(serve)
    for name, (_, checks) in LEFT_OUT.items():
        entry = sessions[f"session_{name}"]
        assert [m["check"] for m in entry["missing"]] == checks, (name, entry)
    assert all(fix in w and "ray stop" in w for w in told)
    no_workers = next(w for w in told if w.startswith("session session_no_workers "))
    assert "WORKER_DEFINITION_EVENT, WORKER_LIFECYCLE_EVENT" in no_workers

    # `sessions` prints the checks that failed, and a warning line each with the fix.
    listed = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "sessions", "--address", url],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert listed.returncode == 0, listed.stderr
    assert "MISSING" in listed.stdout.splitlines()[1]
    row = next(line for line in listed.stdout.splitlines() if line.startswith("session_no_lifecycle"))
    assert row.rstrip().endswith("task_lifecycle")
    assert (
        "warning: session session_no_nodes lacks NODE_DEFINITION_EVENT, NODE_LIFECYCLE_EVENT" in listed.stderr
    )
    assert f"`{fix}`" in listed.stderr
    serve.stop()
    assert sum(WARNING_NOTHING in w for w in _warnings(serve)) == 1
    assert len([w for w in _warnings(serve) if w.startswith("session ")]) == len(told)


DRIVER = (
    tasks_and_actor_class("wiring test failure")
    + """
from ray.util.placement_group import placement_group
pg = placement_group([{"CPU": 0.25}])
ray.get(pg.ready())
acc = Acc.options(placement_group=pg, num_cpus=0.25).remote()
assert ray.get(acc.add.remote(2)) == 2

# A driver's core worker sends its events every second and at exit only as best it can: stay
# connected until serve has stored every type (when asked to), so none is lost with the driver.
import os, re, time, urllib.request
wanted = set(filter(None, os.environ.get("WAIT_FOR_TYPES", "").split(",")))
deadline = time.monotonic() + 120
while wanted and time.monotonic() < deadline:
    metrics = urllib.request.urlopen(os.environ["SERVE_METRICS"], timeout=10).read().decode()
    if wanted <= set(re.findall(r'serve_events_stored_total[{]event_type="(\\w+)"', metrics)):
        break
    time.sleep(0.2)
"""
)


def _stored_types(server: CliServer) -> dict[str, float]:
    metrics = requests.get(f"http://{server.address}/metrics", timeout=30).text
    return {
        m[1]: float(m[2])
        for m in re.finditer(
            r'^ray_otel_events_serve_events_stored_total\{event_type="(\w+)"\} (\S+)$', metrics, re.M
        )
    }


def _session_of(cluster: RayCluster) -> str:
    """The session a cluster's events carry: the folder Ray's `session_latest` names."""
    return Path(cluster.temp_dir, "session_latest").resolve().name


class _Starting:
    """A `ray_cluster` entered in a thread of its own, for the test to go on meanwhile (a cluster's
    start is most of a live test's time); `cluster()` waits for it. As a context manager: its exit
    waits for the start to end, then stops the cluster."""

    def __init__(self, export_url: str, **kwargs: Any) -> None:
        self._stack = contextlib.ExitStack()
        self._result: RayCluster | BaseException | None = None

        def enter() -> None:
            try:
                self._result = self._stack.enter_context(ray_cluster(export_url, **kwargs))
            except BaseException as exc:  # a failed start: raised by cluster()
                self._result = exc

        self._thread = threading.Thread(target=enter)
        self._thread.start()

    def cluster(self) -> RayCluster:
        self._thread.join()
        if isinstance(self._result, BaseException):
            raise self._result
        assert self._result is not None
        return self._result

    def __enter__(self) -> _Starting:
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join()
        self._stack.close()


@pytest.mark.ray
def test_a_cluster_wired_by_ray_env_sends_everything_and_one_wired_wrong_is_told(
    servers: list[CliServer], tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    serve = start(servers, "serve", "--store", str(tmp_path / "e.sqlite3"), "--wiring-check-delay", DELAY_S)
    url = f"http://{serve.address}"
    _wait_for(lambda: any(WARNING_NOTHING in w for w in _warnings(serve)), "the no-event warning")

    # Wired only by ray-env (the helper's variables are its output): every type 2.60 emits arrives.
    with contextlib.ExitStack() as later:
        with ray_cluster(f"{url}/v1/ray-events", dashboard=True) as cluster:
            waits = {"WAIT_FOR_TYPES": ",".join(sorted(RAY_2_60_EMITS)), "SERVE_METRICS": f"{url}/metrics"}
            run = subprocess.run(
                [sys.executable, "-c", DRIVER],
                env={**cluster.env, **waits},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert run.returncode == 0, run.stdout + run.stderr
            right = _session_of(cluster)
            # Every type from this cluster alone, before the one wired wrong below starts (its GCS
            # sends job, node, actor and worker events too): it starts while this one goes on.
            _wait_for(
                lambda: set(_stored_types(serve)) >= RAY_2_60_EMITS,
                lambda: f"every type Ray 2.60 emits; stored: {_stored_types(serve)}",
            )
            # Without the core workers' switch: jobs, nodes and workers but no task.
            wrong_env = {"RAY_enable_core_worker_ray_event_to_aggregator": "0"}
            starting = later.enter_context(_Starting(f"{url}/v1/ray-events", extra_env=wrong_env))
            assert cluster.dashboard is not None
            env = {k: v for k, v in cluster.env.items() if k != "RAY_ADDRESS"}
            submitted = subprocess.run(  # a submitted job: its supervisor's internal job too
                [
                    ray_bin(),
                    "job",
                    "submit",
                    "--address",
                    cluster.dashboard,
                    "--",
                    sys.executable,
                    "-c",
                    "import ray; ray.init()",
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert submitted.returncode == 0, submitted.stdout + submitted.stderr
            _wait_for(
                lambda: set(_stored_types(serve)) >= RAY_2_60_EMITS,
                lambda: f"every type Ray 2.60 emits; stored: {_stored_types(serve)}",
            )

        # The cluster wired wrong: its session is told.
        wrong_cluster = starting.cluster()
        run = subprocess.run(
            [sys.executable, "-c", DRIVER], env=wrong_cluster.env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stdout + run.stderr
        told = _wait_for(
            lambda: [w for w in _warnings(serve) if w.startswith("session ")], "the wrong session's warning"
        )
        wrong_session = _session_of(wrong_cluster)
    sessions = _sessions(serve)
    wrong = next(name for name in sessions if name != right)
    assert sorted(sessions) == sorted([right, wrong_session]), sessions
    assert [m["check"] for m in sessions[wrong]["missing"]] == ["task_events"], sessions[wrong]
    assert len(told) == 1 and told[0].startswith(f"session {wrong} lacks TASK_DEFINITION_EVENT"), told
    assert f'eval "$(ray-otel-events ray-env {url})"' in told[0]
    # The right session's rows all settled before the wrong one's that were judged: no false alarm.
    assert sessions[right]["missing"] == [] and sessions[right]["tasks"] > 0, sessions[right]
    serve.stop()
    assert sum(WARNING_NOTHING in w for w in _warnings(serve)) == 1


def test_a_session_told_it_lacks_a_kind_stays_told_while_its_rows_are_written_again() -> None:
    """A cluster stopping ends its job and its actors: those rows, written again, are unsettled for
    the wiring delay, and the session must not read as whole meanwhile (the live test above saw it)."""
    judge = SessionJudge()

    def checks(counts_by_session: dict[str, dict[str, int]]) -> dict[str, list[str]]:
        return {name: [m["check"] for m in found] for name, found in judge.missing(counts_by_session).items()}

    settled = {"jobs": 1, "jobs_settled": 1, "actors": 2, "actors_settled": 2, "nodes": 1, "nodes_settled": 1}
    assert checks({"s": settled}) == {"s": ["task_events"]}
    rewritten = {**settled, "jobs_settled": 0, "actors_settled": 0}
    # "in_flight": evidence never settled, its events may be on the way
    assert checks({"s": rewritten, "in_flight": rewritten}) == {"s": ["task_events"], "in_flight": []}
    arrived = {**rewritten, "tasks": 3, "tasks_defined": 3, "tasks_stated": 3}
    assert checks({"s": arrived}) == {"s": []}  # the kind came after all: no longer missing
    # a session the store no longer holds is forgotten: back under another cluster, judged anew
    assert checks({"t": settled}) == {"t": ["task_events"]}
    assert checks({"s": rewritten}) == {"s": []}


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--wiring-check-delay", "0"], {}, "--wiring-check-delay must be above 0 seconds, got 0.0"),
        ([], {"RAY_OTEL_EVENTS_WIRING_CHECK_DELAY_SECONDS": "soon"}, "expected a number"),
        ([], {"RAY_OTEL_EVENTS_WIRING_CHECK_DELAY_SECONDS": "-1"}, "expected a number of seconds above 0"),
    ],
)
def test_serve_refuses_a_bad_wiring_check_delay(
    args: list[str], env: dict[str, str], message: str, tmp_path: Path
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "serve", "--store", str(tmp_path / "e.sqlite3"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(env),
    )
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert "listening" not in out.stdout


def test_the_wiring_delay_setting() -> None:
    assert wiring_check_delay_s({}) == 60.0
    assert wiring_check_delay_s({"RAY_OTEL_EVENTS_WIRING_CHECK_DELAY_SECONDS": "2.5"}) == 2.5
    with pytest.raises(ConfigError, match="above 0"):
        wiring_check_delay_s({"RAY_OTEL_EVENTS_WIRING_CHECK_DELAY_SECONDS": "0"})


def test_the_url_serve_names_is_one_a_node_can_reach() -> None:
    assert serve_url("127.0.0.1", 8265, tls=False) == "http://127.0.0.1:8265"
    assert serve_url("0.0.0.0", 8265, tls=False) == f"http://{socket.gethostname()}:8265"
    assert serve_url("::1", 8443, tls=True) == "https://[::1]:8443"
    # and ray-env takes each of them
    assert _ray_env(serve_url("::1", 8443, tls=True)).returncode == 0
