"""Issue 46's table: what tracing costs a Ray cluster, and the lineage mode against event export.

One run, fresh local Ray 2.60 clusters (`ray.init`, `num_cpus=2`), the modes alternating round by
round, medians of the rounds. No-op tasks, as in bench_tracing. The modes:

* `none`: Ray with no hook and no event export;
* `events`: Ray's events exported (ray-env's variables) to our bridge, which sends its spans and
  records to local OTLP sinks: the cost every user of our history server already pays;
* `lineage`: the same plus the lineage mode (`worker_process_setup_hook`, no tracing hook);
* `tracing-on`: a tracing hook that installs nothing (Ray's `_ray_trace_ctx` wrappers only);
* `sdk-docs`: the OpenTelemetry docs' hook (BatchSpanProcessor + OTLP/HTTP) to a local sink;
* `ours-otlp`: our OTLP hook (spool + forwarder) to a local sink.

In `events` and `lineage` a run ends only when the bridge's sink holds a task span for every task
the cluster ran (the bridge's spans are counted by their `ray.task_attempt` attribute key): every
task a span at the OTLP backend. CPU is every process's: the driver, Ray's GCS, raylet, workers,
dashboard agent (Ray's aggregator) and the rest of its tree, and ours outside it (the bridge, the
spool's forwarder); the sinks stand for the backend and are shown apart, not counted.

    python bench/bench_lineage.py [--quick] [--tasks N] [--rounds R] [--modes a,b]
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
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench_aggregator import CountSink, cpu_seconds, read_ready_line
from run_all import _machine, _versions

HERE = Path(__file__).resolve().parent
OTLP_HOOK = "ray_otel_events.tracing.setup_otlp_tracing:setup_tracing"
LABELS = {
    "none": "Ray, no hook, no event export",
    "events": "Ray's events exported to our bridge (ray-env's variables), no hook",
    "lineage": "events exported + the lineage mode (worker_process_setup_hook)",
    "tracing-on": "a tracing hook that installs nothing (Ray's wrappers only)",
    "sdk-docs": "the OpenTelemetry docs' hook (BatchSpanProcessor + OTLP/HTTP)",
    "ours-otlp": "our OTLP hook (spool + forwarder, http/protobuf)",
}
HOOKS = {
    "tracing-on": "bench_tracing:tracing_on_hook",
    "sdk-docs": "bench_tracing:sdk_docs_hook",
    "ours-otlp": OTLP_HOOK,
}
WITH_EVENTS = ("events", "lineage")
TARGET = 0.97  # issue 46: lineage at >= 0.97 of events-only
BATCHES = 5
WARMUP = 500
SPAN_TOKEN = "ray.task_attempt"  # an attribute key each of the bridge's task spans carries once
# Process groups, by what their command line holds (first match wins; Ray renames its Python
# processes `ray::...`).
GROUPS = [
    ("dashboard agent (Ray's aggregator)", "ray::DashboardAgent"),
    ("runtime env agent", "ray::RuntimeEnvAgent"),
    ("forwarder (ours)", "ray_otel_events.tracing.forwarder"),
    ("raylet", "/raylet/raylet"),
    ("GCS", "/gcs/gcs_server"),
    ("workers", "ray::"),
]


def noop() -> None:
    return None


# -- one measurement, in a fresh process ------------------------------------------------------


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _tree(pid: int) -> list[int]:
    found = [pid]
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                found += _tree(int(child))
    except OSError:
        pass
    return found


def _group(pid: int, me: int, named: dict[int, str]) -> str:
    if pid == me:
        return "driver"
    if pid in named:
        return named[pid]
    cmd = _cmdline(pid)
    return next((group for group, needle in GROUPS if needle in cmd), "other Ray processes")


def _cpu_by_process(named: dict[int, str]) -> dict[int, tuple[str, float]]:
    """CPU seconds of every process of this run: this process's tree (Ray's), the named ones
    (the bridge, the sinks) and the spool's forwarder, each with its group."""
    from bench_tracing import _spool_folder

    from ray_otel_events.tracing.spool import forwarder_pid

    me = os.getpid()
    pids = set(_tree(me)) | set(named)
    folder = _spool_folder()
    forwarder = forwarder_pid(folder) if folder else None
    if forwarder:
        pids.add(forwarder)
    out = {}
    for pid in pids:
        try:
            out[pid] = (_group(pid, me, named), cpu_seconds(pid))
        except (OSError, IndexError):
            continue  # ended while read
    return out


def _count(path: str) -> int:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def child(mode: str, n: int) -> dict[str, Any]:
    import ray
    from bench_tracing import _flush_tracing, _spool_folder, _wait_delivered

    named = {int(pid): group for pid, group in json.loads(os.environ["BENCH_NAMED_PIDS"]).items()}
    kwargs: dict[str, Any] = {}
    if mode in HOOKS:
        kwargs["_tracing_startup_hook"] = HOOKS[mode]
    if mode in WITH_EVENTS:  # as `ray-env` wires a node, to the bridge
        from ray_otel_events.events.ray_releases import events_url, node_environment, parse_release

        url = events_url(os.environ["BENCH_BRIDGE_URL"])
        os.environ.update(node_environment(url, parse_release(ray.__version__)))
    if mode == "lineage":
        from ray_otel_events.tracing.lineage import HOOK

        kwargs["runtime_env"] = {"worker_process_setup_hook": HOOK}
    temp_dir = tempfile.mkdtemp(prefix="rl", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", _temp_dir=temp_dir, **kwargs)
    if mode == "lineage":
        from ray_otel_events.tracing import lineage

        lineage.setup()
    try:
        f = ray.remote(noop)
        ray.get([f.remote() for _ in range(WARMUP)])
        spans_count = os.environ.get("BENCH_SPANS_COUNT", "")
        folder = _spool_folder()
        _flush_tracing()
        _wait_delivered(folder)
        cpu0 = _cpu_by_process(named)
        per = max(1, n // BATCHES)
        total = 0.0
        for _ in range(BATCHES):
            start = time.perf_counter()
            ray.get([f.remote() for _ in range(per)])
            total += time.perf_counter() - start
        done = time.perf_counter()
        _flush_tracing()
        _wait_delivered(folder)
        expected = WARMUP + per * BATCHES
        if mode in WITH_EVENTS:  # every task a span at the backend
            deadline = time.monotonic() + 300
            while _count(spans_count) < expected:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{mode}: {_count(spans_count)} task spans of {expected} at the sink")
                time.sleep(0.05)
        lag = time.perf_counter() - done
        cpu1 = _cpu_by_process(named)
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    groups: dict[str, float] = defaultdict(float)
    for pid, (group, seconds) in cpu1.items():
        groups[group] += seconds - (cpu0[pid][1] if pid in cpu0 else 0.0)
    tasks = per * BATCHES
    return {
        "tasks_per_s": tasks / total,
        "lag_s": lag,
        "task_spans": _count(spans_count) if mode in WITH_EVENTS else 0,
        "expected_spans": expected,
        "cpu_us": {group: seconds / tasks * 1e6 for group, seconds in groups.items()},
    }


# -- orchestration ----------------------------------------------------------------------------


class _Server:
    """One of our servers (`python -m ray_otel_events ...`), started for one run."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ray_otel_events", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.url = "http://" + read_ready_line(self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(60)


def _base_env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("RAY_OTEL_EVENTS_", "OTEL_", "RAY_ADDRESS"))
    }
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")])),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled",  # a bare ray.init() would otherwise write ~/.ray/auth_token
        }
    )
    return env


def run_one(mode: str, n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-lineage-") as folder:
        work = Path(folder)
        env = _base_env()
        (work / "spans").mkdir()
        (work / "records").mkdir()
        spans = CountSink(work / "spans", SPAN_TOKEN)  # the bridge's spans: counted
        records = CountSink(work / "records", "-")  # every other OTLP request: answered
        named = {spans.proc.pid: "sinks (the backend)", records.proc.pid: "sinks (the backend)"}
        bridge = None
        try:
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://{records.address}"
            env["RAY_OTEL_EVENTS_SPOOL_DIR"] = str(work / "spool")  # this run's forwarder only
            if mode in WITH_EVENTS:
                bridge_env = {
                    **_base_env(),
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://{spans.address}/v1/traces",
                    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": f"http://{records.address}/v1/logs",
                }
                bridge = _Server("bridge", "--terminal-grace", "0.5", env=bridge_env)
                named[bridge.proc.pid] = "bridge (ours)"
                env["BENCH_BRIDGE_URL"] = bridge.url
            env["BENCH_SPANS_COUNT"] = str(spans.countfile)
            env["BENCH_NAMED_PIDS"] = json.dumps({str(pid): group for pid, group in named.items()})
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, str(n)],
                capture_output=True,
                text=True,
                timeout=900,
                env=env,
            )
            if out.returncode != 0:
                raise SystemExit(f"{mode} failed: {out.stderr[-3000:]}")
            result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
            return result
        finally:
            if bridge is not None:
                bridge.stop()
            spans.stop()
            records.stop()


def _median_result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    groups = sorted({g for r in runs for g in r["cpu_us"]})
    return {
        "tasks_per_s": statistics.median(r["tasks_per_s"] for r in runs),
        "every_run": [round(r["tasks_per_s"]) for r in runs],
        "lag_s": statistics.median(r["lag_s"] for r in runs),
        "spans_ok": all(r["task_spans"] >= r["expected_spans"] for r in runs),
        "cpu_us": {g: statistics.median(r["cpu_us"].get(g, 0.0) for r in runs) for g in groups},
    }


def total_cpu(result: dict[str, Any]) -> float:
    """CPU µs per task of every process but the sinks (the backend)."""
    return float(sum(v for g, v in result["cpu_us"].items() if g != "sinks (the backend)"))


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small runs, for a sanity check only")
    parser.add_argument("--tasks", type=int, help="timed tasks per run (default 5000, quick 1000)")
    parser.add_argument("--rounds", type=int, help="rounds (default 3, quick 1)")
    parser.add_argument("--modes", help="comma-separated modes (none, events and lineage always run)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return 0
    n = args.tasks or (1000 if args.quick else 5000)
    rounds = args.rounds or (1 if args.quick else 3)
    modes = list(LABELS)
    if args.modes:
        wanted = set(args.modes.split(",")) | {"none", "events", "lineage"}
        modes = [m for m in modes if m in wanted]
    load_before = _load()
    samples: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for _ in range(rounds):
        for mode in modes:
            samples[mode].append(run_one(mode, n))
    load_after = _load()
    results = {m: _median_result(runs) for m, runs in samples.items()}
    print(
        "\n".join(
            report(
                results,
                " ".join(["python bench/bench_lineage.py", *sys.argv[1:]]),
                n,
                rounds,
                load_before,
                load_after,
            )
        )
    )
    return 0


def report(
    results: dict[str, dict[str, Any]], command: str, n: int, rounds: int, load_before: str, load_after: str
) -> list[str]:
    base, events = results["none"], results["events"]
    groups = [
        g
        for g in [
            "driver",
            "workers",
            "raylet",
            "GCS",
            "dashboard agent (Ray's aggregator)",
            "runtime env agent",
            "other Ray processes",
            "bridge (ours)",
            "forwarder (ours)",
        ]
        if any(r["cpu_us"].get(g, 0.0) >= 0.05 for r in results.values())
    ]
    lines = [
        "## Tracing a Ray cluster that exports its events: the lineage mode (issue 46)",
        "",
        f"Command: `{command}` ({n} no-op tasks per run after {WARMUP} warm-up ones, in {BATCHES}"
        f" batches; {rounds} round(s), the modes alternating, a fresh local cluster (`ray.init`,"
        " `num_cpus=2`) per run; medians). tasks/s: first submission to last result. CPU: µs per task"
        " of every process from the first timed submission until the backend has everything (for"
        " events and lineage: a span for every task at the bridge's OTLP sink; for our hook: the spool"
        " acknowledged), by process; the sinks stand for the backend and are not in the total."
        f" Machine: {_machine()}; {_versions()}; run at"
        f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
        f" Load average (1, 5, 15 min) before: {load_before}; after: {load_after} (a shared machine: the"
        " figures are under that load).",
        "",
        "| mode | tasks/s | every run | of untraced Ray | of events-only | total CPU µs/task | "
        + " | ".join(groups)
        + " | sinks | spans at the backend, lag |",
        "|---|---|---|---|---|---|" + "---|" * len(groups) + "---|---|",
    ]
    for mode, r in results.items():
        cpu = r["cpu_us"]
        total = total_cpu(r)
        spans = ("every task, " if r["spans_ok"] else "**MISSING**, ") + f"{r['lag_s']:.1f} s"
        lines.append(
            f"| {LABELS[mode]} | {r['tasks_per_s']:,.0f} | {r['every_run']} |"
            f" {r['tasks_per_s'] / base['tasks_per_s']:.2f}"
            f" | {r['tasks_per_s'] / events['tasks_per_s']:.2f} |"
            f" {total:.0f} | "
            + " | ".join(f"{cpu.get(g, 0.0):.0f}" for g in groups)
            + f" | {cpu.get('sinks (the backend)', 0.0):.0f} | "
            + (spans if mode in WITH_EVENTS else "-")
            + " |"
        )
    ratio = results["lineage"]["tasks_per_s"] / events["tasks_per_s"]
    added = {
        g: events["cpu_us"].get(g, 0.0) - base["cpu_us"].get(g, 0.0)
        for g in set(events["cpu_us"]) | set(base["cpu_us"])
        if g != "sinks (the backend)"
    }
    where = ", ".join(f"{g} {v:+.0f}" for g, v in sorted(added.items(), key=lambda kv: -kv[1]) if abs(v) >= 1)
    cpu_ratio = total_cpu(events) / total_cpu(results["lineage"])
    lines += [
        "",
        f"The lineage mode runs at **{ratio:.2f}** of events-only (target ≥ {TARGET}:"
        f" **{'met' if ratio >= TARGET else 'NOT met'}**); by CPU per task, events-only over lineage:"
        f" {cpu_ratio:.2f}. Event export's own cost, CPU µs per task over untraced Ray, by process:"
        f" {where}.",
    ]
    return lines


if __name__ == "__main__":
    sys.exit(main())
