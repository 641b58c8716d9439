"""Per-task cost of tracing: a process pool with and without our hook, and real Ray with our hook,
with Ray's bundled hook, and with none.

Submit path = what the submitting thread pays per task: the wall time of the submit loop divided by
the number of tasks, and the CPU time of that thread alone (`time.thread_time`), which excludes
the workers and our background threads. End to end = first submit to last result, tasks/s.
"Ray's bundled hook" is `ray.util.tracing.setup_local_tmp_tracing` as shipped (SimpleSpanProcessor +
ConsoleSpanExporter writing `to_json` per span), copied here only to write into a temp folder
instead of /tmp/spans. Each mode runs in a fresh process (fresh providers, fresh Ray cluster with
its own temp dir, token auth off); rounds alternate the modes; medians are shown. Prints one
Markdown section.

    python bench/bench_tracing.py [--quick] [--tasks N] [--ray-tasks N] [--rounds R] [--no-ray]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench_aggregator import CountSink, cpu_seconds, read_ready_line, tree_cpu_seconds

HERE = Path(__file__).resolve().parent
LOCAL_HOOK = "ray_otel_events.tracing.setup_local_tmp_tracing:setup_tracing"
OTLP_HOOK = "ray_otel_events.tracing.setup_otlp_tracing:setup_tracing"
RAY_STYLE_HOOK = "bench_tracing:ray_bundled_hook"
TARGET_US = 30.0


def ray_bundled_hook() -> None:
    """Ray 2.60's `setup_local_tmp_tracing.setup_tracing`, writing to $BENCH_SPANS_DIR, not /tmp/spans."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    spans_dir = os.environ["BENCH_SPANS_DIR"]
    os.makedirs(spans_dir, exist_ok=True)
    trace.set_tracer_provider(TracerProvider())
    trace.get_tracer_provider().add_span_processor(  # type: ignore[attr-defined]
        SimpleSpanProcessor(
            ConsoleSpanExporter(
                out=open(f"{spans_dir}/{os.getpid()}.txt", "w"),  # noqa: SIM115 (as Ray does)
                formatter=lambda span: span.to_json(indent=None) + os.linesep,
            )
        )
    )


def tracing_on_hook() -> None:
    """Turns Ray's tracing wrappers on and installs nothing: spans are the API's no-op spans."""


def sdk_only_hook() -> None:
    """An SDK TracerProvider without processors: recorded spans that go nowhere."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())


def sdk_docs_hook() -> None:
    """The setup of the OpenTelemetry docs: a TracerProvider with a BatchSpanProcessor and the
    SDK's OTLPSpanExporter, over the protocol OTEL_EXPORTER_OTLP_PROTOCOL names."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter: Any
    if os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        exporter = Grpc()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

        exporter = Http()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def noop() -> None:
    return None


# -- one measurement, in a fresh process ------------------------------------------------------


BATCHES = 5


def _flush_tracing() -> None:
    """Whatever our installation still holds (deferred spans, queued lines and records), or the
    SDK provider a hook set, so that its cost is inside the measurement."""
    from opentelemetry import trace

    from ray_otel_events.tracing.install import current_installation

    installation = current_installation()
    if installation is not None:
        installation.flush()
        return
    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if flush is not None:
        flush()


def _spool_folder() -> str | None:
    """The spool folder of the OTLP hook in this process, if it is installed."""
    from ray_otel_events.tracing.install import current_installation

    installation = current_installation()
    if installation is None:
        return None
    for processor in installation.tracer_provider._active_span_processor._span_processors:
        folder = getattr(processor, "folder", None)
        if isinstance(folder, str):
            return folder
    return None


def _tree_cpu() -> float:
    """This process tree's CPU seconds; read again when a thread or process ends while it is read."""
    for _ in range(10):
        try:
            return tree_cpu_seconds(os.getpid())
        except FileNotFoundError:
            continue
    return tree_cpu_seconds(os.getpid())


def _forwarder_cpu(folder: str | None) -> float:
    from ray_otel_events.tracing.spool import forwarder_pid

    pid = forwarder_pid(folder) if folder else None
    try:
        return cpu_seconds(pid) if pid else 0.0
    except OSError:
        return 0.0


def _wait_delivered(folder: str | None, timeout_s: float = 300.0) -> None:
    """Until the endpoint has acknowledged every span line in the spool (the forwarder's work)."""
    from ray_otel_events.tracing.spool import unsent_bytes

    deadline = time.monotonic() + timeout_s
    while folder and unsent_bytes(folder) and time.monotonic() < deadline:
        time.sleep(0.01)


def _timed_batches(submit: Any, wait: Any, n: int) -> dict[str, float]:
    """n tasks in BATCHES batches (submit all, then wait for all): the median batch's submit cost per
    task, wall and CPU of this thread, the overall tasks/s, and the total CPU per task of this
    process tree (every thread, the pool's workers or Ray's processes) until everything is flushed.
    Medians shrug off a stall of the shared machine in one batch."""
    per = max(1, n // BATCHES)
    walls, cpus, total = [], [], 0.0
    folder = _spool_folder()
    _flush_tracing()
    _wait_delivered(folder)  # the warm-up's lines are not this measurement's
    tree0 = _tree_cpu() + _forwarder_cpu(folder)
    for _ in range(BATCHES):
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        handles = [submit() for _ in range(per)]
        wall1, cpu1 = time.perf_counter(), time.thread_time()
        wait(handles)
        total += time.perf_counter() - wall0
        walls.append((wall1 - wall0) / per * 1e6)
        cpus.append((cpu1 - cpu0) / per * 1e6)
    flush0 = time.perf_counter()
    _flush_tracing()
    _wait_delivered(folder)
    delivered = total + time.perf_counter() - flush0
    tree1 = _tree_cpu() + _forwarder_cpu(folder)
    return {
        "submit_wall_us": statistics.median(walls),
        "submit_cpu_us": statistics.median(cpus),
        "tasks_per_s": per * BATCHES / total,
        "delivered_per_s": per * BATCHES / delivered,
        "total_cpu_us": (tree1 - tree0) / (per * BATCHES) * 1e6,
    }


def child_pool(mode: str, n: int) -> dict[str, float]:
    from ray_otel_events.executor import TracedProcessPoolExecutor

    pool: Executor
    if mode == "plain":
        pool = ProcessPoolExecutor(2)
    else:
        hook = {
            "traced-nohook": None,
            "traced-ours": LOCAL_HOOK,
            "traced-otlp": OTLP_HOOK,
            "traced-otlp-grpc": OTLP_HOOK,
            "traced-ray-style": RAY_STYLE_HOOK,
        }[mode]
        pool = TracedProcessPoolExecutor(2, tracing_startup_hook=hook)
    with pool:
        for f in [pool.submit(noop) for _ in range(200)]:  # warm-up: workers started, caches hot
            f.result()
        return _timed_batches(lambda: pool.submit(noop), lambda fs: [f.result() for f in fs], n)


def child_ray(mode: str, n: int) -> dict[str, float]:
    import ray

    hook = {
        "none": None,
        "tracing-on": "bench_tracing:tracing_on_hook",
        "sdk-only": "bench_tracing:sdk_only_hook",
        "ray-bundled": RAY_STYLE_HOOK,
        "ours": LOCAL_HOOK,
        "ours-no-output": LOCAL_HOOK,
        "ours-otlp": OTLP_HOOK,
        "ours-ray-helpers": LOCAL_HOOK,
        "ours-otlp-ray-helpers": OTLP_HOOK,
        "ours-otlp-grpc": OTLP_HOOK,
        "sdk-docs": "bench_tracing:sdk_docs_hook",
        "sdk-docs-grpc": "bench_tracing:sdk_docs_hook",
    }[mode]
    if mode == "ours-no-output":  # the workers' prints not made log records: what capturing costs
        os.environ["RAY_OTEL_EVENTS_TASK_OUTPUT"] = "0"
    if mode.endswith("-ray-helpers"):  # Ray's tracing helpers as shipped: what our stand-ins save
        os.environ["RAY_OTEL_EVENTS_RAY_WRAPPERS"] = "0"
    temp_dir = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    kwargs: dict[str, Any] = {"_tracing_startup_hook": hook} if hook else {}
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", _temp_dir=temp_dir, **kwargs)
    try:
        f = ray.remote(noop)
        ray.get([f.remote() for _ in range(500)])  # warm-up, as in ray_live.md's measurements
        return _timed_batches(f.remote, ray.get, n)
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


# -- orchestration ----------------------------------------------------------------------------


OTLP_SINK: str | None = None  # host:port of the counting sink the OTLP hook exports to
OTLP_GRPC_SINK: str | None = None  # host:port of the gRPC sink, for the modes ending in -grpc


def run_child(kind: str, mode: str, n: int, spans_dir: str) -> dict[str, float]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("RAY_OTEL_EVENTS_", "OTEL_", "RAY_ADDRESS"))
    }
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")])),
            "RAY_OTEL_EVENTS_SPANS_DIR": spans_dir,
            "BENCH_SPANS_DIR": spans_dir,
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled",  # a bare ray.init() would otherwise write ~/.ray/auth_token
        }
    )
    if OTLP_SINK is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://{OTLP_SINK}"
    if mode.endswith("-grpc") and OTLP_GRPC_SINK is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://{OTLP_GRPC_SINK}"
        env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
    env["RAY_OTEL_EVENTS_SPOOL_DIR"] = os.path.join(spans_dir, "spool")  # this run's forwarder only
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, mode, str(n)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if out.returncode != 0:
        raise SystemExit(f"{kind} {mode} failed: {out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure(kind: str, modes: list[str], n: int, rounds: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(rounds):
        for mode in modes:
            spans_dir = tempfile.mkdtemp(prefix="bench-spans-")
            try:
                samples[mode].append(run_child(kind, mode, n, spans_dir))
            finally:
                shutil.rmtree(spans_dir, ignore_errors=True)
    return {m: {k: statistics.median(s[k] for s in runs) for k in runs[0]} for m, runs in samples.items()}


def table(results: dict[str, dict[str, float]], baseline: str, labels: dict[str, str]) -> list[str]:
    base = results[baseline]
    lines = [
        "| mode | submit wall µs/task | added | submit CPU µs/task | added | total CPU µs/task | added"
        " | end to end tasks/s | ratio | until delivered, tasks/s | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in results.items():
        same = mode == baseline

        def added(key: str) -> str:
            return "-" if same else f"{r[key] - base[key]:+.1f}"  # noqa: B023 (used at once)

        lines.append(
            f"| {labels[mode]} | {r['submit_wall_us']:.1f} | {added('submit_wall_us')} | "
            f"{r['submit_cpu_us']:.1f} | {added('submit_cpu_us')} | {r['total_cpu_us']:.1f} | "
            f"{added('total_cpu_us')} | {r['tasks_per_s']:.0f} |"
            f" {r['tasks_per_s'] / base['tasks_per_s']:.2f} | {r['delivered_per_s']:.0f} |"
            f" {r['delivered_per_s'] / base['delivered_per_s']:.2f} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small runs, for a sanity check only")
    parser.add_argument("--tasks", type=int, help="pool tasks per run (default 5000, quick 1000)")
    parser.add_argument("--ray-tasks", type=int, help="Ray tasks per run (default 5000, quick 1000)")
    parser.add_argument("--rounds", type=int, help="rounds per mode (default 3, quick 1)")
    parser.add_argument("--no-ray", action="store_true", help="skip the real Ray part")
    parser.add_argument(
        "--modes", help="comma-separated modes to run (with their baselines), for a partial look; default all"
    )
    parser.add_argument("--child", nargs=3, metavar=("KIND", "MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, mode, n = args.child
        print(json.dumps((child_pool if kind == "pool" else child_ray)(mode, int(n))))
        return 0
    n = args.tasks or (1000 if args.quick else 5000)
    ray_n = args.ray_tasks or (1000 if args.quick else 5000)
    rounds = args.rounds or (1 if args.quick else 3)
    command = " ".join(["python", "bench/bench_tracing.py", *sys.argv[1:]])
    global OTLP_SINK, OTLP_GRPC_SINK
    with tempfile.TemporaryDirectory(prefix="bench-otlp-sink-") as sink_dir:
        sink = CountSink(Path(sink_dir))
        grpc_sink = subprocess.Popen(
            [sys.executable, str(HERE / "otlp_grpc_sink.py")], stdout=subprocess.PIPE, text=True
        )
        OTLP_SINK = sink.address
        try:
            OTLP_GRPC_SINK = read_ready_line(grpc_sink)
            out = report(command, n, ray_n, rounds, with_ray=not args.no_ray, only=args.modes)
        finally:
            sink.stop()
            grpc_sink.terminate()
            grpc_sink.wait(30)
    print("\n".join(out))
    return 0


POOL_TARGET = 0.7
RAY_TARGET = 0.93
SDK_TARGET = 1.3


def verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f} (target ≥ {target}: **{'met' if ratio >= target else 'NOT met'}**)"


def _selected(labels: dict[str, str], only: str | None, always: tuple[str, ...]) -> dict[str, str]:
    if not only:
        return labels
    wanted = set(only.split(",")) | set(always)
    return {mode: label for mode, label in labels.items() if mode in wanted}


def report(
    command: str, n: int, ray_n: int, rounds: int, *, with_ray: bool, only: str | None = None
) -> list[str]:
    pool_labels = _selected(
        {
            "plain": "ProcessPoolExecutor",
            "traced-nohook": "TracedProcessPoolExecutor, no hook",
            "traced-ours": "TracedProcessPoolExecutor + our local hook",
            "traced-otlp": "TracedProcessPoolExecutor + our OTLP hook, http/protobuf (spans, event records)",
            "traced-otlp-grpc": "TracedProcessPoolExecutor + our OTLP hook, grpc (spans and event records)",
            "traced-ray-style": "TracedProcessPoolExecutor + Ray's bundled hook (copy)",
        },
        only,
        ("traced-nohook",),
    )
    pool = measure("pool", list(pool_labels), n, rounds)
    base = pool["traced-nohook"]

    def pool_ratio(mode: str, key: str = "tasks_per_s") -> float:
        return pool[mode][key] / base[key]

    def pool_added(mode: str) -> float:
        return pool[mode]["total_cpu_us"] - base["total_cpu_us"]

    out = [
        "## Tracing: per-task cost (process pool and real Ray)",
        "",
        f"Command: `{command}` ({n} pool tasks and {ray_n} Ray tasks per run in {BATCHES} batches,"
        f" {rounds} round(s); medians over batches, then rounds;",
        "2 pool workers, `num_cpus=2` for Ray; no-op tasks; warm-up before timing).",
        "Total CPU is every thread of every process in the run's tree (the submitting process, the",
        "pool's workers or Ray's GCS, raylet and workers) plus the OTLP hook's forwarder (a detached",
        "process) from the first submission until everything is flushed (for the OTLP hook: until the",
        "endpoint has acknowledged every spooled span), per task; ratio is end-to-end tasks/s (first",
        "submission to last result) over the baseline row's, measured in the same run; \"until",
        "delivered\" stops the clock when the OTLP hook's endpoint has everything instead.",
        "",
        "Process pool (baseline: the traced pool without a hook, i.e. the pool's own work plus",
        "no-op spans):",
        "",
        *table(pool, "traced-nohook", pool_labels),
        "",
    ]
    notes = []
    if "traced-ours" in pool:
        ours_added = pool["traced-ours"]["submit_wall_us"] - base["submit_wall_us"]
        ours_cpu = pool["traced-ours"]["submit_cpu_us"] - base["submit_cpu_us"]
        notes.append(
            f"End to end, our local hook runs at {verdict(pool_ratio('traced-ours'), POOL_TARGET)}"
            f" of the untraced pool, costing {pool_added('traced-ours'):+.1f} µs of CPU per task in all."
            f" On the submit path it adds {ours_added:.1f} µs (wall) / {ours_cpu:.1f} µs (CPU of the"
            f" submitting thread) per task; target ≤ {TARGET_US:.0f} µs:"
            f" **{'met' if ours_added <= TARGET_US else 'NOT met'}**."
        )
    for mode, protocol in (("traced-otlp", "http/protobuf"), ("traced-otlp-grpc", "grpc")):
        if mode in pool:
            notes.append(
                f"The OTLP hook over {protocol}: {verdict(pool_ratio(mode), POOL_TARGET)} end to end,"
                f" {pool_ratio(mode, 'delivered_per_s'):.2f} until delivered, {pool_added(mode):+.1f} µs"
                " of CPU per task in all (its forwarder included)."
            )
    out += [" ".join(notes)]
    if with_ray:
        ray_labels = _selected(
            {
                "none": "Ray, no hook",
                "tracing-on": "Ray, a hook that installs nothing (Ray's wrappers, no-op spans)",
                "sdk-only": "Ray, a hook with an SDK provider and no processor",
                "sdk-docs": (
                    "Ray + the OTel docs' setup (BatchSpanProcessor + OTLPSpanExporter), http/protobuf"
                ),
                "sdk-docs-grpc": "Ray + the OTel docs' setup, grpc",
                "ray-bundled": "Ray + Ray's bundled hook (copy)",
                "ours": "Ray + our local hook",
                "ours-no-output": "Ray + our local hook, workers' prints not captured",
                "ours-otlp": "Ray + our OTLP hook, http/protobuf (spans and event records)",
                "ours-ray-helpers": "Ray + our local hook, Ray's tracing helpers as shipped",
                "ours-otlp-ray-helpers": "Ray + our OTLP hook, http/protobuf, Ray's helpers as shipped",
                "ours-otlp-grpc": "Ray + our OTLP hook, grpc (spans and event records)",
            },
            only,
            ("none", "tracing-on"),
        )
        ray_results = measure("ray", list(ray_labels), ray_n, rounds)

        def over(mode: str, base: str, key: str = "submit_wall_us") -> float:
            return ray_results[mode][key] - ray_results[base][key]

        def added(mode: str) -> float:
            return over(mode, "tracing-on", "total_cpu_us")

        def ratio(mode: str, to: str = "tracing-on", key: str = "tasks_per_s") -> float:
            return ray_results[mode][key] / ray_results[to][key]

        notes = [
            f"Once any hook is set, Ray's own tracing wrappers cost {over('tracing-on', 'none'):.1f} µs"
            " per submission."
        ]
        if "sdk-only" in ray_results:
            notes.append(
                f"Recording the span with the SDK costs {over('sdk-only', 'tracing-on'):.1f} µs more."
            )
        if "ours" in ray_results:
            notes.append(
                "Against a hook that installs nothing, our local hook runs at"
                f" {verdict(ratio('ours'), RAY_TARGET)}"
                f" ({added('ours'):+.1f} µs of CPU per task in all)."
            )
        for mode, docs, protocol in (
            ("ours-otlp", "sdk-docs", "http/protobuf"),
            ("ours-otlp-grpc", "sdk-docs-grpc", "grpc"),
        ):
            if mode not in ray_results:
                continue
            text = (
                f"Our OTLP hook over {protocol}: {verdict(ratio(mode), RAY_TARGET)} of the do-nothing hook"
                f" end to end ({ratio(mode, key='delivered_per_s'):.2f} until delivered;"
                f" {added(mode):+.1f} µs of CPU"
                " per task in all, its forwarder included)"
            )
            if docs in ray_results:
                text += (
                    f", {verdict(ratio(mode, docs), SDK_TARGET)} the docs' setup over the same protocol"
                    f" ({ratio(mode, docs, 'delivered_per_s'):.2f}x until delivered; the docs' setup at"
                    f" {ratio(docs):.2f} of the do-nothing hook, {added(docs):+.1f} µs)"
                )
            notes.append(text + ".")
        if "ray-bundled" in ray_results:
            notes.append(f"Ray's bundled hook: {ratio('ray-bundled'):.2f} ({added('ray-bundled'):+.1f} µs).")
        for mode in ("ours", "ours-otlp"):
            if mode in ray_results and f"{mode}-ray-helpers" in ray_results:
                shipped = f"{mode}-ray-helpers"
                notes.append(
                    f"`{mode}` with Ray's tracing helpers as shipped: {ratio(shipped):.2f} of the do-nothing"
                    f" hook; our stand-ins (tracing/ray_wrappers.py) save"
                    f" {-over(mode, shipped, 'total_cpu_us'):+.1f} µs of CPU per task in all,"
                    f" {-over(mode, shipped, 'submit_cpu_us'):+.1f} µs on the submitting thread."
                )
        if "ours" in ray_results and "ours-no-output" in ray_results:
            notes.append(
                "Capturing the workers' prints (a no-op task prints nothing) costs"
                f" {ray_results['ours']['tasks_per_s'] / ray_results['ours-no-output']['tasks_per_s']:.3f}x"
                f" the throughput without it ({over('ours', 'ours-no-output', 'total_cpu_us'):+.1f} µs of CPU"
                " per task in all)."
            )
        out += [
            "",
            "Real Ray 2.60 (`ray.init(_tracing_startup_hook=...)`, one fresh local cluster per run):",
            "",
            *table(ray_results, "none", ray_labels),
            "",
            " ".join(notes),
        ]
    out += [
        "",
        "Where the cost goes: spans are `DirectSpan`s (tracing/direct_spans.py) while every processor",
        "only reads ended spans, so a span is a plain object handed to the processors, not an SDK span",
        "copied at its end; in the traced pool the submit span is made a moment later from the ids,",
        "times and context chosen in `submit()` (tracing/deferred_spans.py); span lines are written by",
        "background threads (their CPU is in the total, shared with the workers on this 2-core",
        "machine); a task's execution span is written before the task returns, in the worker, because",
        "Ray kills workers without exit hooks. The OTLP hook writes the same kind of line to its spool",
        "(tracing/spool.py), and its forwarder, a separate process at nice 10, makes and sends the",
        "OTLP spans and event records (tracing/forwarder.py).",
    ]
    return out


if __name__ == "__main__":
    sys.exit(main())
