"""The OTLP hook loses nothing when Ray ends its processes: spans, event records and the tasks' log
records (prints, `logging`) go through the node's spool and its forwarder (tracing/spool.py,
tracing/forwarder.py) to a real OTLP receiver.

Real Ray 2.60: `ray.shutdown()` right after the last result (with workers ended by `max_calls`, an
actor killed, and tasks that printed and logged lines, one failing, just before), the cluster's
processes ended under a running job (the test helper's `stop_cluster`, as `ray stop` does: SIGTERM
then SIGKILL), an endpoint that is down while the job ends; and the traced process pool, whose
workers end with `os._exit`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.agg_procs import free_port, run_json_script, wait_until
from helpers.otlp_counting_receiver import OtlpReceiver, attributes_of, value_of
from helpers.ray_cluster import start_head, stop_cluster
from helpers.tracing_procs import HELPERS, OTLP_HOOK, run_pool, script_env

from ray_otel_events.tracing.spool import (
    SPOOL_SUFFIX,
    STATS_FILE,
    forwarder_pid,
    unsent_bytes,
)

pytest.importorskip("ray")
if not Path("/proc/self/cmdline").exists():
    pytest.skip("finds the cluster's processes through /proc", allow_module_level=True)

DRIVER = str(HELPERS / "otlp_spool_driver.py")
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
EXECUTE, SUBMIT = "ray.remote_worker", "ray.remote"
# What each `chatty` task of the burst writes (tests/helpers/otlp_spool_driver.py): its line's
# `log.iostream` and severity number (INFO, ERROR, WARN).
CHATTY = {"to stdout": ("stdout", 9), "to stderr": ("stderr", 17), "logged": (None, 13)}
FAIL_LINE = "fail: about to raise"


@pytest.fixture
def spool_root(tmp_path: Path) -> Iterator[Path]:
    """This test's spool; its forwarders (detached, so not our children) are ended at the end."""
    root = tmp_path / "spool"
    yield root
    for lock in root.glob("*/forwarder.lock"):
        pid = forwarder_pid(str(lock.parent))
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def _env(receiver: OtlpReceiver, spool_root: Path, **extra: str) -> dict[str, str]:
    return script_env(
        None,
        {
            **RAY_ENV,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": receiver.protocol,
            "RAY_OTEL_EVENTS_SPOOL_DIR": str(spool_root),
            "RAY_OTEL_EVENTS_FORWARDER_IDLE_SECONDS": "0.5",
            **extra,
        },
    )


def _folder(spool_root: Path) -> Path:
    folders = [p for p in spool_root.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def _short(name: str) -> str:
    """`module.function ray.remote` -> `function ray.remote`."""
    function, _, role = name.partition(" ")
    return f"{function.rsplit('.', 1)[-1]} {role}"


def _by_name(receiver: OtlpReceiver) -> Counter[str]:
    return Counter(_short(span.name) for span in receiver.spans)


def _records_per_span(receiver: OtlpReceiver) -> Counter[bytes]:
    return Counter(record.span_id for record in receiver.records)


def _event_records(receiver: OtlpReceiver) -> list[Any]:
    """The event records (a key-value list body; a task's lines have a string body)."""
    return [r for r in receiver.records if r.body.WhichOneof("value") == "kvlist_value"]


def _task_lines(receiver: OtlpReceiver) -> dict[str, Any]:
    """The tasks' log records (prints and `logging`) by body."""
    return {r.body.string_value: r for r in receiver.records if r.body.WhichOneof("value") == "string_value"}


def _has_task_lines(summary: dict[str, Any]) -> Any:
    """Whether every line the burst's printing tasks wrote has arrived."""
    bodies = [f"chatty {i} {what}" for i in range(len(summary["chatty"])) for what in CHATTY]
    return lambda r: all(body in _task_lines(r) for body in [*bodies, FAIL_LINE])


def _check_task_lines(receiver: OtlpReceiver, summary: dict[str, Any]) -> None:
    """Every line the burst's printing tasks wrote arrived once, with what ties it to its task as
    the hook's records carry it: Ray's task id, its execution span's ids, the stream, the
    severity, the pid, the time."""
    lines = _task_lines(receiver)
    bodies = [r.body.string_value for r in receiver.records if r.body.WhichOneof("value") == "string_value"]
    assert len(bodies) == len(set(bodies)), "a line was delivered twice"
    executions = {s.span_id: s for s in receiver.spans if s.name.endswith(EXECUTE)}
    for i, task_id in enumerate(summary["chatty"]):
        for what, (stream, severity) in CHATTY.items():
            record = lines.get(f"chatty {i} {what}")
            assert record is not None, (i, what, sorted(lines))
            attributes = attributes_of(record.attributes)
            assert attributes["ray.task_id"] == task_id, attributes
            assert attributes.get("log.iostream") == stream and record.severity_number == severity
            assert attributes["process.pid"] > 0 and record.time_unix_nano > 0, attributes
            span = executions[record.span_id]
            assert _short(span.name) == f"chatty {EXECUTE}" and record.trace_id == span.trace_id
    failing = lines[FAIL_LINE]
    span = executions[failing.span_id]
    assert _short(span.name) == f"fail {EXECUTE}" and span.status.code == 2  # STATUS_CODE_ERROR
    assert attributes_of(failing.attributes)["log.iostream"] == "stdout"


def _running_only(record: Any) -> bool:
    """A lifecycle record whose only state is RUNNING: the start of a task whose end never came."""
    body = value_of(record.body)
    states = [t["state"] for t in body.get("taskLifecycleEvent", {}).get("stateTransitions", [])]
    return body.get("eventType") == "TASK_LIFECYCLE_EVENT" and states == ["RUNNING"]


def _check_every_span_has_its_records(receiver: OtlpReceiver, *, killed: bool = False) -> None:
    """Every task span came with its event records (a submit span: definition + lifecycle; an
    execution span: RUNNING + its end), and nothing arrived twice. With `killed` (workers ended
    under running tasks), a task's start written before it was killed has its RUNNING record and
    no span (the span never ended): those records, and only those, may come without a span."""
    ids = [span.span_id for span in receiver.spans]
    assert len(ids) == len(set(ids)), "a span was delivered twice"
    per_span = _records_per_span(receiver)
    for span in receiver.spans:
        if span.name.endswith((EXECUTE, SUBMIT)):
            assert per_span[span.span_id] >= 2, span.name
    alone = [r for r in _event_records(receiver) if r.span_id not in set(ids)]
    if killed:
        alone = [r for r in alone if not _running_only(r)]
    assert not alone, f"{len(alone)} record(s) without their span: {[value_of(r.body) for r in alone][:3]}"


def _wait_drained(folder: Path, timeout_s: float = 30.0) -> None:
    """The forwarder deletes what was acknowledged and exits once no writer is left."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if forwarder_pid(str(folder)) is None and not list(folder.glob("*" + SPOOL_SUFFIX)):
            return
        time.sleep(0.1)
    raise AssertionError(f"spool not drained: {sorted(p.name for p in folder.iterdir())}")


def _burst(env: dict[str, str], n: int) -> dict[str, Any]:
    temp_dir = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    try:
        summary: dict[str, Any] = run_json_script(
            [sys.executable, DRIVER, "burst", OTLP_HOOK, temp_dir, str(n)], env, 300
        )[0]
        return summary
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.ray
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_shutdown_at_once_delivers_every_span_and_record(spool_root: Path, protocol: str) -> None:
    receiver = OtlpReceiver(protocol)
    try:
        n = 1000 if protocol == "http/protobuf" else 300  # the burst once; then the other protocol's path
        summary = _burst(_env(receiver, spool_root), n)
        assert summary["actor_calls"] == 3 and len(set(summary["once_pids"])) == 3  # max_calls=1
        expected = {
            f"noop {SUBMIT}": n,
            f"noop {EXECUTE}": n,
            f"once {SUBMIT}": 3,
            f"once {EXECUTE}": 3,
        }

        lines = _has_task_lines(summary)

        def arrived(r: OtlpReceiver) -> bool:
            names = _by_name(r)
            return (
                all(names[k] >= v for k, v in expected.items()) and names[f"add {EXECUTE}"] >= 3 and lines(r)
            )

        assert receiver.wait_for(arrived, 120), (dict(_by_name(receiver)), sorted(_task_lines(receiver)))
        _wait_drained(_folder(spool_root))
        names = _by_name(receiver)
        for name, count in expected.items():
            assert names[name] == count, (name, dict(names))
        # The actor killed right after its calls: its creation and every call, both sides.
        assert names[f"__init__ {SUBMIT}"] == names[f"__init__ {EXECUTE}"] == 1
        assert names[f"add {SUBMIT}"] == names[f"add {EXECUTE}"] == 3
        _check_every_span_has_its_records(receiver)
        _check_task_lines(receiver, summary)
        noop_ids = {s.span_id for s in receiver.spans if s.name.endswith(f"noop {EXECUTE}")}
        per_span = _records_per_span(receiver)
        assert sum(per_span[i] for i in noop_ids) == 2 * n  # RUNNING and FINISHED, each task
        stats = json.loads((_folder(spool_root) / STATS_FILE).read_text())["counters"]
        assert (
            "dropped_spans" not in stats and "dropped_records" not in stats and "dropped_lines" not in stats
        )
    finally:
        receiver.stop()


@pytest.mark.ray
def test_ending_the_cluster_under_a_running_job_loses_no_finished_task(
    spool_root: Path, tmp_path: Path
) -> None:
    receiver = OtlpReceiver()
    temp_dir = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    port = free_port()
    env = _env(receiver, spool_root, RAY_ADDRESS=f"127.0.0.1:{port}")
    driver = None
    try:
        start_head(env, temp_dir, port, num_cpus=2, tracing_hook=OTLP_HOOK)
        driver_log = tmp_path / "driver.stderr"
        with driver_log.open("wb") as stderr:
            driver = subprocess.Popen(
                [sys.executable, DRIVER, "stream"], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
            )
        assert driver.stdout is not None
        done = 0
        for line in driver.stdout:
            done = json.loads(line)["done"]
            if done >= 300:
                break
        assert done >= 300, (driver.poll(), driver_log.read_text(errors="replace")[-3000:])
        stop_cluster(temp_dir)  # as `ray stop`: SIGTERM to the cluster's processes, then SIGKILL
        driver.terminate()
        driver.wait(30)

        def arrived(r: OtlpReceiver) -> bool:
            return _by_name(r)[f"noop {EXECUTE}"] >= done

        assert receiver.wait_for(arrived, 60), dict(_by_name(receiver))
        _wait_drained(_folder(spool_root))
        names = _by_name(receiver)
        # Every task the driver saw finish, and the submission of every task that ran.
        assert names[f"noop {EXECUTE}"] >= done
        assert names[f"noop {SUBMIT}"] >= names[f"noop {EXECUTE}"]
        _check_every_span_has_its_records(receiver, killed=True)
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait(30)
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        receiver.stop()


@pytest.mark.ray
def test_endpoint_down_at_shutdown_is_sent_at_the_next_start(spool_root: Path) -> None:
    receiver = OtlpReceiver(up=False)
    env = _env(receiver, spool_root, RAY_OTEL_EVENTS_FORWARDER_RETRY_SECONDS="1")
    try:
        summary = _burst(env, 100)
        folder = _folder(spool_root)
        deadline = time.monotonic() + 30
        while forwarder_pid(str(folder)) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert forwarder_pid(str(folder)) is None, "the forwarder gives up for now once no writer is left"
        assert unsent_bytes(str(folder)) > 0
        stats = json.loads((folder / STATS_FILE).read_text())["counters"]
        assert stats["retryable_failures"] and "dropped_spans" not in stats
        assert "kept in the spool" in (folder / "forwarder.log").read_text()
        receiver.start()
        # The next process that installs the hook starts a forwarder, which sends what waited.
        next_start = subprocess.run(
            [sys.executable, "-c", f"from {OTLP_HOOK.split(':')[0]} import setup_tracing; setup_tracing()"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert next_start.returncode == 0, next_start.stderr

        lines = _has_task_lines(summary)  # kept in the spool with the spans, not lost in the workers

        def arrived(r: OtlpReceiver) -> bool:
            names = _by_name(r)
            return names[f"noop {EXECUTE}"] >= 100 and names[f"noop {SUBMIT}"] >= 100 and lines(r)

        assert receiver.wait_for(arrived, 60), (dict(_by_name(receiver)), sorted(_task_lines(receiver)))
        _wait_drained(folder)
        assert _by_name(receiver)[f"noop {EXECUTE}"] == 100
        _check_every_span_has_its_records(receiver)
        _check_task_lines(receiver, summary)
    finally:
        receiver.stop()


def test_pool_workers_ending_with_os_exit_and_an_endpoint_up_later(spool_root: Path) -> None:
    """Pool workers end with os._exit; the endpoint comes up after the pool is gone, while the
    forwarder still retries: everything arrives, once."""
    receiver = OtlpReceiver(up=False)
    try:
        summary, stderr = run_pool(
            {"hook": OTLP_HOOK, "tasks": 20, "max_workers": 2}, _env(receiver, spool_root)
        )
        assert summary["squares"] == [i * i for i in range(20)]
        assert "Traceback" not in stderr, stderr
        folder = _folder(spool_root)

        def failed_to_send() -> bool:
            stats = folder / STATS_FILE
            counters = json.loads(stats.read_text())["counters"] if stats.exists() else {}
            return bool(counters.get("retryable_failures"))

        # the pool is gone, its forwarder has failed to send and still retries: then the endpoint comes up
        wait_until(failed_to_send, "the forwarder's failed sends")
        assert forwarder_pid(str(folder)) is not None, "the forwarder gave up before the endpoint came up"
        receiver.start()

        tasks = 20 + 4  # and the script's pid_of tasks, which find the workers

        def arrived(r: OtlpReceiver) -> bool:
            return _by_name(r)[f"square {EXECUTE}"] >= 20 and len(r.records) >= 4 * tasks

        assert receiver.wait_for(arrived, 30), (dict(_by_name(receiver)), len(receiver.records))
        _wait_drained(_folder(spool_root))
        names = _by_name(receiver)
        assert names[f"square {EXECUTE}"] == names[f"square {SUBMIT}"] == 20
        assert names[f"pid_of {EXECUTE}"] == names[f"pid_of {SUBMIT}"] == 4
        assert len(receiver.records) == 4 * tasks  # definition, submitted, running, finished: per task
        _check_every_span_has_its_records(receiver)
        pids = {a.value.string_value for s in receiver.spans for a in s.attributes if a.key == "ray.pid"}
        assert str(summary["pid"]) in pids and len(pids) >= 2  # the submitter's spans and the workers'
    finally:
        receiver.stop()
