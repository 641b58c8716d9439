"""The PostgreSQL store's bytes per task attempt of a real stream: store_bytes_live's live Ray 2.60
cluster and driver (a few thousand tasks, some failing, some on actors, one actor dying) exporting
to `serve --store postgresql://...`.

A measurement, not a test: a PostgreSQL server of its own (tests/helpers/postgres.py), `serve` on a
fresh database, a head node wired by `ray-env` (tests/helpers/ray_cluster.py), the driver's attempts
waited for in the store, `--settle` seconds more (`serve`'s upkeep runs each minute), then serve
stopped (it flushes). Bytes are counted over an empty store's (`pg_database_size` of a database
holding only the migrated schema), both after VACUUM ANALYZE as bench_soak's `postgres_breakdown`
reads them, with the breakdown per table and index; with `--reindex`, the same again after REINDEX
(the indexes packed). What `serve`'s upkeep did to the indexes (its log) is printed too.
"""

from __future__ import annotations

import argparse
import signal
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
from bench_soak import postgres_breakdown  # noqa: E402
from helpers.postgres import PostgresServer  # noqa: E402
from helpers.ray_cluster import ray_cluster  # noqa: E402
from store_bytes_live import expected_attempts, run_driver  # noqa: E402

from ray_otel_events.store.postgres_store import PostgresStore  # noqa: E402

_COUNT = "SELECT COUNT(*) FROM state_rows WHERE resource = 'tasks'"
_WRITES = "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'state_rows'"


def attempts(url: str) -> int:
    with psycopg.connect(url) as db:
        try:
            found = db.execute(_COUNT).fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
    return int(found[0]) if found else 0


def empty_store_bytes(server: PostgresServer) -> int:
    """pg_database_size of a database holding only the store's schema (as postgres_breakdown reads it)."""
    url = server.new_database("empty_store")
    PostgresStore(url).close()
    return postgres_breakdown(url)["file"]


def report(url: str, count: int, empty: int, reindex: bool) -> None:
    """The database's bytes per attempt over an empty store's, and per table and index."""
    sizes = postgres_breakdown(url)
    with psycopg.connect(url) as db:
        found = db.execute("SELECT COUNT(*) FROM state_rows").fetchone()
    store = PostgresStore(url, read_only=True)
    states = sorted(store.counts("tasks", "state"))
    store.close()
    print(f"{count:,} task attempts, {found[0] if found else 0:,} rows, states {states}")
    print(f"{(sizes['file'] - empty) / count:,.0f} bytes per attempt over an empty store ({empty:,} bytes)")
    with psycopg.connect(url) as db:  # how often a row was written, and what a live row takes
        writes = db.execute(_WRITES).fetchone()
        tuple_bytes = db.execute("SELECT AVG(pg_column_size(r.*)) FROM state_rows r").fetchone()
    if writes:
        print(f"state_rows: {writes[0]:,} inserts, {writes[1]:,} updates ({writes[2]:,} HOT)", end="")
        print(f", a live row's tuple {float(tuple_bytes[0] if tuple_bytes else 0):,.0f} bytes on average")
    for name, value in sorted(sizes.items(), key=lambda kv: -(kv[1] or 0)):
        if name != "file" and value and value / count >= 1:
            print(f"  {name}: {value / count:,.1f}")
    if reindex:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("REINDEX TABLE state_rows")
        sizes = postgres_breakdown(url)
        print(f"after REINDEX TABLE state_rows: {(sizes['file'] - empty) / count:,.0f} bytes per attempt")
        for name, value in sorted(sizes.items(), key=lambda kv: -(kv[1] or 0)):
            if "(index)" in name and value / count >= 1:
                print(f"  {name}: {value / count:,.1f}")


def measure(args: argparse.Namespace, server: PostgresServer, tmp: Path) -> int:
    empty = empty_store_bytes(server)
    url = server.new_database("live")
    log_path = tmp / "serve.log"
    with log_path.open("w") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "ray_otel_events", "serve", "--store", url, "--spool", str(tmp / "spool")],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        address = read_ready_line(serve)
        expected = expected_attempts(args.tasks)
        with ray_cluster(f"http://{address}/v1/ray-events", num_cpus=2) as cluster:
            run_driver(cluster, tmp, args.tasks)
            deadline = time.monotonic() + 300
            last, stable_since = -1, time.monotonic()
            while time.monotonic() < deadline:
                count = attempts(url)
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
    for line in log_path.read_text().splitlines():
        if "repack" in line:  # what upkeep did to the indexes
            print(line[:300])
    print(f"expected at least {expected:,} task attempts")
    store = PostgresStore(url)
    estimate = getattr(store, "_packed_bytes", None)  # (absent from a store that does not repack)
    with psycopg.connect(url) as db:  # what upkeep's next round sees: bytes, and bytes packed as estimated
        for name, (size, packed) in sorted(estimate(db).items() if estimate else ()):
            print(f"  {name}: {size:,} bytes, {packed:,.0f} estimated packed ({size / packed:.2f})")
    store.close()
    report(url, attempts(url), empty, args.reindex)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000, help="plain tasks (and half as many actor calls)")
    parser.add_argument("--reindex", action="store_true", help="the bytes after REINDEX too")
    parser.add_argument("--settle", type=float, default=0.0, help="seconds serve runs on after the stream")
    args = parser.parse_args()
    server = PostgresServer()
    try:
        with tempfile.TemporaryDirectory(prefix="store-live-pg-") as tmp:
            return measure(args, server, Path(tmp))
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
