"""The store's bytes per task attempt of a real stream: a live Ray 2.60 cluster exporting to
`serve`, a driver running a few thousand tasks (some failing, some on actors, one actor dying).

A measurement, not a test: `serve` on a fresh SQLite file, a head node wired by `ray-env` (through
tests/helpers/ray_cluster.py: its own ports and temp dir), the driver's attempts waited for in the
store, then serve stopped (it flushes) and SQLite's dbstat read (bench_soak's `sqlite_breakdown`).

`--postgres` stores in PostgreSQL instead: a server started by tests/helpers/postgres.py, its bytes
counted over an empty store's (`pg_database_size` of a database holding only the migrated schema),
both after VACUUM ANALYZE as bench_soak's `postgres_breakdown` reads them, with the breakdown per
table and index; with `--reindex`, the same again after REINDEX (the indexes packed). `--settle S`
keeps `serve` running S seconds after the stream (its upkeep runs each minute: the indexes it
repacks once the stream has stopped).
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_aggregator import read_ready_line  # noqa: E402
from bench_soak import postgres_breakdown, sqlite_breakdown  # noqa: E402
from helpers.postgres import PostgresServer  # noqa: E402
from helpers.ray_cluster import ray_cluster  # noqa: E402

from ray_otel_events.store.postgres_store import PostgresStore  # noqa: E402

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


_COUNT = "SELECT COUNT(*) FROM state_rows WHERE resource = 'tasks'"
_STATES = "SELECT state::text, COUNT(*) FROM state_rows WHERE resource = 'tasks' GROUP BY state ORDER BY 1"


def attempts(path: Path | str) -> int:
    if isinstance(path, str):
        with psycopg.connect(path) as pg:
            try:
                return int(pg.execute(_COUNT).fetchone()[0])  # type: ignore[index]
            except psycopg.errors.UndefinedTable:
                return 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(db.execute(_COUNT).fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()


def empty_store_bytes(server: PostgresServer) -> int:
    """pg_database_size of a database holding only the store's schema (as postgres_breakdown reads it)."""
    url = server.new_database("empty_store")
    PostgresStore(url).close()
    return postgres_breakdown(url)["file"]


def pg_report(url: str, count: int, empty: int, reindex: bool) -> None:
    """The database's bytes per attempt over an empty store's, and per table and index."""
    sizes = postgres_breakdown(url)
    with psycopg.connect(url) as db:
        rows = db.execute("SELECT COUNT(*) FROM state_rows").fetchone()[0]  # type: ignore[index]
        states = db.execute(_STATES).fetchall()
    print(f"{count:,} task attempts, {rows:,} rows, states {states}")
    print(f"{(sizes['file'] - empty) / count:,.0f} bytes per attempt over an empty store ({empty:,} bytes)")
    for name, value in sorted(sizes.items(), key=lambda kv: -(kv[1] or 0)):
        if name != "file" and value and value / count >= 1:
            print(f"  {name}: {value / count:,.1f}")
    if reindex:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("REINDEX TABLE state_rows")
        sizes = postgres_breakdown(url)
        print(f"after REINDEX TABLE state_rows: {(sizes['file'] - empty) / count:,.0f} bytes per attempt")
        for name, value in sorted(sizes.items(), key=lambda kv: -(kv[1] or 0)):
            if "(index)" in name:
                print(f"  {name}: {value / count:,.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000, help="plain tasks (and half as many actor calls)")
    parser.add_argument("--postgres", action="store_true", help="store in PostgreSQL (a server of its own)")
    parser.add_argument("--reindex", action="store_true", help="with --postgres: the bytes after REINDEX too")
    parser.add_argument("--settle", type=float, default=0.0, help="seconds serve runs on after the stream")
    args = parser.parse_args()
    server = PostgresServer() if args.postgres else None
    try:
        return measure(args, server)
    finally:
        if server is not None:
            server.stop()


def measure(args: argparse.Namespace, server: PostgresServer | None) -> int:
    with tempfile.TemporaryDirectory(prefix="store-live-") as tmp:
        store: Path | str = Path(tmp) / "live.sqlite3"
        extra: list[str] = []
        empty = 0
        if server is not None:
            empty = empty_store_bytes(server)
            store = server.new_database("live")
            extra = ["--spool", str(Path(tmp) / "spool")]
        log = (Path(tmp) / "serve.log").open("w")
        serve = subprocess.Popen(
            [sys.executable, "-m", "ray_otel_events", "serve", "--store", str(store), *extra],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            address = read_ready_line(serve)
            expected = args.tasks + 3 * (args.tasks // 6) + 3 + 1 + 1  # + creations, die, the driver
            with ray_cluster(f"http://{address}/v1/ray-events", num_cpus=2) as cluster:
                driver = Path(tmp) / "driver.py"
                driver.write_text(DRIVER)
                ran = subprocess.run(
                    [sys.executable, str(driver), str(args.tasks)],
                    env=cluster.env,
                    capture_output=True,
                    text=True,
                    timeout=1800,
                )
                print(ran.stdout.strip().splitlines()[-1:], file=sys.stderr)
                deadline = time.monotonic() + 300
                last, stable_since = -1, time.monotonic()
                while time.monotonic() < deadline:
                    count = attempts(store)
                    if count != last:
                        last, stable_since = count, time.monotonic()
                    elif count >= expected and time.monotonic() - stable_since > 15:
                        break
                    time.sleep(2)
            time.sleep(args.settle)
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=300)
        finally:
            if serve.poll() is None:
                serve.kill()
        log.close()
        count = attempts(store)
        if isinstance(store, str):
            for line in (Path(tmp) / "serve.log").read_text().splitlines():
                if "repack" in line:  # what upkeep did to the indexes
                    print(line[:300])
            print(f"expected at least {expected:,} task attempts")
            pg_report(store, count, empty, args.reindex)
            return 0
        sizes = sqlite_breakdown(store)
        db = sqlite3.connect(store)
        events = db.execute("SELECT COUNT(*) FROM state_rows").fetchone()[0]
        states = db.execute(
            "SELECT state, COUNT(*) FROM state_rows WHERE resource = 'tasks' GROUP BY state"
        ).fetchall()
        db.close()
    print(f"{count:,} task attempts (expected at least {expected:,}), {events:,} rows, states {states}")
    print(f"{sizes['file'] / count:,.0f} bytes per attempt (file)")
    for name, value in sorted(sizes.items(), key=lambda kv: -(kv[1] or 0)):
        if name != "file" and value and value / count >= 1:
            print(f"  {name}: {value / count:,.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
