"""The Ray version matrix: each release's switches, a live head of it running the matrix workload,
and the fields of Ray's `ray list` answers that our store must give back for it.

Each release other than the project's own runs from a venv of its own (`make test-ray-versions`
builds them under build/ray-versions/<version>); its own `ray start`, Python and `ray list` are
used, so the live answers are that release's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from helpers.agg_procs import clean_env, free_port
from helpers.ray_cluster import ray_cli_answers, start_head, stop_cluster

RELEASES = ("2.49.2", "2.52.1", "2.55.0", "2.60.0")
OWN_RELEASE = "2.60.0"  # the one in the project's .venv
WORKLOAD = Path(__file__).with_name("ray_versions_workload.py")
FIXTURES = Path(__file__).parent.parent / "fixtures"

# What each release needs before its events leave the node, verified on live clusters of each (the
# POST bodies under tests/fixtures/ray-<version>/ were recorded with exactly these). 2.49 knows no
# `enable_ray_event` switch (its core workers' one is the only one); its agent's default type filter
# names TASK_EXECUTION_EVENT, the type later releases call TASK_LIFECYCLE_EVENT.
_SWITCHES: dict[str, dict[str, str]] = {
    "2.49.2": {"RAY_enable_core_worker_ray_event_to_aggregator": "1"},
    "2.52.1": {"RAY_enable_ray_event": "1", "RAY_enable_core_worker_ray_event_to_aggregator": "1"},
    "2.55.0": {"RAY_enable_ray_event": "1", "RAY_enable_core_worker_ray_event_to_aggregator": "1"},
    "2.60.0": {"RAY_enable_ray_event": "1", "RAY_enable_core_worker_ray_event_to_aggregator": "1"},
}


def release_env(version: str, export_url: str) -> dict[str, str]:
    """The variables a head of `version` runs with: its switches and the export address."""
    return {**_SWITCHES[version], "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": export_url}


def release_bin(version: str, venvs: Path) -> Path:
    """The bin folder of `version`'s venv (the project's own for OWN_RELEASE)."""
    return Path(sys.executable).parent if version == OWN_RELEASE else venvs / version / "bin"


@dataclass
class LiveAnswers:
    tasks: list[dict[str, Any]]  # `ray list tasks --detail --format json`
    actors: list[dict[str, Any]]  # `ray list actors --format json`
    jobs: list[dict[str, Any]]  # `ray list jobs --format json`


_LIST = ("--format", "json", "--limit", "1000")


def _ask_live(bin_dir: Path, dashboard: str, env: dict[str, str]) -> LiveAnswers:
    answers = ray_cli_answers(
        [
            ["list", "tasks", "--detail", "--address", dashboard, *_LIST],
            ["list", "actors", "--address", dashboard, *_LIST],
            ["list", "jobs", "--address", dashboard, *_LIST],
        ],
        env,
        python=str(bin_dir / "python"),
    )
    for answer in answers:
        assert answer.returncode == 0, answer.stdout + answer.stderr
    tasks, actors, jobs = (json.loads(a.stdout) for a in answers)
    return LiveAnswers(tasks, actors, jobs)


_ENDED = ("FINISHED", "FAILED")
START_TRIES = 5


# What Ray's GCS (2.52 onwards) logs when its exporter agent (the dashboard agent, which holds the
# aggregator) was not up within its 30 retries of a second: it then exports no event of its own
# (actors, jobs, nodes) for the cluster's life. A loaded machine gets there (the agent took 54 s
# to start in one of our runs); the cores' task events still flow, through their own clients.
GCS_GAVE_UP = "Failed to establish connection to the event+metrics exporter agent"


def gcs_gave_up(temp_dir: str) -> bool:
    """Whether this cluster's GCS gave up on its exporter agent (`GCS_GAVE_UP` in its log)."""
    logs = Path(temp_dir, "session_latest", "logs")
    return any(GCS_GAVE_UP in f.read_text(errors="replace") for f in logs.glob("gcs_server.*"))


@dataclass
class LiveRelease:
    answers: LiveAnswers  # once every task attempt had ended
    ask: Callable[[], LiveAnswers]  # the live cluster's answers now
    gcs_gave_up: Callable[[], bool]  # its GCS exports none of its events (GCS_GAVE_UP)


@contextlib.contextmanager
def live_release(version: str, venvs: Path, export_url: str) -> Iterator[LiveRelease]:
    """A head of `version` exporting to `export_url` runs the matrix workload; yields the live
    cluster once every task attempt has ended, and stops the cluster's own processes (SIGTERM
    first: the agent flushes) on the way out."""
    bin_dir = release_bin(version, venvs)
    temp_dir = tempfile.mkdtemp(prefix="rv", dir="/tmp")  # short: Ray puts unix sockets in it
    port, dashboard_port = free_port(), free_port()
    env = {
        **clean_env(),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        **release_env(version, export_url),
        "RAY_ADDRESS": f"127.0.0.1:{port}",
    }
    env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    try:
        for tries_left in range(START_TRIES - 1, -1, -1):
            try:
                start_head(
                    env,
                    temp_dir,
                    port,
                    dashboard_port=dashboard_port,
                    agent_grpc_port=free_port(),  # Ray 2.52's GCS finds its aggregator only by a set port
                    ray=str(bin_dir / "ray"),
                )
                break
            except AssertionError:
                # Ray before 2.52 gives its dashboard 20 s to start, not always enough on a loaded
                # machine: `ray start` then fails, leaving the rest of the head running.
                stop_cluster(temp_dir)
                if not tries_left:
                    raise
        run = subprocess.run(
            [str(bin_dir / "python"), str(WORKLOAD)], env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0 and "done" in run.stdout, run.stdout + run.stderr[-5000:]
        dashboard = f"http://127.0.0.1:{dashboard_port}"
        cli_env = {k: v for k, v in env.items() if k != "RAY_ADDRESS"}
        deadline = time.monotonic() + 120
        while True:
            live = _ask_live(bin_dir, dashboard, cli_env)
            if live.tasks and all(t["state"] in _ENDED for t in live.tasks):
                break
            assert time.monotonic() < deadline, f"{version}: tasks never all ended: {live.tasks}"
            time.sleep(1.0)
        yield LiveRelease(live, lambda: _ask_live(bin_dir, dashboard, cli_env), lambda: gcs_gave_up(temp_dir))
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


# -- what is compared ----------------------------------------------------------------------
# The fields Ray lists that come from the events (an actor creation task's actor_id comes from its
# task id: no release's events carry it).
TASK_FIELDS = (
    "task_id",
    "attempt_number",
    "name",
    "state",
    "type",
    "job_id",
    "func_or_class_name",
    "error_type",
    "actor_id",
    "parent_task_id",
    "node_id",
    "worker_id",
)
ACTOR_FIELDS = ("actor_id", "class_name", "state", "name", "job_id", "node_id")
JOB_FIELDS = ("job_id", "status", "entrypoint", "type")


def project(rows: list[dict[str, Any]], fields: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return sorted((tuple(row.get(f) for f in fields) for row in rows), key=repr)


def actor_tasks(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(task id, attempt, actor id) of the actors' method calls."""
    return sorted(
        (row["task_id"], row["attempt_number"], row.get("actor_id"))
        for row in rows
        if row["type"] == "ACTOR_TASK"
    )


def session_of(events: list[dict[str, Any]]) -> str:
    names = {e["sessionName"] for e in events}
    assert len(names) == 1, names
    return names.pop()


def ours(serve_url: str, session: str) -> LiveAnswers:
    """Our store's answers for one session, through Ray's state API routes (the same requests Ray's
    CLI makes, with the session named: Ray's CLI cannot name one)."""

    def rows(resource: str, detail: bool) -> list[dict[str, Any]]:
        params = {"limit": "1000", "session": session, "detail": "1" if detail else "0"}
        answer = requests.get(f"{serve_url}/api/v0/{resource}", params=params, timeout=60)
        assert answer.status_code == 200, answer.text
        found: list[dict[str, Any]] = answer.json()["data"]["result"]["result"]
        return found

    return LiveAnswers(rows("tasks", True), rows("actors", False), rows("jobs", False))


VENVS_VARIABLE = "RAY_VERSIONS_VENVS"


def venvs_root() -> Path | None:
    """Where `make test-ray-versions` keeps the releases' venvs (it sets RAY_VERSIONS_VENVS); None
    outside it, so `make test` does not run the live matrix."""
    named = os.environ.get(VENVS_VARIABLE)
    return Path(named).resolve() if named else None
