"""What running in production costs: the durable queue (--queue-dir) and a /metrics scrape.

Same load as bench_aggregator (a separate load generator sends N real-shaped events over gRPC; a
counting sink; the figure runs from the first request to the last event at the sink), in the same
run, alternating: the aggregator as it is, and with `--queue-dir` (every accepted event committed
to SQLite in WAL mode before AddEvents is answered, deleted once delivered). CPU is the whole
aggregator process tree (encoder workers included) over the run, so the work SQLite adds is
counted wherever it lands.

Scrape cost: after a run, GET /metrics K times from the aggregator's --metrics-port; the figure is
the server's CPU per scrape (process tree) and the wall time per scrape as the client sees it.

Prints one Markdown section. `--quick` runs a small sanity check.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench_aggregator import CountSink, free_port, run_load, start_ours, stop_ours, tree_cpu_seconds

TARGET_DURABLE_RATIO = 0.5  # ours: the durable queue keeps at least half the in-memory rate
CHECKPOINT_SETTLE_S = 2.0  # the queue's checkpointer runs 0.5 s after the last write


def one_run(n: int, batch: int, durable: bool, scrapes: int = 0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="prodbench-") as tmp:
        sink = CountSink(Path(tmp))
        try:
            flags = ["--log-level", "ERROR"]
            if durable:
                flags += ["--queue-dir", str(Path(tmp) / "queue")]
            metrics_port = free_port() if scrapes else 0
            if scrapes:
                flags += ["--metrics-port", str(metrics_port)]
            proc, address = start_ours(f"http://{sink.address}/", *flags)
            try:
                cpu0 = tree_cpu_seconds(proc.pid)
                result = run_load(address, sink.countfile, n, batch)
                # The queue's log is copied into its file by a thread a moment after the last
                # write: that work is part of the cost, so it is waited for before CPU is read.
                time.sleep(CHECKPOINT_SETTLE_S)
                result["cpu_us_per_event"] = (tree_cpu_seconds(proc.pid) - cpu0) / n * 1e6
                if scrapes:
                    result.update(scrape_cost(proc.pid, metrics_port, scrapes))
            finally:
                stats = stop_ours(proc)
            result["published"] = sum(stats["publishers"]["http_service"]["published"].values())
            if durable:
                result["left_on_disk"] = stats["durable_queue"]["held_events"]
            return result
        finally:
            sink.stop()


def scrape_cost(pid: int, port: int, k: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/metrics"
    body = urllib.request.urlopen(url, timeout=10).read()  # warm up
    walls = []
    cpu0 = tree_cpu_seconds(pid)
    for _ in range(k):
        started = time.perf_counter()
        body = urllib.request.urlopen(url, timeout=10).read()
        walls.append(time.perf_counter() - started)
    cpu = tree_cpu_seconds(pid) - cpu0
    return {
        "scrape_cpu_ms": cpu / k * 1e3,
        "scrape_wall_ms": statistics.median(walls) * 1e3,
        "scrape_bytes": float(len(body)),
        "scrape_series": float(sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("-n", type=int)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--runs", type=int)
    args = parser.parse_args()
    n = args.n or (5_000 if args.quick else 50_000)
    runs = args.runs or (1 if args.quick else 3)
    memory: list[dict[str, Any]] = []
    durable: list[dict[str, Any]] = []
    for i in range(runs):  # alternate, so drift on a noisy machine hits both alike
        memory.append(one_run(n, args.batch, durable=False, scrapes=200 if i == 0 else 0))
        durable.append(one_run(n, args.batch, durable=True))
    mem_rate = statistics.median(r["events_per_s"] for r in memory)
    dur_rate = statistics.median(r["events_per_s"] for r in durable)
    mem_cpu = statistics.median(r["cpu_us_per_event"] for r in memory)
    dur_cpu = statistics.median(r["cpu_us_per_event"] for r in durable)
    ratio = dur_rate / mem_rate
    scrape = memory[0]
    cmd = "python bench/bench_production.py" + (" --quick" if args.quick else "")
    lines = [
        "## production: durable queue and /metrics",
        "",
        f"Command: `{cmd}`",
        "",
        f"{n:,} events per run in AddEvents requests of {args.batch}, {runs} runs of each, alternating; "
        "median shown (every run in brackets). CPU: the aggregator's process tree over the run.",
        "",
        "| aggregator | events/s | CPU µs/event | events left on disk |",
        "|---|---|---|---|",
        f"| memory only | {mem_rate:,.0f} {[round(r['events_per_s']) for r in memory]} | {mem_cpu:.1f} | - |",
        f"| `--queue-dir` (SQLite WAL) | {dur_rate:,.0f} {[round(r['events_per_s']) for r in durable]} "
        f"| {dur_cpu:.1f} | {max(r['left_on_disk'] for r in durable)} |",
        "",
        f"- Durable / memory throughput: **{ratio:.2f}** (target ≥ {TARGET_DURABLE_RATIO}: "
        f"{'met' if ratio >= TARGET_DURABLE_RATIO else 'MISSED'}); the durable queue costs "
        f"{dur_cpu - mem_cpu:.1f} µs of CPU per event.",
        f"- `/metrics` scrape ({scrape['scrape_series']:.0f} series, "
        f"{scrape['scrape_bytes'] / 1024:.1f} KiB): {scrape['scrape_cpu_ms']:.2f} ms of server CPU and "
        f"{scrape['scrape_wall_ms']:.2f} ms wall per scrape "
        f"(200 scrapes after a run); at a 15 s scrape interval that is "
        f"{scrape['scrape_cpu_ms'] / 15_000 * 100:.3f} % of a core.",
        "",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
