"""Aggregator throughput (events/s, gRPC in -> HTTP JSON out) against Ray 2.60's, plus memory per event.

Both aggregators get the same load in the same run: a separate load-generator process
(bench/aggload.py, Ray's own generated classes when `ray` is importable) sends N real-shaped task
definition + lifecycle events in AddEvents requests of BATCH events; a counting HTTP sink
(bench/countsink.py) counts them as they arrive; the figure is delivered events / seconds from the
first request to the last event at the sink. Ray's aggregator runs inside a `ray start --head`
dashboard agent, configured as in the team's yardstick (EXPOSABLE_EVENT_TYPES=ALL).

Memory per buffered event, two ways: the buffer alone (tracemalloc delta for M realistic records),
and the aggregator process holding M events it cannot deliver (RSS delta; the sink is unreachable).

Prints one Markdown section. `--quick` runs a small sanity check; `--no-ray` skips Ray.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIXTURE = ROOT / "tests" / "fixtures" / "aggregator-ray-2.60" / "events.json"
TOKEN = "aggbench_session_token_7f3a"
TARGET_EVENTS_PER_S = 80_000
TARGET_RATIO = 10.0
TARGET_BYTES_PER_EVENT = 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def read_ready_line(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = proc.stdout.readline()  # the servers print it once, flushed
    if not line.startswith("listening ") or time.monotonic() > deadline:
        raise RuntimeError(f"{proc.args}: expected a ready line, got {line!r}")
    return line.strip().split("=", 1)[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and its live children (the aggregator's encoder workers count too)."""
    total = cpu_seconds(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        total += sum(tree_cpu_seconds(int(child)) for child in children)
    return total


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class CountSink:
    """bench/countsink.py counting `token` in every POST body (it parses nothing else)."""

    def __init__(self, workdir: Path, token: str = TOKEN) -> None:
        self.countfile = workdir / "count"
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "countsink.py"), "0", token, str(self.countfile)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.address = read_ready_line(self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def run_load(target: str, countfile: Path, n: int, batch: int, *extra: str) -> dict[str, Any]:
    script = str(HERE / "aggload.py")
    out = subprocess.run(
        [sys.executable, script, target, str(countfile), str(n), str(batch), TOKEN, str(FIXTURE), *extra],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        raise RuntimeError(f"aggload failed: {out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def start_ours(export_addr: str, *flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ray_otel_events",
            "aggregator",
            "--log-format",
            "json",
            "--export-addr",
            export_addr,
            "--exposable-event-types",
            "ALL",
            *flags,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("RAY_DASHBOARD_AGGREGATOR_AGENT_")},
    )
    return proc, read_ready_line(proc)


def stop_ours(proc: subprocess.Popen[str]) -> dict[str, Any]:
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.wait(120)
    if not line.startswith("stats "):
        raise RuntimeError(f"aggregator ended without a stats line: {line!r}")
    stats: dict[str, Any] = json.loads(line[len("stats ") :])
    return stats


def bench_ours(n: int, batch: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="aggbench-") as tmp:
        sink = CountSink(Path(tmp))
        try:
            proc, address = start_ours(f"http://{sink.address}/")
            try:
                cpu0 = tree_cpu_seconds(proc.pid)
                result = run_load(address, sink.countfile, n, batch)
                result["cpu_us_per_event"] = (tree_cpu_seconds(proc.pid) - cpu0) / n * 1e6
            finally:
                stats = stop_ours(proc)
            result["published"] = sum(stats["publishers"]["http_service"]["published"].values())
            return result
        finally:
            sink.stop()


def bench_ray(n: int, batch: int) -> dict[str, Any]:
    """Ray 2.60's aggregator in a `ray start --head --block` we own (SIGTERM stops its processes)."""
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray_bin is None:
        raise RuntimeError("the `ray` command is not installed")
    with tempfile.TemporaryDirectory(prefix="rayb", dir="/tmp") as tmp:
        sink = CountSink(Path(tmp))
        grpc_port = free_port()
        env = dict(os.environ)
        env.update(
            {
                "RAY_USAGE_STATS_ENABLED": "0",
                # The yardstick's agent takes requests without a token: a ~/.ray/auth_token left on
                # the machine (Ray 2.60 writes one at a bare ray.init) must not make it refuse aggload.
                "RAY_AUTH_MODE": "disabled",
                "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": f"http://{sink.address}/",
                "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES": "ALL",
            }
        )
        head = subprocess.Popen(
            [
                ray_bin,
                "start",
                "--head",
                "--block",
                "--num-cpus=1",
                f"--port={free_port()}",
                f"--dashboard-port={free_port()}",
                f"--dashboard-agent-grpc-port={grpc_port}",
                f"--dashboard-agent-listen-port={free_port()}",
                f"--ray-client-server-port={free_port()}",
                f"--temp-dir={tmp}/r",
                "--disable-usage-stats",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        try:
            # aggload waits for the agent's gRPC port; the yardstick also gave the agent 3 s to load
            # its modules before sending.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", grpc_port)) == 0:
                        break
                time.sleep(0.5)
            time.sleep(3)
            return run_load(f"127.0.0.1:{grpc_port}", sink.countfile, n, batch)
        finally:
            head.send_signal(signal.SIGTERM)
            try:
                head.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(head.pid, signal.SIGKILL)
                head.wait(30)
            sink.stop()


def realistic_wires(m: int) -> list[tuple[bytes, int]]:
    from google.protobuf import json_format

    from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

    templates = []
    for item in json.loads(FIXTURE.read_text()):
        if item["eventType"] in ("TASK_DEFINITION_EVENT", "TASK_LIFECYCLE_EVENT"):
            event = RayEvent()
            json_format.ParseDict(item, event)
            templates.append(event)
    out = []
    for i in range(m):
        event = templates[i % len(templates)]
        event.event_id = os.urandom(28)
        out.append((event.SerializeToString(), int(event.event_type)))
    return out


def memory_buffer_alone(m: int) -> dict[str, float]:
    """tracemalloc bytes held per record: the bytes object plus its list slots."""
    from ray_otel_events.processors.event_buffer import MultiConsumerEventBuffer

    records = realistic_wires(m)
    wire_total = sum(len(w) for w, _ in records)
    buffer = MultiConsumerEventBuffer(max_events=m + 1, max_bytes=1 << 40)
    buffer.register_consumer("c")
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    # As the receiver does it: new bytes objects per request, added in requests of 1000.
    for start in range(0, m, 1000):
        chunk = records[start : start + 1000]
        buffer.add_many([bytes(bytearray(w)) for w, _ in chunk], [t for _, t in chunk])
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(buffer) == m
    return {"bytes_per_event": (after - before) / m, "wire_bytes_per_event": wire_total / m}


def memory_aggregator_rss(m: int) -> dict[str, float]:
    """RSS growth of an aggregator holding m undeliverable events (nothing listens on the port)."""
    with tempfile.TemporaryDirectory(prefix="aggmem-") as tmp:
        proc, address = start_ours(
            f"http://127.0.0.1:{free_port()}/",
            "--log-level",
            "ERROR",
            "--max-buffer-size",
            str(m + 1000),
            "--shutdown-flush-timeout",
            "0",
        )
        try:
            time.sleep(0.5)
            rss0 = rss_bytes(proc.pid)
            run_load(address, Path(tmp) / "none", m, 1000, "--no-wait")
            time.sleep(0.5)
            rss1 = rss_bytes(proc.pid)
        finally:
            stats = stop_ours(proc)
        held = stats["received_total"]
        return {"bytes_per_event": (rss1 - rss0) / held, "held": held}


def median_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput, annotated with every run's figure."""
    ordered = sorted(results, key=lambda r: r["events_per_s"])
    chosen = dict(ordered[len(ordered) // 2])
    chosen["all_runs"] = [round(r["events_per_s"]) for r in results]
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sanity run")
    parser.add_argument("--no-ray", action="store_true", help="skip Ray's aggregator")
    parser.add_argument("-n", type=int, help="events per run (default 50000, quick 5000)")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--runs", type=int, help="runs of each aggregator; the median is reported (default 3)"
    )
    args = parser.parse_args()
    n = args.n or (5_000 if args.quick else 50_000)
    m = 10_000 if args.quick else 100_000
    runs = args.runs or (1 if args.quick else 3)

    our_runs = [bench_ours(n, args.batch) for _ in range(runs)]
    ours = median_run(our_runs)
    ray_result: dict[str, Any] | None = None
    ray_note = ""
    if args.no_ray:
        ray_note = "skipped (--no-ray)"
    else:
        try:
            import ray  # noqa: F401
        except ImportError:
            ray_note = "skipped: `ray` is not installed"
        else:
            try:
                ray_runs = [bench_ray(n, args.batch) for _ in range(runs)]
                ray_result = median_run(ray_runs)
            except Exception as exc:  # report, do not hide our own figure
                ray_note = f"failed: {exc}"
    mem_buffer = memory_buffer_alone(m)
    mem_rss = memory_aggregator_rss(m)

    cmd = (
        "python bench/bench_aggregator.py"
        + (" --quick" if args.quick else "")
        + (" --no-ray" if args.no_ray else "")
    )
    lines = [
        "## aggregator",
        "",
        f"Command: `{cmd}`",
        "",
        f"{n:,} task definition + lifecycle events (captured Ray 2.60 shapes, fresh ids) sent over gRPC "
        f"AddEvents in requests of {args.batch} by a separate load-generator process built with "
        f"{ours['impl']}'s generated classes; throughput = events counted at an HTTP sink / seconds from "
        "the first request to the last event there. Exposable event types: ALL for both aggregators.",
        "",
        f"Each aggregator ran {runs} time(s) in this process run; the median run is shown, all runs "
        "in the last column. CPU counts the aggregator and its encoder worker processes.",
        "",
        "| aggregator | delivered | seconds | events/s (median) | CPU us/event | every run, events/s |",
        "|---|---|---|---|---|---|",
        f"| ray-otel-events | {ours['delivered']:,} / {n:,} | {ours['seconds']:.2f} | "
        f"**{ours['events_per_s']:,.0f}** | {ours['cpu_us_per_event']:.1f} | {ours['all_runs']} |",
    ]
    if ray_result is not None:
        lines.append(
            f"| Ray 2.60 dashboard agent | {ray_result['delivered']:,} / {n:,} | "
            f"{ray_result['seconds']:.2f} | {ray_result['events_per_s']:,.0f} | - | "
            f"{ray_result['all_runs']} |"
        )
    else:
        lines.append(f"| Ray 2.60 dashboard agent | {ray_note} | | | | |")
    lines.append("")
    if ray_result is not None and ray_result["events_per_s"] > 0:
        ratio = ours["events_per_s"] / ray_result["events_per_s"]
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        lines.append(f"- Ratio ours / Ray: **{ratio:.1f}x** (target >= {TARGET_RATIO:.0f}x: {verdict}).")
    verdict = "met" if ours["events_per_s"] >= TARGET_EVENTS_PER_S else "NOT met"
    lines.append(f"- Absolute target >= {TARGET_EVENTS_PER_S:,} events/s on this machine: {verdict}.")
    lines.append(
        f"- Memory per buffered event, buffer alone ({m:,} records, tracemalloc): "
        f"**{mem_buffer['bytes_per_event']:.0f} B** "
        f"(of which wire bytes {mem_buffer['wire_bytes_per_event']:.0f} B); "
        f"target <= {TARGET_BYTES_PER_EVENT} B: "
        f"{'met' if mem_buffer['bytes_per_event'] <= TARGET_BYTES_PER_EVENT else 'NOT met'}."
    )
    lines.append(
        f"- Aggregator process holding {mem_rss['held']:,} undeliverable events: RSS grew "
        f"{mem_rss['bytes_per_event']:.0f} B per event."
    )
    if ours["delivered"] != n:
        lines.append(f"- WARNING: ours delivered {ours['delivered']} of {n}.")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
