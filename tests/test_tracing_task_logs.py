"""Task logs tied to traces in TracedProcessPoolExecutor, with the local hook, in real processes.

A task's prints (stdout, stderr) and `logging` become OTel log records carrying its execution
span's trace and span ids and `ray.task_id`; the submitting process prints them as Ray does,
`(func pid=N) line`, or leaves them to the worker with `log_to_driver=False`. The hook's handler on
the root logger must not swallow what Python's last resort prints outside tasks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = """
import logging, sys
from ray_otel_events.executor import TracedProcessPoolExecutor

def work(n):
    print(f"hello {n}")
    print(f"oops {n}", file=sys.stderr)
    logging.getLogger("mine").warning("careful %d", n)
    return n

if __name__ == "__main__":
    hook = "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing"
    echo = sys.argv[1] == "on"
    with TracedProcessPoolExecutor(max_workers=2, tracing_startup_hook=hook, log_to_driver=echo) as pool:
        assert list(pool.map(work, range(4))) == [0, 1, 2, 3]
    logging.getLogger("outside").warning("a warning outside any task")
"""


def _run(tmp_path: Path, to_driver: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_OTEL_EVENTS_SPANS_DIR": str(tmp_path / "spans")}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, to_driver], env=env, capture_output=True, text=True, timeout=120
    )


def _lines(folder: Path, suffix: str) -> list[dict[str, Any]]:
    return [json.loads(line) for path in folder.glob(f"*{suffix}") for line in path.read_text().splitlines()]


def test_task_output_is_echoed_and_recorded_with_its_span(tmp_path: Path) -> None:
    proc = _run(tmp_path, "on")
    assert proc.returncode == 0, proc.stderr
    assert sorted(re.findall(r"^\(work pid=\d+\) (hello \d)$", proc.stdout, re.M)) == [
        f"hello {n}" for n in range(4)
    ]
    assert sorted(re.findall(r"^\(work pid=\d+\) (oops \d)$", proc.stderr, re.M)) == [
        f"oops {n}" for n in range(4)
    ]
    assert sorted(re.findall(r"^\(work pid=\d+\) (careful \d)$", proc.stderr, re.M)) == [
        f"careful {n}" for n in range(4)
    ]
    assert proc.stderr.count("a warning outside any task") == 1  # Python's last resort still works

    spans = {s["context"]["span_id"]: s for s in _lines(tmp_path / "spans", ".json") if "context" in s}
    records = _lines(tmp_path / "spans", ".logs.jsonl")
    (outside,) = [r for r in records if r["body"] == "a warning outside any task"]  # recorded too, in no span
    assert int(outside["span_id"], 16) == 0
    records.remove(outside)
    bodies = sorted(r["body"] for r in records)
    assert bodies == sorted([f"{w} {n}" for w in ("hello", "oops", "careful") for n in range(4)])
    for record in records:
        span = spans[record["span_id"]]  # written inside a span we have...
        assert (
            span["name"] == "__main__.work ray.remote_worker"
            and span["context"]["trace_id"] == record["trace_id"]
        )
        if record["attributes"].get("ray.task_id"):  # ...the task's execution span (prints carry the id)
            assert record["attributes"]["ray.task_id"] == span["attributes"]["ray.task_id"]
    streams = sorted(r["attributes"].get("log.iostream", "logging") for r in records)
    assert streams == ["logging"] * 4 + ["stderr"] * 4 + ["stdout"] * 4


def test_log_to_driver_off_leaves_output_in_the_worker(tmp_path: Path) -> None:
    proc = _run(tmp_path, "off")
    assert proc.returncode == 0, proc.stderr
    assert "(work pid=" not in proc.stdout + proc.stderr
    assert sorted(re.findall(r"^(hello \d)$", proc.stdout, re.M)) == [f"hello {n}" for n in range(4)]
    assert sorted(re.findall(r"^(careful \d)$", proc.stderr, re.M)) == [f"careful {n}" for n in range(4)]
    assert len(_lines(tmp_path / "spans", ".logs.jsonl")) == 13  # still recorded (and the driver's warning)


BARE_SCRIPT = """
import logging
from ray_otel_events.executor import TracedProcessPoolExecutor

def work(n):
    logging.getLogger("mine").warning("careful %d", n)
    logging.getLogger("ray_otel_events.anything").warning("ours %d", n)
    return n

if __name__ == "__main__":
    # A hook that installs nothing: no handler of ours on the root logger, so the pool's own
    # per-task capture takes the records.
    hook = "opentelemetry.trace:get_tracer_provider"
    with TracedProcessPoolExecutor(max_workers=2, tracing_startup_hook=hook) as pool:
        assert list(pool.map(work, range(3))) == [0, 1, 2]
"""


def test_without_a_hooks_handler_records_are_echoed_as_python_would_print_them() -> None:
    """Every WARNING a task logs reaches the driver, in Python's last-resort form (the message),
    our own loggers' included: they are only kept out of OTel records."""
    proc = subprocess.run([sys.executable, "-c", BARE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for word in ("careful", "ours"):
        found = re.findall(rf"^\(work pid=\d+\) ({word} \d)$", proc.stderr, re.M)
        assert sorted(found) == [f"{word} {n}" for n in range(3)], proc.stderr


PARTIAL_SCRIPT = """
import sys
from ray_otel_events.executor import TracedProcessPoolExecutor

def work(n):
    if n % 2 == 0:
        sys.stdout.write(f"part {n}")  # no newline: the line ends with the task
    return n

if __name__ == "__main__":
    hook = "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing"
    with TracedProcessPoolExecutor(max_workers=1, tracing_startup_hook=hook) as pool:
        assert list(pool.map(work, range(6))) == list(range(6))
"""


def test_each_task_s_lines_carry_its_own_ids_and_silent_tasks_none(tmp_path: Path) -> None:
    """One worker runs every task, its line writers reused: a partial line is its task's, written
    when the task ends, and a task that writes nothing leaves no record."""
    env = {**os.environ, "RAY_OTEL_EVENTS_SPANS_DIR": str(tmp_path / "spans")}
    proc = subprocess.run(
        [sys.executable, "-c", PARTIAL_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert re.findall(r"^\(work pid=\d+\) (part \d)$", proc.stdout, re.M) == ["part 0", "part 2", "part 4"]
    spans = {s["context"]["span_id"]: s for s in _lines(tmp_path / "spans", ".json") if "context" in s}
    records = _lines(tmp_path / "spans", ".logs.jsonl")
    assert sorted(r["body"] for r in records) == ["part 0", "part 2", "part 4"]
    task_ids = set()
    for record in records:
        span = spans[record["span_id"]]
        assert record["attributes"]["ray.task_id"] == span["attributes"]["ray.task_id"]
        assert str(record["attributes"]["process.pid"]) == span["attributes"]["ray.pid"]
        assert record["attributes"]["code.function"] == "work"
        task_ids.add(record["attributes"]["ray.task_id"])
    assert len(task_ids) == 3


KEPT_STREAM_SCRIPT = """
import sys, threading, time
from pathlib import Path
from ray_otel_events.executor import TracedProcessPoolExecutor

def keep(folder):
    stream = sys.stdout  # the task's stream, written to by a thread after the task ended
    ended, written = Path(folder, "ended"), Path(folder, "written")

    def late():
        while not ended.exists():  # the submitter has the task's result: it has ended
            time.sleep(0.01)
        stream.write("late part")
        written.touch()

    threading.Thread(target=late).start()

def next_task():
    print("next line")

if __name__ == "__main__":
    folder = sys.argv[1]  # (the test's run of this script has a timeout: no deadline here)
    hook = "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing"
    with TracedProcessPoolExecutor(max_workers=1, tracing_startup_hook=hook) as pool:
        pool.submit(keep, folder).result()
        Path(folder, "ended").touch()
        while not Path(folder, "written").exists():  # the late part is written before the next task
            time.sleep(0.01)
        pool.submit(next_task).result()
"""


def test_text_left_in_a_kept_stream_is_not_given_to_the_next_task(tmp_path: Path) -> None:
    """A task's thread may keep `sys.stdout` and write a partial line to it after the task ended:
    that text is written out before the next task starts, never joined to the next task's first
    line or given its ids."""
    env = {**os.environ, "RAY_OTEL_EVENTS_SPANS_DIR": str(tmp_path / "spans")}
    proc = subprocess.run(
        [sys.executable, "-c", KEPT_STREAM_SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    records = {r["body"]: r for r in _lines(tmp_path / "spans", ".logs.jsonl")}
    assert set(records) == {"late part", "next line"}, records
    spans = {s["context"]["span_id"]: s for s in _lines(tmp_path / "spans", ".json") if "context" in s}
    next_span = spans[records["next line"]["span_id"]]
    assert "next_task" in next_span["name"]
    assert records["late part"]["attributes"]["code.function"] != "next_task"
