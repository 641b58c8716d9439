"""The store on PostgreSQL against SQLite, same run: ingest rate with one and two `serve` processes,
and `list tasks` latency over 1,000,000 stored attempts.

The events are bench_store's (Ray 2.60's task shapes, three per attempt, POSTs of 1,000 sent one at
a time per client). PostgreSQL is the machine's server started by tests/helpers/postgres.py in a
temporary folder on this machine, so its CPU is counted in the machine's two cores; it runs with
`synchronous_commit=off` and `fsync=off` (a commit waits for no disk, as SQLite's WAL with
`synchronous=NORMAL` waits for none per commit). Rows:

* `serve` on SQLite, one process (the baseline);
* `serve` on PostgreSQL, one process; then two processes on one database, each fed half the
  POSTs by its own client at once (wall time until both clients' reads return; an attempt's three
  events may straddle two POSTs, so some rows are folded by both processes). CPU is of the serve
  processes and every PostgreSQL backend;
* the same three rows with an attempt's three pieces in three consecutive POSTs, as a cluster
  sends them (bench_store's (b') POSTs; with two processes every other POST goes to each, as a
  load balancer deals them, so an attempt's pieces are folded by both);
* `list tasks` (bench_store's queries, through `StoreViews` as `/api/v0/tasks` answers them) over
  1,000,000 attempts, median of 5. They are not sent through HTTP (3,000,000 events would take
  longer than the rest of `make bench`): the first 1,000 are folded by the store, the others are
  copies of them made in SQL with their own task and event ids (bench_store's attempt i differs
  from attempt i % 1,000 in nothing else), the indexes built afterwards and the table vacuumed.

Targets: >= 30,000 events/s with two processes; list <= 200 ms.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_aggregator import read_ready_line, tree_cpu_seconds  # noqa: E402
from bench_store import (  # noqa: E402
    _CLIENT,
    batches,
    ingest_through_serve,
    listing_lines,
    query_latency,
    spread_batches,
)
from helpers.postgres import PostgresServer  # noqa: E402

from ray_otel_events.store.postgres_store import _ID_STORED_SQL, _ID_TEXT_SQL, PostgresStore  # noqa: E402
from ray_otel_events.store.row_packing import pack_row, row_json  # noqa: E402
from ray_otel_events.store.views import StoreViews  # noqa: E402


def _postgres_pids(server: PostgresServer) -> list[int]:
    """The server's postmaster (its children, the backends, are counted with it)."""
    return [int((server.data / "postmaster.pid").read_text().split()[0])]


def serve_postgres(
    server: PostgresServer, attempts: int, processes: int, tmp: Path, spread: bool = False
) -> dict[str, float]:
    """`processes` serve processes on one fresh database, each fed 1/processes of the POSTs (every
    other one with two, as a load balancer deals them); with `spread`, bench_store's POSTs holding
    an attempt's three pieces in three consecutive POSTs."""
    name = f"bench{processes}{'_spread' if spread else ''}"
    url = server.new_database(name)
    bodies = [json.dumps(batch) for batch in (spread_batches(attempts) if spread else batches(0, attempts))]
    events = sum(len(json.loads(b)) for b in bodies)
    files = []
    for n in range(processes):
        path = tmp / f"bodies-{name}-{n}.jsonl"
        path.write_text("".join(b + "\n" for b in bodies[n::processes]))
        files.append(path)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ray_otel_events",
                "serve",
                "--store",
                url,
                "--spool",
                str(tmp / f"sp-{name}-{n}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for n in range(processes)
    ]
    try:
        addresses = ["http://" + read_ready_line(proc) for proc in procs]
        serves = [proc.pid for proc in procs]
        database = _postgres_pids(server)
        serve0 = sum(tree_cpu_seconds(pid) for pid in serves)
        database0 = sum(tree_cpu_seconds(pid) for pid in database)
        t0 = time.perf_counter()
        clients = [
            subprocess.Popen(
                [sys.executable, "-c", _CLIENT, address, str(path)], stdout=subprocess.PIPE, text=True
            )
            for address, path in zip(addresses, files, strict=True)
        ]
        for client in clients:
            assert client.wait() == 0
        wall = time.perf_counter() - t0
        serve_cpu = sum(tree_cpu_seconds(pid) for pid in serves) - serve0
        database_cpu = sum(tree_cpu_seconds(pid) for pid in database) - database0
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(60)
    with psycopg.connect(url) as db:  # the exited backends have flushed their counts
        (deadlocks,) = db.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone() or (0,)
    return {
        "deadlocks": deadlocks,
        "events": events,
        "events_per_s": events / wall,
        "cpu_us_per_event": (serve_cpu + database_cpu) / events * 1e6,
        "serve_us": serve_cpu / events * 1e6,
        "database_us": database_cpu / events * 1e6,
    }


TEMPLATES = 1_000  # attempts folded through the store; the rest are copies made in SQL

# bench_store's attempt i differs from attempt i % 1,000 only in its task id (the first 8 bytes
# are i, big-endian) and its event ids (b"d", b"\\0" or b"\\1", then i in 15 bytes, base64): its job
# (i % 20), function (i % 200), node (i % 50) and end (FAILED when i % 10 == 3) repeat every 1,000.
# A copy's row JSON is its template's as stored, packed PACKED_V1 first (without ids: a PACKED_V2
# row's deflate refers to its own task id, even for digits of its times, so the template's text read
# beside a copy's id would not be JSON; SQL cannot pack the copy's own), the same work to read;
# its event ids are kept as the store keeps them (16 bytes each, after their count), its task id
# too (bytes since schema step 13: `_ID_STORED_SQL` of its hex, the template's `hex`).
_COPIES = f"""
INSERT INTO state_rows
SELECT t.resource, e.id, t.attempt, t.session, t.updated + c.n * 1e-3, t.data,
       (SELECT string_agg(decode('10' || p || lpad(to_hex(e.i), 30, '0'), 'hex'), ''::bytea ORDER BY o)
        FROM unnest(ARRAY['64', '00', '01']) WITH ORDINALITY AS q(p, o)),
       t.state, t.job, t.name, t.func, t.node, t.worker, t.kind, t.error, t.start_ms, t.end_ms
FROM templates t
CROSS JOIN generate_series(%(first)s::bigint, %(last)s::bigint) AS c(n)
CROSS JOIN LATERAL (SELECT c.n * %(templates)s::bigint + t.i AS i) n
CROSS JOIN LATERAL (SELECT n.i, lpad(to_hex(n.i), 16, '0') || substr(t.hex, 17) AS id_hex) h
CROSS JOIN LATERAL (SELECT h.i, {_ID_STORED_SQL.format("h.id_hex")} AS id) e
"""


def fill(store: PostgresStore, attempts: int) -> dict[str, float]:
    """`attempts` task rows as bench_store's: TEMPLATES attempts through `ingest` (the fold), the
    others copied from them in SQL with their own ids, the indexes built afterwards (as a restore
    would). Folding 3,000,000 events through HTTP would take longer than the rest of `make bench`."""
    t0 = time.perf_counter()
    for batch in batches(0, TEMPLATES):
        store.ingest(batch)
    folded = time.perf_counter() - t0
    with store._writing() as db:
        indexes = [
            sql
            for (sql,) in db.execute(
                "SELECT indexdef FROM pg_indexes"
                " WHERE tablename = 'state_rows' AND indexname != 'state_rows_pkey'"
            )
        ]
        for sql in indexes:
            db.execute("DROP INDEX " + sql.split(" INDEX ", 1)[1].split(" ON ", 1)[0])
        for ctid, data, *ids in db.execute(
            f"SELECT ctid, data, {store.dialect.row_ids} FROM state_rows"
        ).fetchall():
            db.execute(
                "UPDATE state_rows SET data = %s WHERE ctid = %s", (pack_row(row_json(data, ids)), ctid)
            )
        db.execute("ALTER TABLE state_rows SET (autovacuum_enabled = false)")
        db.execute("ALTER TABLE state_rows DROP CONSTRAINT state_rows_pkey")
        db.execute(
            "CREATE TEMPORARY TABLE templates AS"
            f" SELECT *, ('x' || left(hex, 16))::bit(64)::bigint AS i"
            f" FROM (SELECT *, {_ID_TEXT_SQL.format('entity_id')} AS hex FROM state_rows) s"
        )
        step = 100
        for first in range(1, attempts // TEMPLATES, step):
            last = min(first + step, attempts // TEMPLATES) - 1
            db.execute(_COPIES, {"templates": TEMPLATES, "first": first, "last": last})
        db.execute("SET maintenance_work_mem = '256MB'")
        db.execute("ALTER TABLE state_rows ADD PRIMARY KEY (resource, entity_id, attempt, session)")
        for sql in indexes:
            db.execute(sql)
        # Autovacuum's ANALYZE, started by the fill, holds a snapshot that keeps VACUUM from
        # marking the new pages all-visible (every count would then read the heap): it is off
        # until this VACUUM is done, as it would have long caught up in a store filled over weeks.
        db.execute("VACUUM (FREEZE, ANALYZE) state_rows")
        db.execute("ALTER TABLE state_rows RESET (autovacuum_enabled)")
        db.execute("SELECT nextval('store_generation')")
    return {"folded_s": folded, "fill_s": time.perf_counter() - t0}


def list_latency_postgres(server: PostgresServer, attempts: int) -> dict[str, Any]:
    store = PostgresStore(server.new_database("listing"))
    filled = fill(store, attempts)
    size = store.size()
    latency = query_latency(StoreViews(store))
    store.close()
    return {**filled, "rows": size["state_rows"], "bytes": size["bytes"], "latency_ms": latency}


def _spread_lines(sqlite: dict[str, float], one: dict[str, float], two: dict[str, float]) -> list[str]:
    """The rows of an attempt's pieces in three consecutive POSTs, as a cluster sends them (the
    owner's pieces at submission, the executor's later), each against SQLite fed the same POSTs."""
    base = sqlite["events_per_s"]
    return [
        f"| `serve` on SQLite, an attempt's pieces in three consecutive POSTs (baseline of the next two)"
        f" | {sqlite['events']:,} | {base:,.0f} | 1.00 | {sqlite['cpu_us_per_event']:.1f} (serve only) | |",
        *[
            f"| `serve` on PostgreSQL, {label}, the same POSTs | {row['events']:,}"
            f" | {row['events_per_s']:,.0f} | {row['events_per_s'] / base:.2f}"
            f" | {row['cpu_us_per_event']:.1f} ({serves} {row['serve_us']:.1f},"
            f" PostgreSQL {row['database_us']:.1f}) | {row['deadlocks']} |"
            for label, serves, row in (("one process", "serve", one), ("two processes", "both serve", two))
        ],
    ]


def _load() -> str:
    return " / ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sanity run (5,000 and 20,000 attempts)")
    parser.add_argument("--attempts", type=int, default=None, help="attempts POSTed per ingest row (50,000)")
    parser.add_argument("--listed", type=int, default=None, help="attempts stored for list tasks (1,000,000)")
    args = parser.parse_args()
    args.attempts = args.attempts or (5_000 if args.quick else 50_000)
    args.listed = args.listed or (20_000 if args.quick else 1_000_000)
    load_before = _load()
    server = PostgresServer()
    try:
        with tempfile.TemporaryDirectory(prefix="pgbench-") as name:
            tmp = Path(name)
            sqlite = ingest_through_serve(args.attempts)
            one = serve_postgres(server, args.attempts, 1, tmp)
            two = serve_postgres(server, args.attempts, 2, tmp)
            sqlite_spread = ingest_through_serve(args.attempts, spread=True)
            one_spread = serve_postgres(server, args.attempts, 1, tmp, spread=True)
            two_spread = serve_postgres(server, args.attempts, 2, tmp, spread=True)
        load_ingest = _load()
        listing = list_latency_postgres(server, args.listed)
    finally:
        server.stop()
    base = sqlite["events_per_s"]
    lines = [
        "## store on PostgreSQL (`serve --store postgresql://...`)",
        "",
        f"Command: `python bench/bench_store_postgres.py --attempts {args.attempts} --listed {args.listed}`"
        f" (run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average 1/5/15 min:"
        f" {load_before} before, {load_ingest} after the ingest rows, {_load()} at the end)",
        "",
        __doc__.split("\n\n", 1)[1].strip(),
        "",
        "| ingest | events | events/s | / SQLite | CPU µs/event | deadlocks |",
        "|---|---|---|---|---|---|",
        f"| `serve` on SQLite, one process (baseline) | {sqlite['events']:,} | {base:,.0f} | 1.00"
        f" | {sqlite['cpu_us_per_event']:.1f} (serve only) | |",
        f"| `serve` on PostgreSQL, one process | {one['events']:,} | {one['events_per_s']:,.0f}"
        f" | {one['events_per_s'] / base:.2f} | {one['cpu_us_per_event']:.1f} (serve {one['serve_us']:.1f},"
        f" PostgreSQL {one['database_us']:.1f}) | {one['deadlocks']} |",
        f"| `serve` on PostgreSQL, two processes | {two['events']:,} | {two['events_per_s']:,.0f}"
        f" | {two['events_per_s'] / base:.2f} | {two['cpu_us_per_event']:.1f}"
        f" (both serve {two['serve_us']:.1f}, PostgreSQL {two['database_us']:.1f}) | {two['deadlocks']} |",
        *_spread_lines(sqlite_spread, one_spread, two_spread),
        "",
        "Deadlocks: PostgreSQL's count for the database (`pg_stat_database`), each a batch rolled"
        " back and folded again by its `serve`.",
        "",
        f"- two processes: **{two['events_per_s']:,.0f} events/s** (target >= 30,000):"
        f" **{'met' if two['events_per_s'] >= 30_000 else 'missed'}**.",
        "",
        *listing_lines(
            listing,
            f"`list tasks` over {listing['rows']:,} attempts in PostgreSQL"
            f" (made in {listing['fill_s']:.0f} s)",
            f"database size {listing['bytes'] / 1e6:,.0f} MB, **{listing['bytes'] / listing['rows']:,.0f}"
            " bytes per attempt** (`pg_database_size`: rows with their transitions, 8 indexes, 3 event ids"
            " each).",
        ),
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
