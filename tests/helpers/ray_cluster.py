"""A real Ray 2.60 head node for a test: its own ports and temp dir, its aggregator exporting to a
URL of ours; only its own processes are stopped (by pid, found through /proc).

Its event variables are what `ray-otel-events ray-env` prints (the real command, its export lines
parsed), so every live-Ray test is wired as the docs tell a user to wire a cluster.

Token authentication is off unless `token` is given: then RAY_AUTH_MODE=token with the token in a
file of the cluster's temp dir (RAY_AUTH_TOKEN_PATH), never the user's ~/.ray."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from helpers.agg_procs import cli_in_process, free_port


def ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def ray_env(url: str, *args: str) -> dict[str, str]:
    """The variables `ray-otel-events ray-env URL ARGS` exports, parsed as a shell would; answered
    in this process (every cluster start asks: an interpreter start costs a second on a loaded
    machine). test_ray_env.py runs the command itself as a process."""
    out = cli_in_process("ray-env", url, *args)
    assert out.returncode == 0, out.stderr
    found: dict[str, str] = {}
    for line in out.stdout.splitlines():
        if line.startswith("#"):
            continue
        words = shlex.split(line)
        assert len(words) == 2 and words[0] == "export" and "=" in words[1], line
        name, value = words[1].split("=", 1)
        found[name] = value
    return found


def cluster_event_env(export_url: str) -> dict[str, str]:
    """`ray-env`'s variables for `export_url`: serve's receiver, or (a test's own receiver at
    another path) its scheme and host given to `ray-env` and the export address kept as given."""
    variables = ray_env(export_url) if export_url.rstrip("/").endswith("/v1/ray-events") else {}
    if not variables:
        parts = urlsplit(export_url)
        variables = ray_env(f"{parts.scheme}://{parts.netloc}")
        variables["RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR"] = export_url
    return variables


def ray_cli_answers(
    commands: list[list[str]], env: dict[str, str], cwd: str | None = None, python: str | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """Each command's answer as `ray ARGS` gives it (exit code, stdout, stderr), all asked of one
    interpreter (helpers/ray_cli_batch.py): Ray's CLI takes over a second to start. `python` is
    another Ray release's interpreter (the version matrix), else this one."""
    out = subprocess.run(
        [python or sys.executable, str(Path(__file__).with_name("ray_cli_batch.py")), json.dumps(commands)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return [
        subprocess.CompletedProcess([ray_bin(), *a["args"]], a["returncode"], a["stdout"], a["stderr"])
        for a in json.loads(out.stdout.strip().splitlines()[-1])
    ]


@dataclass
class RayCluster:
    env: dict[str, str]  # RAY_ADDRESS and the event variables: run drivers with it
    dashboard: str | None  # http://127.0.0.1:PORT when started with the dashboard
    agent_grpc: str  # 127.0.0.1:PORT of Ray's aggregator (the dashboard agent's gRPC server)
    temp_dir: str


@contextlib.contextmanager
def ray_cluster(
    export_url: str,
    *,
    dashboard: bool = False,
    token: str | None = None,
    tracing_hook: str | None = None,
    extra_env: dict[str, str] | None = None,
    num_cpus: int = 1,
) -> Iterator[RayCluster]:
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("finds the cluster's processes through /proc")
    temp_dir = tempfile.mkdtemp(prefix="rb", dir="/tmp")  # short: Ray puts unix sockets in it
    port = free_port()
    agent_port = free_port()
    auth: dict[str, str] = {"RAY_AUTH_MODE": "disabled"}
    if token is not None:
        token_file = Path(temp_dir) / "auth_token"
        token_file.write_text(token)
        auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")},
        "RAY_USAGE_STATS_ENABLED": "0",
        **auth,
        **cluster_event_env(export_url),
        "RAY_ADDRESS": f"127.0.0.1:{port}",
        **(extra_env or {}),
    }
    dashboard_port = free_port() if dashboard else None
    try:
        start_head(
            env,
            temp_dir,
            port,
            num_cpus=num_cpus,
            dashboard_port=dashboard_port,
            tracing_hook=tracing_hook,
            agent_grpc_port=agent_port,
        )
        yield RayCluster(
            env,
            f"http://127.0.0.1:{dashboard_port}" if dashboard_port else None,
            f"127.0.0.1:{agent_port}",
            temp_dir,
        )
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def start_head(
    env: dict[str, str],
    temp_dir: str,
    port: int,
    *,
    num_cpus: int = 1,
    dashboard_port: int | None = None,
    tracing_hook: str | None = None,
    agent_grpc_port: int | None = None,
    ray: str | None = None,
) -> None:
    """`ray start --head` on 127.0.0.1:PORT with its own ports and TEMP_DIR (which names its
    processes for `stop_cluster`); the dashboard and the agent's gRPC port only when given. `ray`
    is another release's `ray` (the version matrix), else this venv's. Fails the test with Ray's
    output when the head does not start."""
    dashboard_args = (
        ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}"]
        if dashboard_port is not None
        else ["--include-dashboard=false"]
    )
    started = subprocess.run(
        [
            ray or ray_bin(),
            "start",
            "--head",
            f"--num-cpus={num_cpus}",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            f"--ray-client-server-port={free_port()}",
            *dashboard_args,
            "--dashboard-agent-listen-port=0",
            *([f"--dashboard-agent-grpc-port={agent_grpc_port}"] if agent_grpc_port else []),
            *([f"--tracing-startup-hook={tracing_hook}"] if tracing_hook else []),
            f"--temp-dir={temp_dir}",
            "--disable-usage-stats",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stdout + started.stderr


def pids_of(temp_dir: str) -> list[int]:
    """This cluster's processes: those whose command line names its temp dir, and their descendants
    (workers and agents retitle themselves `ray::...`)."""
    parents: dict[int, int] = {}
    roots = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(entry.name)
            parents[pid] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if temp_dir.encode() in (entry / "cmdline").read_bytes():
                roots.append(pid)
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return sorted(found)


# Ray's daemons that catch SIGTERM and outwait any grace (measured on Ray 2.60: the GCS, the raylet,
# the autoscaler's monitor and the runtime-env agent were all still up 10 s after it). None of them
# runs code of ours or holds events to flush, so once the rest have exited they are killed.
_LINGERING = (b"gcs_server", b"raylet", b"monitor.py")


def _lingers(pid: int) -> bool:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # gone
    if not args[0]:
        return True  # a zombie: exited, its parent not yet told
    if args[0].startswith(b"ray::RuntimeEnvAgent"):
        return True
    return any(arg.rsplit(b"/", 1)[-1] in _LINGERING for arg in args[:3])


def stop_cluster(temp_dir: str, grace_s: float = 3.0) -> None:
    """SIGTERM (a worker and Ray's aggregator flush at exit), then SIGKILL what is left, of this
    cluster's processes only.

    A job's workers are gone once its driver has disconnected, so the daemons need no grace here:
    the wait for SIGTERM (at most `grace_s`) ends as soon as only the daemons that ignore it
    (`_LINGERING`) are left.
    """
    for pid in pids_of(temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while not all(_lingers(pid) for pid in pids_of(temp_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids_of(temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while pids_of(temp_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
