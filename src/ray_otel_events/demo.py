"""`ray-otel-events demo`: the whole pipeline on embedded defaults, with real processes.

`serve` (the store, Ray's state API and the page) and an aggregator exporting to it start as
subprocesses. Tasks run in a TracedProcessPoolExecutor with the demo's tracing hook: spans go to a
spans folder and, with the tasks' printed lines, to `serve` over OTLP; the hook's span processor
turns each task's spans into task events, sent by a recorder in every process. Two actor-like
worker processes serve method calls and record actor events by hand, and the driver records job
and node events, the way a Ray node's core workers and GCS do. At the end every process flushes,
the aggregator is stopped with SIGTERM (it flushes too) and the summary shows, per event type,
what was recorded, sent, stored and dropped, checks that it adds up, and prints one trace tree.
Then it prints the page's address and keeps `serve` running until Ctrl-C (`--no-serve` stops it
and exits).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from opentelemetry import trace
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client.parser import text_string_to_metric_families

from ray_otel_events import config
from ray_otel_events.config import RecorderConfig
from ray_otel_events.events import ids
from ray_otel_events.events.builders import (
    ActorState,
    EventFactory,
    JobState,
    NodeState,
    TaskStatus,
    WorkerState,
    python_function,
)
from ray_otel_events.executor import TracedProcessPoolExecutor
from ray_otel_events.producer import RayEventRecorder
from ray_otel_events.protobuf import common_pb2
from ray_otel_events.tracing.files import LogRecordFileProcessor, SpanFileProcessor
from ray_otel_events.tracing.install import current_installation, install_tracing, run_setup_hook
from ray_otel_events.tracing.otlp import otlp_log_exporter, otlp_span_exporter
from ray_otel_events.tracing.span_files import largest_trace_tree

_RECORDER_CONFIG = RecorderConfig(report_interval_ms=200, shutdown_flush_timeout_ms=5000)


@dataclass(frozen=True)
class Cluster:
    """What every demo process needs to record events for the same 'cluster'."""

    aggregator: str
    session: str
    job: bytes
    node: bytes
    stats_dir: str

    def recorder(self) -> RayEventRecorder:
        rec = RayEventRecorder.to_aggregator(self.aggregator, config=_RECORDER_CONFIG, node_id=self.node)
        rec.start()
        return rec

    def save_stats(self, role: str, rec: RayEventRecorder) -> None:
        path = Path(self.stats_dir) / f"{role}-{os.getpid()}.json"
        path.write_text(json.dumps(rec.stats()))


# -- pool workers ------------------------------------------------------------------------------

_worker: tuple[Cluster, RayEventRecorder, EventFactory, bytes] | None = None


def _hook_recorder() -> RayEventRecorder:
    """The recorder the tracing hook runs in this process (it sends the task events)."""
    installation = current_installation()
    if installation is None or installation.recorder is None:
        raise RuntimeError("the tracing hook did not install a recorder: is the aggregator address set?")
    return installation.recorder


def _init_pool_worker(cluster: Cluster) -> None:
    """Runs after the hook in each pool worker: the worker's own events go through its recorder."""
    global _worker
    rec = _hook_recorder()
    factory = EventFactory(cluster.session)
    worker_id = ids.new_unique_id()
    rec.add(factory.worker_definition(worker_id=worker_id, node_id=cluster.node, pid=os.getpid()))
    rec.add(factory.worker_lifecycle(worker_id=worker_id, state=WorkerState.ALIVE, job_id=cluster.job))
    _worker = (cluster, rec, factory, worker_id)
    # Pool workers end with os._exit: atexit never runs, multiprocessing finalizers do.
    multiprocessing.util.Finalize(None, _finish_pool_worker, exitpriority=100)


def _finish_pool_worker() -> None:
    assert _worker is not None
    cluster, rec, factory, worker_id = _worker
    rec.add(
        factory.worker_lifecycle(
            worker_id=worker_id,
            state=WorkerState.DEAD,
            job_id=cluster.job,
            exit_type=common_pb2.INTENDED_SYSTEM_EXIT,
            exit_detail="pool shut down",
        )
    )
    _flush_tracing_and_save(cluster, "worker")


def _flush_tracing_and_save(cluster: Cluster, role: str) -> None:
    installation = current_installation()
    assert installation is not None and installation.recorder is not None
    installation.flush()  # spans -> task events into the recorder, spans to their files
    installation.recorder.stop()
    cluster.save_stats(role, installation.recorder)


def simulate(n: int) -> int:
    """The demo task: some CPU work; every seventh input fails on purpose."""
    print(f"simulating input {n}")
    if n % 7 == 3:
        logging.getLogger("demo").warning("input %d is unlucky", n)
        raise ValueError(f"demo failure for input {n}")
    return sum(i * i for i in range(n * 2000))


DEMO_HOOK = "ray_otel_events.demo:setup_demo_tracing"


def setup_demo_tracing() -> None:
    """The demo's tracing hook: the local hook's files, plus spans and task logs sent to `serve`
    over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT), so the page can show them."""
    run_setup_hook(DEMO_HOOK, _install_demo_tracing)


def _install_demo_tracing() -> None:
    tracing = config.TracingConfig.from_env()
    install_tracing(
        [SpanFileProcessor(tracing.spans_dir), BatchSpanProcessor(otlp_span_exporter("http/protobuf"))],
        [
            LogRecordFileProcessor(tracing.spans_dir),
            BatchLogRecordProcessor(otlp_log_exporter("http/protobuf")),
        ],
        config=tracing,
        event_logs=False,
    )


# -- actor-like workers ------------------------------------------------------------------------


def _actor_main(conn: multiprocessing.connection.Connection, cluster: Cluster, actor_id: bytes) -> None:
    """Serve calls on a counter until told to stop; this process records its own events."""
    rec = cluster.recorder()
    factory = EventFactory(cluster.session)
    worker_id = ids.new_unique_id()
    rec.add(
        factory.actor_lifecycle(
            actor_id=actor_id,
            state=ActorState.ALIVE,
            node_id=cluster.node,
            worker_id=worker_id,
            pid=os.getpid(),
        )
    )
    total = 0
    while True:
        message = conn.recv()
        if message is None:
            break
        task_id, amount = message
        rec.add(
            factory.task_lifecycle(
                task_id=task_id,
                job_id=cluster.job,
                state=TaskStatus.RUNNING,
                worker_id=worker_id,
                worker_pid=os.getpid(),
            )
        )
        total += amount
        conn.send(total)
    rec.stop()
    cluster.save_stats("actor", rec)


class DemoActor:
    """The driver's handle on one actor process: records what an owner records."""

    def __init__(self, cluster: Cluster, rec: RayEventRecorder, factory: EventFactory, name: str) -> None:
        self.cluster, self.rec, self.factory = cluster, rec, factory
        self.actor_id = ids.new_actor_id(cluster.job)
        rec.add(
            factory.actor_definition(
                actor_id=self.actor_id, job_id=cluster.job, class_name="Counter", name=name
            )
        )
        for state in (ActorState.DEPENDENCIES_UNREADY, ActorState.PENDING_CREATION):
            rec.add(factory.actor_lifecycle(actor_id=self.actor_id, state=state))
        self.conn, child = multiprocessing.Pipe()
        self.process = multiprocessing.Process(target=_actor_main, args=(child, cluster, self.actor_id))
        self.process.start()

    def add(self, amount: int) -> int:
        task_id = ids.new_task_id(self.cluster.job, self.actor_id)
        f, job = self.factory, self.cluster.job
        self.rec.add(
            f.actor_task_definition(
                task_id=task_id,
                job_id=job,
                actor_id=self.actor_id,
                name="Counter.add",
                function=python_function(__name__, "add", class_name="Counter"),
                parent_task_id=ids.driver_task_id(job),
            )
        )
        self.rec.add(f.task_lifecycle(task_id=task_id, job_id=job, state=TaskStatus.SUBMITTED_TO_WORKER))
        self.conn.send((task_id, amount))
        result: int = self.conn.recv()
        self.rec.add(f.task_lifecycle(task_id=task_id, job_id=job, state=TaskStatus.FINISHED))
        return result

    def stop(self) -> None:
        self.conn.send(None)
        self.process.join()
        self.rec.add(self.factory.actor_lifecycle(actor_id=self.actor_id, state=ActorState.DEAD))


# -- the driver --------------------------------------------------------------------------------


def _run_workload(cluster: Cluster, tasks: int) -> tuple[int, int]:
    rec = cluster.recorder()
    f = EventFactory(cluster.session)
    rec.add(
        f.node_definition(node_id=cluster.node, node_ip_address="127.0.0.1", hostname=os.uname().nodename)
    )
    rec.add(
        f.node_lifecycle(
            node_id=cluster.node, state=NodeState.ALIVE, resources={"CPU": float(os.cpu_count() or 1)}
        )
    )
    rec.add(f.job_definition(job_id=cluster.job, driver_pid=os.getpid(), entrypoint="ray-otel-events demo"))
    rec.add(f.job_lifecycle(job_id=cluster.job, state=JobState.CREATED))
    ok = failed = 0
    pool = TracedProcessPoolExecutor(
        tracing_startup_hook=DEMO_HOOK, max_workers=2, initializer=_init_pool_worker, initargs=(cluster,)
    )
    with pool, trace.get_tracer(__name__).start_as_current_span("demo driver"):
        futures: list[Future[int]] = [pool.submit(simulate, n) for n in range(tasks)]
        counters = [DemoActor(cluster, rec, f, name=f"counter-{i}") for i in range(2)]
        for i in range(10):
            counters[i % 2].add(i)
        for future in futures:
            if future.exception() is None:
                ok += 1
            else:
                failed += 1
        for actor in counters:
            actor.stop()
    _flush_tracing_and_save(cluster, "driver-tasks")
    rec.add(f.job_lifecycle(job_id=cluster.job, state=JobState.FINISHED))
    rec.stop()
    cluster.save_stats("driver", rec)
    return ok, failed


# -- servers -----------------------------------------------------------------------------------


class _Server:
    """A CLI server subprocess: started, its ready line read, stopped with SIGTERM."""

    def __init__(self, *args: str) -> None:
        # JSON form: the demo parses the `stats {json}` exit line; warnings only on the terminal.
        cmd = [
            sys.executable,
            "-m",
            "ray_otel_events",
            *args,
            "--log-format",
            "json",
            "--log-level",
            "WARNING",
        ]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.startswith("listening "):
            self.process.kill()
            raise RuntimeError(f"{args[0]} did not start (said {line!r})")
        self.address = line.split("=", 1)[1]

    def stop(self) -> str:
        """SIGTERM (unless a Ctrl-C already reached it), wait, return the rest of its stdout."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=60)
        if self.process.returncode not in (0, -signal.SIGINT):
            raise RuntimeError(f"server exited with {self.process.returncode}")
        return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=int, default=40, help="tasks to run in the pool (default 40)")
    parser.add_argument("--workdir", help="where to write the output (default: a new temporary folder)")
    parser.add_argument("--port", type=int, default=0, help="the page's port; 0 picks a free one (default 0)")
    parser.add_argument(
        "--serve",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep serving the page until Ctrl-C (default); --no-serve exits after the run",
    )


def run(args: argparse.Namespace) -> int:
    if args.tasks < 1:
        print("ray-otel-events demo: --tasks must be at least 1", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"ray-otel-events demo: --port must be 0..65535, got {args.port}", file=sys.stderr)
        return 2
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="ray-otel-events-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    store_file = workdir / "events.sqlite3"
    stats_dir = workdir / "recorder-stats"
    spans_dir = workdir / "spans"
    for folder in (stats_dir, spans_dir):
        folder.mkdir(exist_ok=True)
        for old in folder.glob("*.json*"):
            old.unlink()
    for old in workdir.glob("events.sqlite3*"):
        old.unlink()

    serve = _Server("serve", "--port", str(args.port), "--store", str(store_file))
    try:
        aggregator = _Server(
            "aggregator", "--grpc-port", "0", "--export-addr", f"http://{serve.address}/v1/ray-events"
        )
        try:
            session = time.strftime("session_demo_%Y-%m-%d_%H-%M-%S")
            # The tracing hook in this process and in every pool worker reads these. The job id is the
            # one the traced pool gives tasks submitted from this process (its pid), so all events join.
            os.environ[config.SPANS_DIR] = str(spans_dir)
            os.environ[config.AGGREGATOR_ADDRESS] = aggregator.address
            os.environ[config.SESSION_NAME] = session
            os.environ[config.OTEL_ENDPOINT] = f"http://{serve.address}"
            os.environ.setdefault(config.OTEL_SERVICE_NAME, "ray-otel-events-demo")
            cluster = Cluster(
                aggregator.address,
                session,
                ids.job_id(os.getpid() & 0xFFFFFFFF),
                ids.node_id_for_host(os.uname().nodename),
                str(stats_dir),
            )
            print(
                f"serve http={serve.address}, aggregator grpc={aggregator.address}; "
                f"running {args.tasks} tasks and 2 actors"
            )
            ok, failed = _run_workload(cluster, args.tasks)
        finally:
            agg_out = aggregator.stop()
        stored = _stored_by_type(serve.address)
        agg_stats = _last_stats_line(agg_out)
        recorders = [json.loads(p.read_text()) for p in sorted(stats_dir.glob("*.json"))]
        print(f"tasks: {ok} finished, {failed} failed on purpose; {len(recorders)} recorders sent events")
        code = _print_summary(recorders, agg_stats, stored, store_file)
        _print_trace(spans_dir)
        if args.serve and code == 0:
            _serve_until_stopped(serve.address, store_file)
    finally:
        serve.stop()
    return code


def _stored_by_type(address: str) -> Counter[str]:
    """What `serve` stored, per event type, read from its Prometheus metrics once the state API
    answers (a read waits for every event answered before it to be folded)."""
    requests.get(f"http://{address}/api/version", timeout=30).raise_for_status()
    text = requests.get(f"http://{address}/metrics", timeout=30).text
    stored: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ray_otel_events_serve_events_stored_total":
                stored[sample.labels["event_type"]] = int(sample.value)
    return stored


def _serve_until_stopped(address: str, store_file: Path) -> None:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print()
    print(f"the page: http://{address}/   (tasks, timeline, traces, logs; Ctrl-C to stop)")
    print(f"Ray's own tools work too: ray list tasks --address http://{address}")
    print(f"and ours, with or without the server: ray-otel-events list tasks --store {store_file}")
    sys.stdout.flush()
    while not stop.wait(0.5):
        pass


def _print_trace(spans_dir: Path, max_lines: int = 14) -> None:
    tree = largest_trace_tree(spans_dir).splitlines()
    print()
    print(f"one trace from {spans_dir} (`ray-otel-events spans {spans_dir}` shows them all):")
    for line in tree[:max_lines]:
        print("  " + line)
    if len(tree) > max_lines:
        print(f"  ... {len(tree) - max_lines} more lines")


def _last_stats_line(output: str) -> dict[str, Any]:
    for line in reversed(output.splitlines()):
        if line.startswith("stats "):
            stats: dict[str, Any] = json.loads(line[len("stats ") :])
            return stats
    raise RuntimeError("the aggregator printed no stats line")


def _print_summary(
    recorders: list[dict[str, Any]], agg: dict[str, Any], delivered: Counter[str], store_file: Path
) -> int:
    def total(key: str) -> Counter[str]:
        out: Counter[str] = Counter()
        for r in recorders:
            out.update(r[key])
        return out

    recorded, sent, rec_dropped = total("recorded_by_type"), total("sent_by_type"), total("dropped_by_type")
    publisher = next(iter(agg["publishers"].values()))
    outcomes = ("evicted", "encode_failed", "dropped_after_retries", "dropped_at_shutdown")
    agg_dropped: Counter[str] = Counter()
    for name in outcomes:
        agg_dropped.update(publisher[name])
    filtered: Counter[str] = Counter(publisher["filtered"])
    types = sorted(set(recorded) | set(delivered))
    print()
    print(f"{'event type':32} {'recorded':>9} {'sent':>6} {'stored':>10} {'dropped':>8} {'filtered':>9}")
    balanced = True
    for t in types:
        dropped = rec_dropped[t] + agg_dropped[t]
        print(f"{t:32} {recorded[t]:>9} {sent[t]:>6} {delivered[t]:>10} {dropped:>8} {filtered[t]:>9}")
        balanced &= sent[t] == delivered[t] + agg_dropped[t] + filtered[t]
    print(
        f"{'total':32} {sum(recorded.values()):>9} {sum(sent.values()):>6} {sum(delivered.values()):>10} "
        f"{sum(rec_dropped.values()) + sum(agg_dropped.values()):>8} {sum(filtered.values()):>9}"
    )
    print("(recorded: state updates added to recorders; sent: merged RayEvents the aggregator accepted;")
    print(" stored: events serve folded into its store)")
    print()
    if not balanced or agg["received_total"] != sum(sent.values()):
        print("MISMATCH: sent events are not all stored or counted as dropped", file=sys.stderr)
        return 1
    print(f"every event sent was stored or counted; the store: {store_file}")
    return 0
