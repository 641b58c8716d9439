"""Ray's own `ray logs ... --address HOST:PORT` over the store, with no Ray cluster anywhere.

`serve --ray-dashboard-port 0 --ray-gcs-port 0` holds a recorded run's events (POSTed as Ray's
aggregator posts them) and task log lines (OTLP from the SDK exporter, as the tracing hooks send
them). Ray 2.60's real CLI, in a subprocess, asks the GCS facade where the dashboard is and the
dashboard for the lines: a task's, an actor's, and a worker file's. Ray's own client meets a
GCS method or KV key the store does not keep with Ray's errors, and a wrong token with Ray's
AuthenticationError.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import FIXTURE, CliServer, clean_env, refused_by_cli
from helpers.otlp_logs import STDERR_LINE, STDOUT_LINE, export_log_lines
from helpers.ray_cluster import ray_bin, ray_cli_answers

EVENTS: list[dict[str, Any]] = json.loads(Path(FIXTURE).read_text())
CLI_TIMEOUT_S = 120


def _hex(b64: str) -> str:
    return base64.b64decode(b64).hex()


def _definition(event_type: str, name: str) -> dict[str, Any]:
    key = "actorTaskDefinitionEvent" if event_type == "ACTOR_TASK_DEFINITION_EVENT" else "taskDefinitionEvent"
    return next(
        e[key]
        for e in EVENTS
        if e["eventType"] == event_type
        and (e[key].get("taskFunc") or e[key].get("actorFunc") or {})
        .get("pythonFunctionDescriptor", {})
        .get("functionName")
        == name
    )


TASK = _hex(_definition("TASK_DEFINITION_EVENT", "child")["taskId"])
ACTOR_TASK = _definition("ACTOR_TASK_DEFINITION_EVENT", "inc")
ACTOR = _hex(ACTOR_TASK["actorId"])
LIFECYCLES = [e["taskLifecycleEvent"] for e in EVENTS if e["eventType"] == "TASK_LIFECYCLE_EVENT"]
ON_WORKER = _hex(next(t["taskId"] for t in LIFECYCLES if t.get("workerId")))  # a task on a known worker
BY_PID = next(t for t in LIFECYCLES if t.get("workerPid"))  # a task known by its worker's pid only
# ON_WORKER's worker as GCS reports it at registration; none of its tasks' events carry a pid (the
# executing worker's RUNNING event, the only one that does, is missing for them, as when Ray drops
# a batch it could not send to the aggregator).
ON_WORKER_ID = next(t["workerId"] for t in LIFECYCLES if t.get("workerId"))
ON_WORKER_PID = 4242
assert not any(t.get("workerPid") for t in LIFECYCLES if t.get("workerId") == ON_WORKER_ID)
NODE_ID = _hex(
    next(e["nodeDefinitionEvent"]["nodeId"] for e in EVENTS if e["eventType"] == "NODE_DEFINITION_EVENT")
)
NODE_IP = next(
    e["nodeDefinitionEvent"]["nodeIpAddress"] for e in EVENTS if e["eventType"] == "NODE_DEFINITION_EVENT"
)


def _env(**extra: str) -> dict[str, str]:
    # Ray's CLI keeps the loopback --address (serve binds nothing else) only with this variable.
    env = clean_env({"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **extra})
    env.pop("RAY_ADDRESS", None)  # the address comes from --address only
    return env


def _ray(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ray_bin(), *args], env=env or _env(), capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )


def _ray_batch(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    return ray_cli_answers(list(commands), _env())


def _serve(store: Path, env: dict[str, str] | None = None) -> tuple[CliServer, str, str]:
    """`serve` over `store`, its Ray dashboard's and its GCS facade's HOST:PORT."""
    serve = CliServer(
        "serve", "--store", str(store), "--ray-dashboard-port", "0", "--ray-gcs-port", "0", env=env
    )
    dashboard = serve.read_line(30)
    assert dashboard.startswith("listening ray-dashboard=127.0.0.1:"), dashboard
    gcs = serve.read_line(30)
    assert gcs.startswith("listening ray-gcs=127.0.0.1:"), gcs
    return serve, dashboard.split("=", 1)[1], gcs.split("=", 1)[1]


def _worker_definition() -> dict[str, Any]:
    event = next(e for e in EVENTS if e["eventType"] == "WORKER_DEFINITION_EVENT")
    definition = {**event["workerDefinitionEvent"], "workerId": ON_WORKER_ID, "pid": ON_WORKER_PID}
    return {
        **event,
        "eventId": base64.b64encode(b"on-worker-definition").decode(),
        "workerDefinitionEvent": definition,
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store filled once, then closed: each test's `serve` opens it afresh, as after `ray stop`."""
    pytest.importorskip("ray")
    path = tmp_path_factory.mktemp("store") / "events.sqlite3"
    serve = CliServer("serve", "--store", str(path))
    try:
        base = f"http://{serve.address}"
        assert (
            requests.post(
                f"{base}/v1/ray-events", json=[*EVENTS, _worker_definition()], timeout=30
            ).status_code
            == 200
        )
        for task in (TASK, _hex(ACTOR_TASK["taskId"]), ON_WORKER, _hex(BY_PID["taskId"])):
            export_log_lines(f"{base}/v1/logs", task)
        tasks = requests.get(f"{base}/api/v0/tasks?limit=100", timeout=30).json()["data"]["result"]["result"]
        assert TASK in {t["task_id"] for t in tasks}
        serve.stop()
    finally:
        serve.close()
    return path


def test_ray_logs_task_and_actor_from_the_store(store: Path) -> None:
    serve, _, gcs = _serve(store)
    try:
        out, err, actor = _ray_batch(
            ["logs", "task", "--id", TASK, "--address", gcs],
            ["logs", "task", "--id", TASK, "--err", "--address", gcs],
            ["logs", "actor", "--id", ACTOR, "--address", gcs],
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.rstrip().endswith(STDOUT_LINE) and STDERR_LINE not in out.stdout, out.stdout
        assert err.returncode == 0 and err.stdout.rstrip().endswith(STDERR_LINE), err.stdout + err.stderr
        assert actor.returncode == 0 and STDOUT_LINE in actor.stdout, actor.stdout + actor.stderr

        # An id the store never saw: Ray's CLI says so with the dashboard's reason.
        missing = _ray("logs", "task", "--id", "00ff", "--address", gcs)
        assert missing.returncode != 0
        assert "RayStateApiException: Could not find the task 00ff" in missing.stderr, missing.stderr
        assert "ray_otel_events" not in missing.stderr
        serve.stop()
        assert "Traceback" not in serve.stderr()
    finally:
        serve.close()


def test_ray_logs_worker_files_and_pids_from_the_store(store: Path) -> None:
    """`ray logs cluster` lists the workers' files the store can rebuild; `ray logs FILE` and
    `ray logs worker --pid` print them (the node named, as Ray needs for files and pids)."""
    serve, _, gcs = _serve(store)
    try:
        listed = _ray("logs", "cluster", "--node-ip", NODE_IP, "--address", gcs)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        files = [w.strip("- ") for w in listed.stdout.split() if w.startswith("worker-")]
        out_file = next(f for f in files if f.endswith(".out"))
        assert out_file.replace(".out", ".err") in files, listed.stdout
        pid = str(BY_PID["workerPid"])
        shown, by_node_id, by_pid = _ray_batch(
            ["logs", out_file, "--node-ip", NODE_IP, "--address", gcs],
            ["logs", out_file, "--node-id", NODE_ID, "--address", gcs],
            ["logs", "worker", "--pid", pid, "--err", "--node-ip", NODE_IP, "--address", gcs],
        )
        for answer in (shown, by_node_id):
            assert answer.returncode == 0 and answer.stdout.rstrip().endswith(STDOUT_LINE), (
                answer.stdout + answer.stderr
            )
        assert by_pid.returncode == 0, by_pid.stdout + by_pid.stderr
        assert by_pid.stdout.rstrip().endswith(STDERR_LINE), by_pid.stdout
        serve.stop()
    finally:
        serve.close()


def test_a_worker_file_takes_the_pid_gcs_reported_when_its_tasks_carry_none(store: Path) -> None:
    """A worker's file is named by its registered pid, and `pid=` finds its tasks' lines, though
    no event of those tasks carried the pid (no `worker-...-0.out` beside the real name)."""
    serve, dashboard, _ = _serve(store)
    try:
        base = f"http://{dashboard}/api/v0/logs"
        listed = requests.get(base, params={"node_ip": NODE_IP}, timeout=30).json()["data"]["result"]
        worker = _hex(ON_WORKER_ID)
        names = [f for files in listed.values() for f in files if f.startswith(f"worker-{worker}-")]
        assert names and all(
            f.rsplit("-", 1)[1] in (f"{ON_WORKER_PID}.out", f"{ON_WORKER_PID}.err") for f in names
        ), names
        lines = requests.get(
            f"{base}/file", params={"node_ip": NODE_IP, "pid": str(ON_WORKER_PID)}, timeout=30
        )
        assert lines.status_code == 200 and STDOUT_LINE in lines.text, lines.text
        serve.stop()
    finally:
        serve.close()


def test_rays_own_gcs_client_gets_only_what_a_history_store_has(store: Path, tmp_path: Path) -> None:
    """The dashboard's address, a NotFound for any other key, UNIMPLEMENTED for other methods."""
    serve, dashboard, gcs = _serve(store)
    probe = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import RpcError
client = GcsClient(address=sys.argv[1])
print(client.internal_kv_get(b"dashboard", b"dashboard").decode())
print(client.internal_kv_get(b"session_name", b"session"))
try:
    client.get_all_node_info(timeout=10)
except RpcError as exc:
    print("refused:", exc)
"""
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe, gcs],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            cwd=tmp_path,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        address, other, refused = out.stdout.splitlines()[:3]
        assert address == dashboard
        assert other == "None"
        assert refused.startswith("refused:") and "history store, not a live Ray cluster" in refused, refused
        serve.stop()
    finally:
        serve.close()


def test_a_token_protected_store_takes_rays_token(store: Path, tmp_path: Path) -> None:
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "store-token", "HOME": str(tmp_path)}
    serve, _, gcs = _serve(store, env=token)
    try:
        good = _ray("logs", "task", "--id", TASK, "--address", gcs, env=_env(**token))
        assert good.returncode == 0 and STDOUT_LINE in good.stdout, good.stdout + good.stderr
        wrong = _ray(
            "logs", "task", "--id", TASK, "--address", gcs, env=_env(**{**token, "RAY_AUTH_TOKEN": "wrong"})
        )
        assert wrong.returncode != 0 and STDOUT_LINE not in wrong.stdout
        assert "AuthenticationError" in wrong.stderr and "missing or wrong bearer token" in wrong.stderr
        serve.stop()
    finally:
        serve.close()


def test_the_gcs_port_needs_the_dashboard_port(tmp_path: Path) -> None:
    for args, reason in (
        (["--ray-gcs-port", "0"], "--ray-gcs-port needs --ray-dashboard-port"),
        (["--ray-dashboard-port", "0", "--ray-gcs-port", "70000"], "--ray-gcs-port must be 0..65535"),
    ):
        out = refused_by_cli("serve", "--store", str(tmp_path / "s.sqlite3"), *args)
        assert reason in out.stderr and not out.stdout, out.stderr


def test_serve_names_the_ray_extra_when_ray_is_missing(tmp_path: Path) -> None:
    # A `ray` that has a dashboard build but not the rest of the package
    build = tmp_path / "ray" / "dashboard" / "client" / "build"
    build.mkdir(parents=True)
    (build / "index.html").write_text("<html></html>")
    (tmp_path / "ray" / "__init__.py").write_text("")
    path = f"{tmp_path}:{Path(__file__).parents[1] / 'src'}"
    ports = ("--ray-dashboard-port", "0", "--ray-gcs-port", "0")
    out = refused_by_cli("serve", "--store", str(tmp_path / "s.sqlite3"), *ports, env={"PYTHONPATH": path})
    assert "--ray-gcs-port" in out.stderr and "ray-otel-events[ray]" in out.stderr
    assert not out.stdout
