"""A real Ray 2.60 cluster's event export, through the bridge, as one trace at an OTLP sink.

`ray start` with Ray's own variables pointing its aggregator at the bridge's /v1/ray-events; a small
workload (tasks, a failing task, an actor); the spans that reach the sink form one trace per job.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.agg_procs import CliServer
from helpers.bridge_procs import ServerGroup, otlp_spans, url, wait_until
from helpers.ray_cluster import ray_cluster
from helpers.ray_workload import tasks_and_actor_class

pytest.importorskip("ray")

pytestmark = pytest.mark.ray

WORKLOAD = (
    tasks_and_actor_class("bridge test failure")
    + """
acc = Acc.remote()
assert ray.get(acc.add.remote(2)) == 2
"""
)


@pytest.fixture
def cluster_env(tmp_path: Path) -> Iterator[tuple[dict[str, str], CliServer, Path]]:
    with ServerGroup(tmp_path) as group:
        sink, sink_path = group.sink("otlp")
        bridge = group.bridge(
            "--export-addr", url(sink, "/events"), "--otlp-endpoint", url(sink), "--terminal-grace", "1"
        )
        with ray_cluster(url(bridge, "/v1/ray-events")) as cluster:
            yield cluster.env, bridge, sink_path


def test_real_ray_cluster_events_become_one_trace(
    cluster_env: tuple[dict[str, str], CliServer, Path],
) -> None:
    env, bridge, sink_path = cluster_env
    run = subprocess.run(
        [sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr

    def every_span() -> list[list[str]]:
        """The spans' names once every span the checks below name has arrived (pieces that trail
        their FINISHED wait the terminal grace), else nothing."""
        names = [str(s["name"]) for s in otlp_spans(sink_path)]
        wanted = {"driver", "actor Acc", "Acc.add", "boom"} <= set(names) and names.count("ok") == 3
        return [names] if wanted and any(name.startswith("job ") for name in names) else []

    wait_until(every_span, 1, timeout_s=120)
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
