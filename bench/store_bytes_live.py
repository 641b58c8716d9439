"""The SQLite store's bytes per task attempt of a real stream: a live Ray 2.60 cluster exporting to
`serve`, a driver running a few thousand tasks (some failing, some on actors, one actor dying).

A measurement, not a test: `serve` on a fresh SQLite file, a head node wired by `ray-env` (through
tests/helpers/ray_cluster.py: its own ports and temp dir), the driver's task attempts, its job row,
its 3 actors' rows and worker rows waited for in the store (with a deadline: what never came is
said, with serve's last log lines), then serve stopped (it flushes) and SQLite's dbstat read
(bench_soak's `sqlite_breakdown`).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_aggregator import read_ready_line  # noqa: E402
from bench_soak import sqlite_breakdown  # noqa: E402
from helpers.ray_cluster import RayCluster, ray_cluster  # noqa: E402

from ray_otel_events.store.sqlite_store import resource_name  # noqa: E402

DRIVER = """
import ray, sys
ray.init()
tasks = int(sys.argv[1])

@ray.remote(max_retries=1, retry_exceptions=False)
def work(i):
    if i % 17 == 0:
        raise ValueError(f"task {i} fails")
    return i * 2

@ray.remote
class Counter:
    def __init__(self):
        self.n = 0
    def add(self, k):
        if k % 23 == 0:
            raise RuntimeError(f"call {k} fails")
        self.n += k
        return self.n
    def die(self):
        import os
        os._exit(1)

refs = [work.remote(i) for i in range(tasks)]
actors = [Counter.remote() for _ in range(3)]
calls = [a.add.remote(k) for k in range(tasks // 6) for a in actors]
done = 0
for ref in refs + calls:
    try:
        ray.get(ref)
        done += 1
    except Exception:
        pass
try:
    ray.get(actors[0].die.remote())
except Exception:
    pass
print("driver done", done, flush=True)
"""


def expected_attempts(tasks: int) -> int:
    """The driver's task attempts: its tasks and actor calls, the actors' creations, `die`, the driver."""
    return tasks + 3 * (tasks // 6) + 3 + 1 + 1


def run_driver(cluster: RayCluster, folder: Path, tasks: int) -> None:
    """DRIVER run to its end against `cluster` (its last line printed)."""
    driver = folder / "driver.py"
    driver.write_text(DRIVER)
    ran = subprocess.run(
        [sys.executable, str(driver), str(tasks)],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(ran.stdout.strip().splitlines()[-1:], file=sys.stderr)


def rows_by_resource(path: Path) -> dict[str, int]:
    """The store's state rows per resource (tasks: attempts), read-only beside serve."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        found = db.execute("SELECT resource, COUNT(*) FROM state_rows GROUP BY resource").fetchall()
        return {resource_name(resource): count for resource, count in found}
    except sqlite3.OperationalError:
        return {}
    finally:
        db.close()


def missing(found: dict[str, int], expected: dict[str, int]) -> dict[str, str]:
    """The resources with fewer rows than expected: {resource: "found/expected"}."""
    return {r: f"{found.get(r, 0)}/{n}" for r, n in expected.items() if found.get(r, 0) < n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000, help="plain tasks (and half as many actor calls)")
    parser.add_argument("--wait", type=float, default=300, help="seconds to wait for rows after the driver")
    parser.add_argument("--keep", help="copy the store here at the end (else only the temporary file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="store-live-") as tmp:
        store = Path(tmp) / "live.sqlite3"
        serve_log = Path(tmp) / "serve.log"
        with serve_log.open("w") as log:
            serve = subprocess.Popen(
                [sys.executable, "-m", "ray_otel_events", "serve", "--store", str(store)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        try:
            address = read_ready_line(serve)
            # the driver's job, its 3 actors, and workers (the driver's and at least one executing
            # its tasks)
            expected = {
                "tasks": expected_attempts(args.tasks),
                "jobs": 1,
                "actors": 3,
                "workers": 2,
            }
            with ray_cluster(f"http://{address}/v1/ray-events", num_cpus=2) as cluster:
                started = time.monotonic()
                run_driver(cluster, Path(tmp), args.tasks)
                deadline = time.monotonic() + args.wait
                last: dict[str, int] = {}
                stable_since = time.monotonic()
                while time.monotonic() < deadline:
                    found = rows_by_resource(store)
                    if found != last:
                        print(f"  {time.monotonic() - started:,.0f} s: rows {found}", file=sys.stderr)
                        last, stable_since = found, time.monotonic()
                    elif not missing(found, expected) and time.monotonic() - stable_since > 15:
                        break
                    time.sleep(2)
                absent = missing(rows_by_resource(store), expected)
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=300)
        finally:
            if serve.poll() is None:
                serve.kill()
        found = rows_by_resource(store)
        if absent or missing(found, expected):
            print(f"MISSING after {args.wait} s: {absent}; after serve stopped: {missing(found, expected)}")
            print("serve's last lines:\n" + "\n".join(serve_log.read_text().splitlines()[-20:]))
        count = found.get("tasks", 0)
        sizes = sqlite_breakdown(store)
        db = sqlite3.connect(store)
        events = db.execute("SELECT COUNT(*) FROM state_rows").fetchone()[0]
        states = db.execute(
            "SELECT state, COUNT(*) FROM state_rows WHERE resource IN ('tasks', 1) GROUP BY state"
        ).fetchall()
        db.close()
        if args.keep:
            shutil.copyfile(store, args.keep)
    print(f"{count:,} task attempts (expected at least {expected['tasks']:,}), {events:,} rows {found}")
    print(f"task states {states}")
    print(f"{sizes['file'] / count:,.0f} bytes per attempt (file)")
    for name, value in sorted(sizes.items(), key=lambda kv: -(kv[1] or 0)):
        if name != "file" and value and value / count >= 1:
            print(f"  {name}: {value / count:,.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
