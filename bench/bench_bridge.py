"""Bridge throughput, end to end between real processes: client -> bridge -> counting sink.

Three paths, each timed from the first POST until the sink has counted every item:

* OTLP spans -> plain JSON records: ordinary (non-Ray) spans posted to /v1/traces as the SDK's
  OTLP/HTTP exporter posts them (protobuf, 512 spans per request, 2 concurrent senders).
* OTLP log records carrying RayEvents -> RayEvent JSON: our OTel form of Ray's events, as
  /v1/logs requests of 512 records, out as the JSON arrays Ray's aggregator posts.
* RayEvents -> OTLP: JSON arrays of 1000 events (what a Ray aggregator posts) to /v1/ray-events,
  3 events per task (definition, owner lifecycle, executor RUNNING), out as one span and three
  log records per task over OTLP/HTTP protobuf.

The sink is a small counting server (this script with --count-sink) so the figure is the bridge's,
not a file writer's; it parses what it receives with the same OTLP receiver code. Request bodies
are encoded before timing starts (the encoding cost belongs to the client). A 503 from the bridge
(queue full) is retried after its Retry-After, as the OTel exporters do, and counted.
Prints one Markdown section.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import requests
from aiohttp import web
from bench_aggregator import bench_ours, tree_cpu_seconds
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ray_otel_events.config import PURE_PYTHON
from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.encoding.ray_json_posts import parse_event
from ray_otel_events.events import ids
from ray_otel_events.events.builders import EventFactory, TaskStatus, python_function
from ray_otel_events.otel.from_ray_events import RayEventsToOtel
from ray_otel_events.otel.log_records import to_log_record
from ray_otel_events.otel.plain_records import key_values, python_to_any_value
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent
from ray_otel_events.receivers.otlp_http import ConsumeResult, OtlpConsumer, OtlpHttpReceiver

TARGET_SPANS_PER_S = 50_000  # keep >= 50,000
TARGET_OPEN_ATTEMPT_BYTES = 1024  # <= 1 KiB per open task attempt
TARGET_RAY_EVENTS_RATIO = 0.4  # RayEvents -> OTLP at >= 0.4 x the aggregator's events/s
CAPTURED_RUN = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "bridge" / "runE"
PROTOBUF = "application/x-protobuf"
OTLP_BATCH = 512
RAY_BATCH = 1000
SENDERS = 2


# -- the counting sink (runs as its own process) -----------------------------------------------


class _Counts(OtlpConsumer):
    def __init__(self) -> None:
        self.counts = {"spans": 0, "log_records": 0, "json_items": 0}

    async def consume_traces(self, request: ExportTraceServiceRequest) -> ConsumeResult:
        self.counts["spans"] += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        return ConsumeResult()

    async def consume_logs(self, request: ExportLogsServiceRequest) -> ConsumeResult:
        self.counts["log_records"] += sum(
            len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs
        )
        return ConsumeResult()


async def _count_sink() -> None:
    counts = _Counts()

    async def json_array(request: web.Request) -> web.Response:
        counts.counts["json_items"] += len(orjson.loads(await request.read()))
        return web.json_response({})

    async def read(_: web.Request) -> web.Response:
        return web.json_response(counts.counts)

    app = web.Application(client_max_size=512 * 1024 * 1024)
    receiver = OtlpHttpReceiver(counts, 512 * 1024 * 1024)
    app.add_routes([web.get("/count", read), *receiver.routes(), web.post("/{tail:.*}", json_array)])
    runner = web.AppRunner(app, access_log=None, auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"listening http=127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


# -- processes ---------------------------------------------------------------------------------


class Server:
    def __init__(self, argv: list[str], env_extra: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAY_OTEL_EVENTS_"))}
        env.update(env_extra or {})
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("listening http="):
            self.proc.kill()
            raise RuntimeError(f"{argv} did not start: {line!r}")
        self.url = "http://" + line.split("=", 1)[1]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# -- payloads ----------------------------------------------------------------------------------


def span_requests(n_spans: int) -> list[bytes]:
    """Distinct requests of OTLP_BATCH ordinary spans (8 attributes and one event each)."""
    bodies = []
    made = 0
    trace = 0
    while made < n_spans:
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.extend(key_values({"service.name": "bench", "host.name": "h"}))
        scope = rs.scope_spans.add()
        scope.scope.name = "bench"
        for _ in range(min(OTLP_BATCH, n_spans - made)):
            trace += 1
            span = scope.spans.add(
                trace_id=trace.to_bytes(16, "big"),
                span_id=(trace + 1).to_bytes(8, "big"),
                name="GET /items/{id}",
                kind=2,  # type: ignore[arg-type]
                start_time_unix_nano=1_795_311_449_000_000_000 + trace,
                end_time_unix_nano=1_795_311_449_000_500_000 + trace,
            )
            span.attributes.extend(
                key_values(
                    {
                        "http.request.method": "GET",
                        "http.route": "/items/{id}",
                        "http.response.status_code": 200,
                        "url.path": f"/items/{trace}",
                        "server.address": "api.internal",
                        "server.port": 8080,
                        "user_agent.original": "bench/1.0",
                        "app.cache_hit": trace % 2 == 0,
                    }
                )
            )
            span.events.add(time_unix_nano=span.start_time_unix_nano + 10, name="cache.lookup")
            made += 1
        bodies.append(request.SerializeToString())
    return bodies


def task_events(n_tasks: int, session: str) -> list[Any]:
    """3 events per task as Ray emits them: definition, owner lifecycle, executor RUNNING."""
    factory = EventFactory(session_name=session)
    job = ids.job_id(1)
    node, worker = ids.new_unique_id(), ids.new_unique_id()
    events = []
    t0 = 1_795_311_449_000_000_000
    for i in range(n_tasks):
        task = ids.new_task_id(job)
        base = t0 + i * 1_000_000
        definition = factory.task_definition(
            task_id=task,
            job_id=job,
            name="f",
            function=python_function("__main__", "f"),
            parent_task_id=ids.driver_task_id(job),
            timestamp_ns=base,
        )
        owner = factory.task_lifecycle(
            task_id=task, job_id=job, state=TaskStatus.PENDING_ARGS_AVAIL, timestamp_ns=base
        )
        for offset, state in ((10, TaskStatus.PENDING_NODE_ASSIGNMENT), (20, TaskStatus.SUBMITTED_TO_WORKER)):
            owner.task_lifecycle_event.state_transitions.add(state=state).timestamp.FromNanoseconds(
                base + offset
            )
        owner.task_lifecycle_event.state_transitions.add(state=TaskStatus.FINISHED).timestamp.FromNanoseconds(
            base + 90
        )
        owner.task_lifecycle_event.node_id = node
        owner.task_lifecycle_event.worker_id = worker
        running = factory.task_lifecycle(
            task_id=task, job_id=job, state=TaskStatus.RUNNING, worker_pid=4242, timestamp_ns=base + 30
        )
        for event in (definition, owner, running):
            event.event_id = ids.new_unique_id()
            event.node_id = node
            events.append(event)
    return events


def ray_event_arrays(n_tasks: int) -> list[bytes]:
    encoder = RayEventJsonEncoder()
    events = task_events(n_tasks, "bench-ray-events")
    return [encoder.encode(events[i : i + RAY_BATCH]) for i in range(0, len(events), RAY_BATCH)]


def log_requests(n_events: int) -> list[bytes]:
    events = task_events((n_events + 2) // 3, "bench-logs")[:n_events]
    bodies = []
    for i in range(0, len(events), OTLP_BATCH):
        request = ExportLogsServiceRequest()
        scope = request.resource_logs.add().scope_logs.add()
        for event in events[i : i + OTLP_BATCH]:
            fields = to_log_record(event)
            record = scope.log_records.add(time_unix_nano=fields.timestamp_ns, event_name=fields.event_name)
            python_to_any_value(fields.body, record.body)
            record.attributes.extend(key_values(fields.attributes))
        bodies.append(request.SerializeToString())
    return bodies


# -- timing ------------------------------------------------------------------------------------


def _send_all(url: str, bodies: list[bytes], content_type: str) -> int:
    """POST every body with SENDERS threads; returns how many 503s were retried."""
    refused = [0]
    lock = threading.Lock()
    work: Iterator[bytes] = iter(bodies)

    def sender() -> None:
        session = requests.Session()
        while True:
            with lock:
                body = next(work, None)
            if body is None:
                return
            while True:
                response = session.post(url, data=body, headers={"Content-Type": content_type}, timeout=120)
                if response.status_code == 503:
                    with lock:
                        refused[0] += 1
                    time.sleep(float(response.headers.get("Retry-After", "1")))
                    continue
                response.raise_for_status()
                break

    threads = [threading.Thread(target=sender) for _ in range(SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return refused[0]


def _wait_counts(sink: Server, want: dict[str, int], timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        counts = requests.get(sink.url + "/count", timeout=30).json()
        if all(counts[key] >= n for key, n in want.items()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"sink counted {counts}, wanted {want}")
        time.sleep(0.02)


def _timed(
    sink: Server, url: str, bodies: list[bytes], content_type: str, want: dict[str, int]
) -> tuple[float, int]:
    before = requests.get(sink.url + "/count", timeout=30).json()
    target = {key: before[key] + n for key, n in want.items()}
    start = time.perf_counter()
    refused = _send_all(url, bodies, content_type)
    _wait_counts(sink, target)
    return time.perf_counter() - start, refused


def _bridge(sink: Server, *flags: str, env_extra: dict[str, str] | None = None) -> Server:
    return Server(
        [
            sys.executable,
            "-m",
            "ray_otel_events",
            "bridge",
            "--export-addr",
            sink.url + "/events",
            "--spans-export-addr",
            sink.url + "/records",
            "--otlp-endpoint",
            sink.url,
            "--terminal-grace",
            "0.5",
            *flags,
        ],
        env_extra,
    )


def _measured(bridge: Server, *args: Any) -> dict[str, float]:
    """Seconds and the bridge's CPU seconds (every process of it) for one `_timed` run."""
    cpu0 = tree_cpu_seconds(bridge.proc.pid)
    seconds, refused = _timed(*args)
    return {"s": seconds, "cpu_s": tree_cpu_seconds(bridge.proc.pid) - cpu0, "503": refused}


def _warm(sink: Server, bridge: Server) -> None:
    """Imports and first calls are not timed."""
    _timed(sink, bridge.url + "/v1/traces", span_requests(OTLP_BATCH), PROTOBUF, {"json_items": OTLP_BATCH})


def _ray_events_run(
    sink: Server, workers: int, bodies: list[bytes], n_tasks: int, env_extra: dict[str, str] | None = None
) -> dict[str, float]:
    bridge = _bridge(sink, "--workers", str(workers), env_extra=env_extra)
    try:
        _warm(sink, bridge)
        want = {"spans": n_tasks, "log_records": 3 * n_tasks}
        return _measured(bridge, sink, bridge.url + "/v1/ray-events", bodies, "application/json", want)
    finally:
        bridge.stop()


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_attempts_rss(n: int, dedup_window: int) -> dict[str, float]:
    """RSS growth of a converter holding n open task attempts, each a real Ray 2.60 definition (from
    the captured run, fresh task id) and one owner lifecycle piece (PENDING_ARGS_AVAIL, not terminal).
    Run in a fresh interpreter (`--open-attempts`) so nothing else moves its RSS."""
    captured = [
        parse_event(item)
        for f in sorted(CAPTURED_RUN.glob("*.body"))
        for item in orjson.loads(f.read_bytes())
    ]
    defs = [e for e in captured if e.event_type == RayEvent.EventType.TASK_DEFINITION_EVENT]
    lifecycle = next(e for e in captured if e.event_type == RayEvent.EventType.TASK_LIFECYCLE_EVENT)
    converter = RayEventsToOtel(max_open_entities=10 * n, max_open_bytes=1 << 40, dedup_window=dedup_window)
    events = []
    for i in range(n):
        task_id = os.urandom(20) + b"\x01\x00\x00\x00"
        definition = RayEvent()
        definition.CopyFrom(defs[i % len(defs)])
        definition.event_id = os.urandom(28)
        definition.task_definition_event.task_id = task_id
        definition.task_definition_event.task_attempt = 0
        piece = RayEvent()
        piece.CopyFrom(lifecycle)
        piece.event_id = os.urandom(28)
        piece.task_lifecycle_event.task_id = task_id
        piece.task_lifecycle_event.task_attempt = 0
        del piece.task_lifecycle_event.state_transitions[1:]
        events += (definition, piece)
    before = _rss()
    for i in range(0, len(events), 1000):
        converter.add(events[i : i + 1000], logs=False)
    grown = _rss() - before
    assert converter.open_entities == n, converter.open_entities
    return {"bytes_per_attempt": grown / n, "charged": converter.open_bytes / n}


def _open_attempts_in_child(n: int, dedup_window: int) -> dict[str, float]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--open-attempts",
        str(n),
        "--dedup-window",
        str(dedup_window),
    ]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = orjson.loads(out)
    return result


def profile_top(what: str, bodies: list[bytes], frames: int = 8) -> list[str]:
    """The top frames (own time) of one path's conversion, in this process, as Markdown lines."""
    from ray_otel_events.exporters.otlp import OtlpItemEncoder
    from ray_otel_events.otel.from_ray_events import RayEventsToOtel
    from ray_otel_events.otel.otlp_wire import merge_envelopes
    from ray_otel_events.otel.posted_events import read_posted_events
    from ray_otel_events.otel.to_ray_events import ray_event_from_log_record, ray_event_wires

    encoder = RayEventJsonEncoder()

    def ray_events_to_otlp() -> None:
        items = OtlpItemEncoder("ray")  # as the bridge runs: items written in their envelopes
        converter = RayEventsToOtel(terminal_grace_s=0.0, envelope=items.envelope_of)
        for body in bodies:
            parts, _ = read_posted_events(body)  # as the bridge reads a POST
            emitted = converter.add_parts(parts)
            merge_envelopes([s.item for s in emitted.spans])
            merge_envelopes([r.item for r in emitted.logs])

    def logs_to_ray_json() -> None:
        for body in bodies:  # as the bridge does: the compiled pass, else the decoded request
            read = ray_event_wires(body)
            if read is None:
                request = ExportLogsServiceRequest.FromString(body)
                events = [
                    ray_event_from_log_record(record)
                    for rl in request.resource_logs
                    for sl in rl.scope_logs
                    for record in sl.log_records
                ]
                read = [event.SerializeToString() for event in events], []
            encoder.try_encode_serialized(read[0])  # what the RayEvents queue's publisher does

    profiler = cProfile.Profile()
    profiler.runcall(ray_events_to_otlp if what == "ray-events" else logs_to_ray_json)
    stats = pstats.Stats(profiler)
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:frames]  # type: ignore[attr-defined]
    lines = ["| own time | function |", "|---|---|"]
    for (filename, line, name), row in rows:
        where = filename.split("/src/")[-1].split("site-packages/")[-1]
        lines.append(f"| {row[2] / total:.0%} | `{name}` ({where}:{line}) |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sanity run (a few seconds)")
    parser.add_argument("--spans", type=int, help="spans for the OTLP -> records path")
    parser.add_argument("--events", type=int, help="RayEvent log records for the OTLP -> RayEvent path")
    parser.add_argument("--tasks", type=int, help="tasks (3 events each) for the RayEvents -> OTLP path")
    parser.add_argument("--count-sink", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--open-attempts", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dedup-window", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count_sink:
        asyncio.run(_count_sink())
        return 0
    if args.open_attempts:
        print(orjson.dumps(open_attempts_rss(args.open_attempts, args.dedup_window)).decode())
        return 0
    n_spans = args.spans or (20_000 if args.quick else 200_000)
    n_events = args.events or (5_000 if args.quick else 50_000)
    n_tasks = args.tasks or (2_000 if args.quick else 20_000)
    n_aggregator = 10_000 if args.quick else 100_000

    span_bodies = span_requests(n_spans)
    log_bodies = log_requests(n_events)
    ray_bodies = ray_event_arrays(n_tasks)

    aggregator = bench_ours(n_aggregator, 1000)  # the baseline, in this run
    agg_rate = n_aggregator / aggregator["seconds"]
    sink = Server([sys.executable, str(Path(__file__).resolve()), "--count-sink"])
    try:
        bridge = _bridge(sink)
        try:
            _warm(sink, bridge)
            traces_url, logs_url = bridge.url + "/v1/traces", bridge.url + "/v1/logs"
            spans = _measured(bridge, sink, traces_url, span_bodies, PROTOBUF, {"json_items": n_spans})
            logs = _measured(bridge, sink, logs_url, log_bodies, PROTOBUF, {"json_items": n_events})
        finally:
            bridge.stop()
        ray_runs = {workers: _ray_events_run(sink, workers, ray_bodies, n_tasks) for workers in (1, 2)}
        # the same load with the compiled helpers off: what they gain, in this run
        pure = _ray_events_run(sink, 1, ray_bodies, n_tasks, {PURE_PYTHON: "1"})
    finally:
        sink.stop()

    def rate(run: dict[str, float], items: int) -> float:
        return items / run["s"]

    def cpu_us(run: dict[str, float], items: int) -> float:
        return run["cpu_s"] / items * 1e6

    n_ray = 3 * n_tasks
    cmd = "python bench/bench_bridge.py" + (" --quick" if args.quick else "")
    # (label, unit, run, items, items/s target, CPU us target, ratio-to-aggregator target); a row
    # without an items/s target is shown for information only.
    rows: list[tuple[str, str, dict[str, float], int, int | None, float | None, float | None]] = [
        (
            "OTLP spans (protobuf) -> plain JSON records",
            "spans",
            spans,
            n_spans,
            TARGET_SPANS_PER_S,
            None,
            None,
        ),
        ("OTLP log records with RayEvents -> RayEvent JSON", "events", logs, n_events, 40_000, None, None),
        *(
            (
                f"RayEvent JSON -> OTLP spans + log records, `--workers {w}`",
                "events",
                run,
                n_ray,
                40_000,
                25.0,
                TARGET_RAY_EVENTS_RATIO,
            )
            for w, run in ray_runs.items()
        ),
        (  # the fallback where nothing is compiled: shown for information, no target of its own
            f"the same, `--workers 1`, compiled helpers off (`{PURE_PYTHON}=1`)",
            "events",
            pure,
            n_ray,
            None,
            None,
            None,
        ),
    ]
    lines = [
        "## Bridge: OTLP <-> RayEvent JSON throughput",
        "",
        f"Command: `{cmd}`. Client, bridge and a counting sink are separate processes on this machine;",
        "each figure runs from the first POST until the sink has counted every item (503 answers,",
        "if any, were retried after Retry-After and are part of the time). CPU is the bridge's whole",
        "process tree (every worker) over the run, per item. The baseline is our aggregator moving",
        f"{n_aggregator:,} events over gRPC to HTTP in this same run: **{agg_rate:,.0f} events/s**, "
        f"{aggregator['cpu_us_per_event']:.1f} us CPU/event.",
        "",
        "| path | items | items/s | bridge CPU us/item | ratio to aggregator | target | verdict | 503s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    missed: list[str] = []
    for label, unit, run, items, target, cpu_target, ratio_target in rows:
        r, c = rate(run, items), cpu_us(run, items)
        if target is None:
            goal, verdict = "-", "fallback, no target"
        else:
            ok = (
                r >= target
                and (cpu_target is None or c <= cpu_target)
                and (ratio_target is None or r / agg_rate >= ratio_target)
            )
            goal = f">= {target:,} {unit}/s" + (f", <= {cpu_target:.0f} us" if cpu_target else "")
            goal += f", >= {ratio_target} x aggregator" if ratio_target else ""
            verdict = "met" if ok else "**missed**"
            if not ok:
                missed.append(label)
        lines.append(
            f"| {label} | {items:,} {unit} | **{r:,.0f}** | {c:.1f} | {r / agg_rate:.2f} | {goal} "
            f"| {verdict} | {int(run['503'])} |"
        )
    one, two = ray_runs[1], ray_runs[2]
    lines += [
        "",
        f"`--workers 2` against `--workers 1` on this {os.cpu_count()}-core machine (the client and "
        f"sink share the cores): {rate(two, n_ray) / rate(one, n_ray):.2f}x the events/s. The target "
        f"is >= {TARGET_RAY_EVENTS_RATIO} x the aggregator's events/s on the RayEvents path: "
        f"{rate(two, n_ray) / agg_rate:.2f} with two workers. The compiled helpers "
        f"(setup.py) against the same code in Python, `--workers 1`: "
        f"{rate(one, n_ray) / rate(pure, n_ray):.2f}x the events/s, "
        f"{cpu_us(pure, n_ray) - cpu_us(one, n_ray):.1f} us less CPU per event.",
    ]
    n_open = 10_000 if args.quick else 100_000
    held = _open_attempts_in_child(n_open, 1)
    window = _open_attempts_in_child(n_open, 200_000)
    per_id = (window["bytes_per_attempt"] - held["bytes_per_attempt"]) / 2  # two event ids per attempt
    memory_ok = held["bytes_per_attempt"] <= TARGET_OPEN_ATTEMPT_BYTES
    lines += [
        "",
        f"Memory of the assemble stage: {n_open:,} open task attempts (a real Ray 2.60 definition from the",
        "captured run and one owner lifecycle piece each), RSS growth of a fresh process: "
        f"**{held['bytes_per_attempt']:,.0f} bytes per open attempt** (charged against the byte bound: "
        f"{held['charged']:,.0f}); target <= {TARGET_OPEN_ATTEMPT_BYTES:,}: "
        f"{'met' if memory_ok else '**missed**'}. The duplicate filter is bounded on its own "
        f"(`RAY_OTEL_EVENTS_BRIDGE_DEDUP_WINDOW`, 200,000 event ids): {per_id:,.0f} bytes per remembered id.",
    ]
    if not memory_ok:
        missed.append("bytes per open task attempt")
    if missed:
        lines += ["", "Missed: " + "; ".join(missed) + ". Where the time goes, in-process (cProfile):"]
        lines += ["", "RayEvent JSON -> OTLP:", "", *profile_top("ray-events", ray_bodies[:5])]
        lines += ["", "OTLP logs -> RayEvent JSON:", "", *profile_top("logs", log_bodies[:20])]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
