"""The OTLP hook's forwarder alone, live: its CPU per Ray task (from /proc) while N no-op tasks
run after a warm-up, until the endpoint has every span. The endpoint and protocol are the
standard OTEL_EXPORTER_OTLP_* variables (e.g. bench/countsink.py, bench/otlp_grpc_sink.py).

    RAY_OTEL_EVENTS_SPOOL_DIR=$(mktemp -d) OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT \\
        python bench/forwarder_cpu.py 5000
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

import ray

from ray_otel_events.tracing.spool import forwarder_pid, unsent_bytes

HOOK = "ray_otel_events.tracing.setup_otlp_tracing:setup_tracing"


def noop() -> int:
    return 0


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spool_folder() -> str:
    root = os.environ["RAY_OTEL_EVENTS_SPOOL_DIR"]
    return os.path.join(root, os.listdir(root)[0])


def wait_delivered() -> None:
    while unsent_bytes(spool_folder()):
        time.sleep(0.01)


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    temp_dir = tempfile.mkdtemp(prefix="rfc", dir="/tmp")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        _temp_dir=temp_dir,
        _tracing_startup_hook=HOOK,
    )
    try:
        task = ray.remote(noop)
        ray.get([task.remote() for _ in range(500)])  # warm-up: workers and the forwarder started
        time.sleep(0.5)
        wait_delivered()
        pid = forwarder_pid(spool_folder())
        assert pid is not None, "no forwarder runs"
        cpu0, wall0 = cpu_s(pid), time.monotonic()
        for _ in range(5):
            ray.get([task.remote() for _ in range(n // 5)])
        wait_delivered()
        cpu1, wall1 = cpu_s(pid), time.monotonic()
        print(
            f"forwarder CPU per task: {(cpu1 - cpu0) / n * 1e6:.1f} us "
            f"({n} tasks, {n / (wall1 - wall0):.0f} tasks/s until delivered)"
        )
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
