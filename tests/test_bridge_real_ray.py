"""A real Ray 2.60 cluster's event export, through the bridge, as one trace at an OTLP sink.

`ray start` with Ray's own variables pointing its aggregator at the bridge's /v1/ray-events; a small
workload (tasks, a failing task, an actor); the spans that reach the sink form one trace per job.
The cluster gets its own ports and temp dir, and only its own processes are stopped (by pid).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.agg_procs import CliServer, free_port
from helpers.bridge_procs import ServerGroup, otlp_spans, url, wait_until

pytest.importorskip("ray")
if not Path("/proc/self/cmdline").exists():
    pytest.skip("finds the cluster's processes through /proc", allow_module_level=True)

pytestmark = pytest.mark.ray

WORKLOAD = """
import ray
ray.init()  # RAY_ADDRESS names this test's cluster

@ray.remote
def ok(x):
    return x

@ray.remote
def boom():
    raise ValueError("bridge test failure")

@ray.remote
class Acc:
    def add(self, x):
        return x

assert ray.get([ok.remote(i) for i in range(3)]) == [0, 1, 2]
try:
    ray.get(boom.remote())
except ray.exceptions.RayTaskError:
    pass
acc = Acc.remote()
assert ray.get(acc.add.remote(2)) == 2
"""


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


@pytest.fixture
def cluster_env(tmp_path: Path) -> Iterator[tuple[dict[str, str], CliServer, Path]]:
    with ServerGroup(tmp_path) as group:
        sink, sink_path = group.sink("otlp")
        bridge = group.bridge(
            "--export-addr", url(sink, "/events"), "--otlp-endpoint", url(sink), "--terminal-grace", "1"
        )
        yield from _cluster(bridge, sink_path)


def _cluster(bridge: CliServer, sink_path: Path) -> Iterator[tuple[dict[str, str], CliServer, Path]]:
    temp_dir = tempfile.mkdtemp(prefix="rb", dir="/tmp")  # short: Ray puts unix sockets in it
    port = free_port()
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_enable_ray_event": "1",
        "RAY_enable_core_worker_ray_event_to_aggregator": "1",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": url(bridge, "/v1/ray-events"),
        "RAY_ADDRESS": f"127.0.0.1:{port}",
    }
    try:
        started = subprocess.run(
            [
                _ray_bin(),
                "start",
                "--head",
                "--num-cpus=1",
                f"--port={port}",
                "--node-ip-address=127.0.0.1",
                f"--ray-client-server-port={free_port()}",
                "--include-dashboard=false",
                "--dashboard-agent-listen-port=0",
                f"--temp-dir={temp_dir}",
                "--disable-usage-stats",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert started.returncode == 0, started.stdout + started.stderr
        yield env, bridge, sink_path
    finally:
        _stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _pids_of(temp_dir: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if temp_dir.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


def _stop_cluster(temp_dir: str) -> None:
    """Terminate only the processes of this cluster: those whose command line names its temp dir."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _pids_of(temp_dir)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 20
        while _pids_of(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.2)


def test_real_ray_cluster_events_become_one_trace(
    cluster_env: tuple[dict[str, str], CliServer, Path],
) -> None:
    env, bridge, sink_path = cluster_env
    run = subprocess.run(
        [sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr

    def job_done() -> list[dict[str, object]]:
        return [s for s in otlp_spans(sink_path) if str(s["name"]).startswith("job ")]

    assert wait_until(job_done, 1, timeout_s=120), "the job's root span never arrived"
    time.sleep(1.5)  # the terminal grace for pieces that trail their FINISHED
    stats = bridge.stop()
    spans = otlp_spans(sink_path)
    assert stats["ray_events_receiver"]["accepted_events"][0]["value"] > 0
    assert len({s["traceId"] for s in spans}) == 1
    ids = {s["spanId"] for s in spans}
    assert all(s.get("parentSpanId", "") in ids | {""} for s in spans)
    names = [str(s["name"]) for s in spans]
    assert names.count("ok") == 3 and "driver" in names and "actor Acc" in names and "Acc.add" in names
    (boom,) = [s for s in spans if s["name"] == "boom"]
    assert boom["status"]["code"] == 2 and "ValueError: bridge test failure" in boom["status"]["message"]
    (root,) = [s for s in spans if "parentSpanId" not in s]
    assert str(root["name"]).startswith("job ")
