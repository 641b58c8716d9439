"""Our stand-ins for the helpers Ray's tracing wrappers call (tracing/ray_wrappers.py) give what
Ray's own give, in a live Ray 2.60 driver, task and actor, and the spans of a traced workload are
the same with them as with Ray's helpers as shipped (`RAY_OTEL_EVENTS_RAY_WRAPPERS=0`)."""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import pytest
from helpers.agg_procs import run_json_script
from helpers.ray_cluster import stop_cluster
from helpers.tracing_procs import HELPERS, LOCAL_HOOK, script_env, sid, spans_by_pid

pytest.importorskip("ray")
if not Path("/proc/self/cmdline").exists():
    pytest.skip("finds the cluster's processes through /proc", allow_module_level=True)

pytestmark = pytest.mark.ray
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
# Values that differ from one cluster to the next; compared by where they recur instead.
RUN_IDS = ("ray.job_id", "ray.node_id", "ray.task_id", "ray.actor_id")
# Which worker process runs a task is Ray's scheduling choice, so it differs between two runs of
# one workload: these are checked for their presence and their pairing, not for which one it was.
WORKER_IDS = ("ray.pid", "ray.worker_id")


def _run(script: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    temp_dir = tempfile.mkdtemp(prefix="rw", dir="/tmp")
    try:
        out: dict[str, Any] = run_json_script(
            [sys.executable, str(HELPERS / script), *args, temp_dir], env, 300
        )[0]
        return out
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_stand_ins_give_what_rays_helpers_give_in_a_driver_a_task_and_an_actor(tmp_path: Path) -> None:
    summary = _run("ray_wrappers_driver.py", script_env(tmp_path / "spans", RAY_ENV), LOCAL_HOOK)
    for where in ("driver", "task", "actor"):
        rows = {row["case"]: row for row in summary[where]}
        assert [case for case, row in rows.items() if not row["same"]] == [], (where, rows)
        function_args = rows["function_args"]["ours"]
        actor_args = rows["actor_args_names"]["ours"]
        # Not vacuous: the per-call ids are there where Ray gives them, and only there.
        assert ("ray.task_id" in function_args) == (where != "driver"), function_args
        assert ("ray.actor_id" in actor_args) == (where == "actor"), actor_args
        assert function_args["ray.worker_id"] and function_args["ray.node_id"]
        assert rows["actor_args_callables"]["ours"]["ray.function"] == "Acc.add"
        assert set(rows["inject"]["ours"]) == {"traceparent"}
        used = rows["use_context"]["ours"]
        assert used["inside_is_parent"] and used["span"] == rows["use_context"]["parent"]
        assert used["restored"] and used["raised"] == "KeyError('body failed')"
        assert rows["use_context_none"]["ours"]["inside_empty"]
        assert rows["opentelemetry"]["ours_type"] == "OpenTelemetryModules"
    assert summary["task"][0]["ours"]["ray.task_id"] != summary["actor"][0]["ours"].get("ray.task_id")
    gone = summary["disconnected"]
    assert gone["ours"] == gone["ray"] and gone["ours"].startswith("RuntimeError: Job ID is not available")


def _spans(spans_dir: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Every span of the tracing driver's workload, once its last spans are on disk."""
    wanted = {"0x" + summary[k]["span_id"] for k in ("leaf", "mid", "acc")}
    deadline = time.monotonic() + 60
    while True:
        spans = [s for lines in spans_by_pid(spans_dir).values() for s in lines]
        done = wanted <= {sid(s) for s in spans} and any(
            s["name"] == "__main__.boom ray.remote_worker" for s in spans
        )
        if done or time.monotonic() > deadline:
            return spans
        time.sleep(0.1)


def _canonical(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spans keyed by their chain of names to the root, ids replaced by the order in which
    they first appear (per attribute): two runs of one workload give equal lists when only the
    ids differ."""
    by_id = {sid(s): s for s in spans}
    worker_of_pid: dict[str, str] = {}
    for span in spans:
        pid, worker = (span["attributes"].get(key) for key in WORKER_IDS)
        if pid is not None and worker is not None:
            assert worker_of_pid.setdefault(pid, worker) == worker, "a pid with two worker ids"

    def chain(span: dict[str, Any]) -> tuple[str, ...]:
        names = [span["name"]]
        while span["parent_id"]:
            span = by_id[span["parent_id"]]
            names.append(span["name"])
        return tuple(names)

    keyed = sorted((chain(s), s) for s in spans)
    assert len({k for k, _ in keyed}) == len(keyed), "two spans share a chain of names"
    labels: dict[tuple[str, str], str] = {}
    out = []
    for names, span in keyed:
        attributes = {}
        for key, value in span["attributes"].items():
            if key in RUN_IDS:
                count = sum(1 for k, _ in labels if k == key)
                value = labels.setdefault((key, value), f"{key}#{count}")
            elif key in WORKER_IDS:
                value = f"{key}#a-worker"
            attributes[key] = value
        out.append(
            {
                "chain": names,
                "kind": span["kind"],
                "status": span["status"],
                "attributes": list(attributes.items()),  # order included
                "events": [e["name"] for e in span["events"]],
                "links": len(span["links"]),
                "trace": span["context"]["trace_id"] == spans[0]["context"]["trace_id"],
            }
        )
    return out


def test_spans_are_the_same_with_rays_helpers_as_shipped(tmp_path: Path) -> None:
    runs = {}
    for switch in ("0", "1"):
        spans_dir = tmp_path / f"spans-{switch}"
        env = script_env(spans_dir, {**RAY_ENV, "RAY_OTEL_EVENTS_RAY_WRAPPERS": switch})
        summary = _run("tracing_ray_driver.py", env, "init", LOCAL_HOOK)
        runs[switch] = _canonical(_spans(spans_dir, summary))
    shipped, ours = runs["0"], runs["1"]
    names = {span["chain"][0] for span in ours}
    for name in (  # tasks, a nested task, actor creation, an actor method, a failing task
        "__main__.leaf ray.remote_worker",
        "__main__.mid ray.remote",
        "Acc.__init__ ray.remote",
        "Acc.__init__ ray.remote_worker",
        "Acc.add ray.remote_worker",
        "__main__.boom ray.remote_worker",
    ):
        assert name in names, sorted(names)
    assert all(span["trace"] for span in ours)
    assert ours == shipped


def test_left_alone_when_rays_helpers_have_another_shape(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.util.tracing import tracing_helper

    from ray_otel_events.tracing import ray_wrappers

    assert ray_wrappers._shape_mismatch(tracing_helper, "2.60.0") is None
    assert "not one whose" in str(ray_wrappers._shape_mismatch(tracing_helper, "2.61.0"))
    changed = types.ModuleType("tracing_helper")
    changed.__dict__.update(vars(tracing_helper))
    changed._function_hydrate_span_args = lambda name, extra: {}  # type: ignore[attr-defined]
    assert "_function_hydrate_span_args" in str(ray_wrappers._shape_mismatch(changed, "2.60.0"))
    del changed._DictPropagator  # type: ignore[attr-defined]
    changed._function_hydrate_span_args = tracing_helper._function_hydrate_span_args  # type: ignore[attr-defined]
    assert "_DictPropagator" in str(ray_wrappers._shape_mismatch(changed, "2.60.0"))
    # install() on a helper module of another shape changes nothing and says why at debug.
    monkeypatch.setitem(sys.modules, ray_wrappers.TRACING_HELPER, changed)
    proxy = tracing_helper._OpenTelemetryProxy()
    changed._opentelemetry = proxy  # type: ignore[attr-defined]
    with caplog.at_level(logging.DEBUG, logger="ray_otel_events.tracing"):
        assert ray_wrappers.install() is False
    assert changed._opentelemetry is proxy  # type: ignore[attr-defined]
    assert changed._use_context is tracing_helper._use_context  # type: ignore[attr-defined]
    assert "left as they are: _DictPropagator" in caplog.text
