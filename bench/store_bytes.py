"""The SQLite store's bytes per task attempt of bench_soak's stream, folded in one process.

bench_soak's load (workload run E replicated with fresh ids and times) without `serve` or a client:
`--replicas` replicas in POST groups of `--replicas-per-post` (as `serve` gets them) into
`EventStore.ingest_posted` with their bodies kept as raw events, then SQLite's dbstat per table and
index (bench_soak's `sqlite_breakdown`). A quick measure of a schema change, seconds instead of a
soak's minutes; the soak itself gives the figure under load. `--postgres`: the same into
`PostgresStore` on a PostgreSQL server started for the run (tests/helpers/postgres.py), measured by
bench_soak's `postgres_breakdown` (`pg_database_size` as "file", after `VACUUM ANALYZE`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_soak import Replicas, postgres_breakdown, sqlite_breakdown  # noqa: E402

from ray_otel_events.store.posted_body import read_posted  # noqa: E402
from ray_otel_events.store.postgres_store import PostgresStore  # noqa: E402
from ray_otel_events.store.sqlite_store import EventStore  # noqa: E402


def fold(path: Path | str, replicas: int, per_post: int) -> int:
    """Folds the stream into a store at `path` (a PostgreSQL URL: that database); returns the task
    attempts sent."""
    stream = Replicas()
    store: Any = PostgresStore(path) if isinstance(path, str) else EventStore(path)
    now = 1_700_000_000.0
    once = [e for body in stream.once for e in body]
    if once:
        store.ingest(once, now=now)
    for r0 in range(1, replicas + 1, per_post):
        group = [stream.fresh(r) for r in range(r0, min(r0 + per_post, replicas + 1))]
        for index in range(len(stream.templates)):
            body = stream.body(index, group)
            if body == b"[]":
                continue
            posted, invalid = read_posted(body)
            assert not invalid, invalid
            now += 0.01
            store.ingest_posted([posted], now=now, bodies=[body])
    store.close()
    return replicas * stream.attempts_per_replica


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=600)
    parser.add_argument("--replicas-per-post", type=int, default=10)
    parser.add_argument("--keep", help="write the store here (else a temporary file)")
    parser.add_argument("--postgres", action="store_true", help="into PostgreSQL (a server of its own)")
    args = parser.parse_args()
    if args.postgres:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from helpers.postgres import PostgresServer

        server = PostgresServer()
        try:
            url = server.new_database("store_bytes")
            attempts = fold(url, args.replicas, args.replicas_per_post)
            sizes = postgres_breakdown(url)
        finally:
            server.stop()
        show(attempts, sizes, "pg_database_size")
        return 0
    with tempfile.TemporaryDirectory(prefix="store-bytes-") as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "store.sqlite3"
        attempts = fold(path, args.replicas, args.replicas_per_post)
        sizes = sqlite_breakdown(path)
    show(attempts, sizes, "file")
    return 0


def show(attempts: int, sizes: dict[str, int], total: str) -> None:
    print(f"{attempts:,} task attempts: {sizes['file'] / attempts:,.0f} bytes per attempt ({total})")
    for name, value in sorted(sizes.items(), key=lambda kv: -(kv[1] or 0)):
        if name != "file" and value:
            print(f"  {name}: {value / attempts:,.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
