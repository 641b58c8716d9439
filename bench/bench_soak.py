"""Soak: sustained load into `serve` (SQLite, PostgreSQL) and the bridge; is memory flat, is nothing lost?

The load is a real Ray 2.60 stream: the 14 POST bodies of workload run E
(tests/fixtures/ray-2.60/raw/runE: 120 events, 23 task attempts, tasks, actors, workers, a job)
replicated with fresh ids: in replica r every task, actor, worker, job, placement group and event
id is a new one (a hash of the old id and r, the job id inside task and actor ids kept consistent)
and every time is moved r x 20 ms later (distinct timestamps, in the run's order within a replica);
the node and session are the cluster's one (its NODE_* events are sent once). A POST holds the same
body of `--replicas-per-post` consecutive replicas, so an attempt's pieces arrive in several POSTs
as a cluster sends them. One client process paces the POSTs at `--rate` events/s (plain JSON, one
keep-alive connection: inside every default of README's limits table) for `--minutes` per target:

* `serve` on SQLite;
* `serve` on PostgreSQL (the machine's server, tests/helpers/postgres.py: fsync off);
* the bridge, its OTLP and JSON outputs going to bench_bridge's counting sink.

Every few seconds the RSS of each process involved (serve and its children, every PostgreSQL
process, the bridge and its workers) is sampled from /proc (anonymous and file-backed apart: the
store's mapped pages are file-backed, given back under pressure, and bounded by `mmap_size`).
Reported: RSS after warm-up (the first third of the run: the last 20 of 30 minutes) as
min/median/max per window, with the slope of a least-squares line, and `serve`'s fold queue beside
it (events answered and not yet folded, from its /metrics: the queue filling to its bound is not a
leak); events sent against stored (distinct task attempts in the store,
and events in its kept raw blocks) or forwarded (log records at the sink); CPU µs per event; and
the store's bytes per task attempt with where they go (SQLite's dbstat, PostgreSQL's relation sizes).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import hashlib
import json
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from ray_otel_events.store import raw_events  # noqa: E402

RUN = HERE.parent / "tests" / "fixtures" / "ray-2.60" / "raw" / "runE"
SAMPLE_S = 5.0
_ID_KEY = re.compile(r"(Id|Ids)$")


# -- the load ------------------------------------------------------------------------------------


def _bodies() -> list[list[dict[str, Any]]]:
    return [json.loads(path.read_bytes()) for path in sorted(RUN.glob("*.body"))]


def _ids(value: Any, key: str = "") -> Iterator[str]:
    """Every id text (base64) in an event, except node ids (the cluster's one node)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _ids(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _ids(v, key)
    elif isinstance(value, str) and value and _ID_KEY.search(key) and not key.endswith(("nodeId", "NodeId")):
        yield value


REPLICA_SPACING_NS = 20_000_000  # replica r happens r x 20 ms after the captured run
_TIME = re.compile(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z|\d{19})"')


def _nanoseconds(text: str) -> int:
    if text.isdigit():
        return int(text)
    whole, _, fraction = text[:-1].partition(".")
    seconds = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.UTC).timestamp()
    return int(seconds) * 10**9 + int(fraction)


def _time_text(ns: int, like: str) -> str:
    """`ns` written as `like` is (nanoseconds as digits, or RFC 3339 with nanoseconds)."""
    if like.isdigit():
        return str(ns)
    seconds, fraction = divmod(ns, 10**9)
    whole = datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{fraction:09d}Z"


class Replicas:
    """The run's bodies as text with every id a slot, filled per replica."""

    def __init__(self) -> None:
        bodies = _bodies()
        self.attempts_per_replica = len(
            {
                (e[k]["taskId"], e[k].get("taskAttempt", 0))
                for body in bodies
                for e in body
                for k in ("taskDefinitionEvent", "taskLifecycleEvent", "actorTaskDefinitionEvent")
                if k in e
            }
        )
        ids = sorted({i for body in bodies for e in body for i in _ids(e)}, key=len, reverse=True)
        self.raw = {i: base64.b64decode(i) for i in ids}
        # Every time (RFC 3339 with nanoseconds, or nanoseconds as a string) is a slot too, moved
        # by REPLICA_SPACING_NS a replica: distinct timestamps, in the run's order within a replica.
        texts = {t for body in bodies for t in _TIME.findall(json.dumps(body))}
        self.times = {t: _nanoseconds(t) for t in texts}
        ids += sorted(texts, key=len, reverse=True)
        self.jobs = {b for b in self.raw.values() if len(b) == 4}
        self.once = [[e for e in body if e["eventType"].startswith("NODE_")] for body in bodies]
        kept = [[e for e in body if not e["eventType"].startswith("NODE_")] for body in bodies]
        self.events_per_replica = sum(len(b) for b in kept)
        pattern = re.compile("|".join(re.escape(json.dumps(i)) for i in ids))
        self.templates: list[list[str]] = []  # text, id, text, id, ..., text (inside the brackets)
        for body in kept:
            text = json.dumps(body, separators=(",", ":"))[1:-1]
            parts: list[str] = []
            last = 0
            for m in pattern.finditer(text):
                parts += [text[last : m.start() + 1], m.group(0)[1:-1]]
                last = m.end() - 1
            parts.append(text[last:])
            self.templates.append(parts)

    def _new_id(self, old: bytes, r: int) -> bytes:
        mask = r.to_bytes(4, "little")
        if len(old) == 4:
            return bytes(a ^ b for a, b in zip(old, mask, strict=True))
        head = hashlib.blake2b(old + r.to_bytes(8, "big"), digest_size=min(8, len(old) - 4)).digest()
        tail = old[len(head) :]
        if old[-4:] in self.jobs:
            tail = tail[:-4] + bytes(a ^ b for a, b in zip(old[-4:], mask, strict=True))
        return head + tail

    def fresh(self, r: int) -> dict[str, str]:
        """Replica r's id for each id of the run."""
        fresh = {i: base64.b64encode(self._new_id(b, r)).decode() for i, b in self.raw.items()}
        shift = r * REPLICA_SPACING_NS
        for text, ns in self.times.items():
            fresh[text] = _time_text(ns + shift, text)
        return fresh

    def body(self, index: int, replicas: list[dict[str, str]]) -> bytes:
        """POST body `index` of each of `replicas` (their `fresh` ids), as one JSON array."""
        items: list[str] = []
        for fresh in replicas:
            parts = self.templates[index]
            if len(parts) == 1 and not parts[0]:
                continue
            items.append("".join(p if n % 2 == 0 else fresh[p] for n, p in enumerate(parts)))
        return ("[" + ",".join(items) + "]").encode()


def client(address: str, path: str, rate: float, seconds: float, per_post: int, out: str) -> None:
    """Paces the POSTs; writes what it sent (and every answer that was not a 200) to `out`."""
    import requests

    replicas = Replicas()
    session = requests.Session()
    counts = {"events": 0, "posts": 0, "replicas": 0, "503": 0, "errors": 0, "behind_s": 0.0}
    once = [e for body in replicas.once for e in body]
    if once:
        r = session.post(address + path, data=json.dumps(once), headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        counts["events"] += len(once)
        counts["posts"] += 1
    round_events = replicas.events_per_replica * per_post
    period = round_events / rate
    t0 = time.monotonic()
    r0 = 1
    while time.monotonic() - t0 < seconds:
        due = t0 + counts["replicas"] / per_post * period
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        else:
            counts["behind_s"] = max(counts["behind_s"], now - due)
        group = [replicas.fresh(r) for r in range(r0, r0 + per_post)]
        for index in range(len(replicas.templates)):
            data = replicas.body(index, group)
            if data == b"[]":
                continue
            while True:
                try:
                    r = session.post(address + path, data=data, headers={"Content-Type": "application/json"})
                except requests.ConnectionError:
                    counts["errors"] += 1
                    time.sleep(0.1)
                    continue
                if r.status_code == 503:
                    counts["503"] += 1
                    time.sleep(float(r.headers.get("Retry-After", "1")))
                    continue
                if r.status_code != 200:
                    counts["errors"] += 1
                    raise SystemExit(f"POST answered {r.status_code}: {r.text[:300]}")
                break
            counts["posts"] += 1
        counts["events"] += round_events
        counts["replicas"] += per_post
        r0 += per_post
    counts["seconds"] = time.monotonic() - t0
    counts["attempts"] = counts["replicas"] * replicas.attempts_per_replica
    Path(out).write_text(json.dumps(counts))


# -- sampling ------------------------------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    out = [pid]
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                out += _tree(int(child))
    return out


def _status(pid: int) -> dict[str, int]:
    found = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                found[key] = int(value.split()[0]) * 1024
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                found["Pss"] = int(line.split()[1]) * 1024
    return found


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


QUEUE_GAUGE = "ray_otel_events_serve_unfolded_events"  # serve's /metrics: answered, not yet folded


def _unfolded(address: str) -> float | None:
    """serve's fold queue (events answered 200 and not yet folded), from its /metrics."""
    import urllib.request

    with (
        contextlib.suppress(OSError, ValueError),
        urllib.request.urlopen(address + "/metrics", timeout=5) as answer,
    ):
        for line in answer.read().decode().splitlines():
            if line.startswith(QUEUE_GAUGE + " "):
                return float(line.split()[1])
    return None


class Sampler(threading.Thread):
    """RSS of named process groups every SAMPLE_S: {group: [(t, main RSS, anon, file, group PSS)]};
    with `queue_of` (serve's address), the fold's queue beside it: [(t, events unfolded)], what
    tells the queue filling to its bound from a leak."""

    def __init__(self, groups: dict[str, int], queue_of: str | None = None) -> None:
        super().__init__(daemon=True)
        self.groups = groups
        self.queue_of = queue_of
        self.samples: dict[str, list[tuple[float, int, int, int, int]]] = {g: [] for g in groups}
        self.queue: list[tuple[float, float]] = []
        self.halt = threading.Event()
        self.t0 = time.monotonic()

    def sample(self) -> None:
        t = time.monotonic() - self.t0
        for group, pid in self.groups.items():
            main = _status(pid)
            pss = sum(_status(p).get("Pss", 0) for p in _tree(pid))
            self.samples[group].append(
                (t, main.get("VmRSS", 0), main.get("RssAnon", 0), main.get("RssFile", 0), pss)
            )
        if self.queue_of is not None and (unfolded := _unfolded(self.queue_of)) is not None:
            self.queue.append((t, unfolded))

    def run(self) -> None:
        while not self.halt.wait(SAMPLE_S):
            self.sample()

    def cpu(self) -> float:
        return sum(_cpu(_tree(pid)) for pid in self.groups.values())


def windows(points: list[tuple[float, int]], seconds: float, window_s: float) -> dict[str, Any]:
    """After warm-up (the first third: on a loaded machine serve's queue took ~17 of 30 minutes to
    fill): min/median/max MiB per window, and the slope in MiB/min."""
    warm = seconds / 3
    kept = [(t, v / 2**20) for t, v in points if t >= warm]
    rows = []
    start = warm
    while start < seconds - 1e-6:
        inside = [v for t, v in kept if start <= t < start + window_s]
        if inside:
            rows.append((start / 60, min(inside), statistics.median(inside), max(inside)))
        start += window_s
    slope = 0.0
    if len(kept) > 2:
        mt = statistics.fmean(t for t, _ in kept)
        mv = statistics.fmean(v for _, v in kept)
        den = sum((t - mt) ** 2 for t, _ in kept)
        slope = sum((t - mt) * (v - mv) for t, v in kept) / den * 60 if den else 0.0
    first = points[0][1] / 2**20 if points else 0.0
    return {"first": first, "rows": rows, "slope": slope, "peak": max((v for _, v in kept), default=0.0)}


# -- the targets ---------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAY_OTEL_EVENTS_"))}


def _start(argv: list[str]) -> tuple[subprocess.Popen[str], str]:
    from bench_aggregator import read_ready_line

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    return proc, "http://" + read_ready_line(proc)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


def _drain_stderr(proc: subprocess.Popen[str], keep: list[str]) -> None:
    """The server's log is read as it comes (a full pipe would stop it); the last lines are kept."""

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            keep.append(line)
            del keep[:-50]

    threading.Thread(target=read, daemon=True).start()


def _load(
    address: str, path: str, args: argparse.Namespace, tmp: Path, groups: dict[str, int]
) -> dict[str, Any]:
    out = tmp / f"client-{len(list(tmp.glob('client-*')))}.json"
    sampler = Sampler(groups, address if "serve" in groups else None)
    sampler.sample()
    cpu0 = sampler.cpu()
    sampler.start()
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--client",
            address,
            path,
            str(args.rate),
            str(args.minutes * 60),
            str(args.replicas_per_post),
            str(out),
        ],
        capture_output=True,
        text=True,
        env=_env(),
    )
    if done.returncode != 0:
        sampler.halt.set()
        raise RuntimeError(f"client failed: {done.stderr[-2000:]}")
    sent = json.loads(out.read_text())
    return {"sent": sent, "sampler": sampler, "cpu0": cpu0}


def _finish(run: dict[str, Any]) -> dict[str, Any]:
    sampler: Sampler = run.pop("sampler")
    sampler.halt.set()
    sampler.join()
    sampler.sample()  # just after the load
    run["cpu_s"] = sampler.cpu() - run.pop("cpu0")
    run["samples"] = sampler.samples
    run["queue"] = sampler.queue
    return run


def _read_back(address: str) -> None:
    """A state read waits until every answered event is folded."""
    import requests

    r = requests.get(address + "/api/v0/tasks", params={"limit": "1"}, timeout=600)
    assert r.status_code == 200, r.text


def _raw_events(blobs: Iterator[bytes]) -> int:
    return sum(raw_events.decompress(blob).count(b'"eventId"') for blob in blobs)


def sqlite_breakdown(path: Path) -> dict[str, int]:
    """Bytes per table and index (dbstat), and the file's: SQLite's counterpart of `postgres_breakdown`."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    try:
        sizes = dict(db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
    except sqlite3.OperationalError:  # no dbstat in this build
        sizes = {}
    for column in ("data", "event_ids"):
        (sizes[f"  state_rows.{column} (bytes of values)"],) = db.execute(
            f"SELECT SUM(length(CAST({column} AS BLOB))) FROM state_rows"
        ).fetchone()
    (sizes["  raw_events.data (bytes of values)"],) = db.execute(
        "SELECT SUM(length(data)) FROM raw_events"
    ).fetchone()
    db.close()
    sizes["file"] = path.stat().st_size
    return sizes


def _count_sqlite(path: Path) -> dict[str, int]:
    db = sqlite3.connect(path)
    # tasks' rows: the resource's name before schema 6, its number (sqlite_store.RESOURCE_NUMBERS) since
    (attempts,) = db.execute("SELECT COUNT(*) FROM state_rows WHERE resource IN ('tasks', 1)").fetchone()
    raw = _raw_events(blob for (blob,) in db.execute("SELECT data FROM raw_events"))
    db.close()
    return {"attempts": attempts, "raw_events": raw}


def _serve(args: argparse.Namespace) -> list[str]:
    """The command that starts `serve`: through soak_probe.py with `--probe` (its lines to the file)."""
    if not args.probe:
        return [sys.executable, "-m", "ray_otel_events", "serve"]
    os.environ["PROBE_OUT"] = str(Path(args.probe).resolve())  # _env passes it to serve
    return [sys.executable, str(HERE / "soak_probe.py"), "serve"]


def run_sqlite(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    store = tmp / "soak.sqlite3"
    proc, address = _start([*_serve(args), "--store", str(store)])
    log: list[str] = []
    _drain_stderr(proc, log)
    try:
        run = _load(address, "/v1/ray-events", args, tmp, {"serve": proc.pid})
        _read_back(address)
        run = _finish(run)
    finally:
        _stop(proc)
    run["stored"] = _count_sqlite(store)
    run["bytes"] = sqlite_breakdown(store)
    run["log"] = log[-5:]
    return run


_PG_SIZES = """
SELECT c.relname,
       CASE c.relkind WHEN 'r' THEN pg_table_size(c.oid) ELSE pg_relation_size(c.oid) END,
       c.relkind
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')
"""


def postgres_breakdown(url: str) -> dict[str, int]:
    """Bytes per table (with its TOAST, without its indexes) and per index, and the database's."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute("VACUUM ANALYZE")
        sizes = {
            f"{name}{' (index)' if kind == 'i' else ''}": size for name, size, kind in db.execute(_PG_SIZES)
        }
        for column in ("data", "event_ids"):
            (sizes[f"  state_rows.{column} (bytes of values)"],) = db.execute(
                f"SELECT SUM(pg_column_size({column})) FROM state_rows"
            ).fetchone()
        (sizes["  raw_events.data (bytes of values)"],) = db.execute(
            "SELECT SUM(pg_column_size(data)) FROM raw_events"
        ).fetchone()
        (sizes["file"],) = db.execute("SELECT pg_database_size(current_database())").fetchone()
    return {k: int(v or 0) for k, v in sizes.items()}


def run_postgres(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import psycopg
    from helpers.postgres import PostgresServer

    server = PostgresServer()  # in a folder of its own (its user cannot enter `tmp`)
    try:
        url = server.url
        postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
        proc, address = _start([*_serve(args), "--store", url, "--spool", str(tmp / "spool")])
        log: list[str] = []
        _drain_stderr(proc, log)
        try:
            run = _load(address, "/v1/ray-events", args, tmp, {"serve": proc.pid, "postgres": postmaster})
            _read_back(address)
            run = _finish(run)
        finally:
            _stop(proc)
        with psycopg.connect(url) as db:
            (attempts,) = db.execute("SELECT COUNT(*) FROM state_rows WHERE resource = 'tasks'").fetchone()
            raw = _raw_events(bytes(blob) for (blob,) in db.execute("SELECT data FROM raw_events"))
        run["stored"] = {"attempts": attempts, "raw_events": raw}
        run["bytes"] = postgres_breakdown(url)
        run["log"] = log[-5:]
        return run
    finally:
        server.stop()


def run_bridge(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import requests

    sink, sink_address = _start([sys.executable, str(HERE / "bench_bridge.py"), "--count-sink"])
    try:
        bridge, address = _start(
            [
                sys.executable,
                "-m",
                "ray_otel_events",
                "bridge",
                "--export-addr",
                sink_address + "/events",
                "--spans-export-addr",
                sink_address + "/records",
                "--otlp-endpoint",
                sink_address,
            ]
        )
        log: list[str] = []
        _drain_stderr(bridge, log)
        try:
            run = _load(address, "/v1/ray-events", args, tmp, {"bridge": bridge.pid})
            want = run["sent"]["events"]
            deadline = time.monotonic() + 300
            counts: dict[str, int] = {}
            while time.monotonic() < deadline:
                counts = requests.get(sink_address + "/count", timeout=30).json()
                if counts["log_records"] >= want:
                    break
                time.sleep(1)
            run = _finish(run)
        finally:
            _stop(bridge)
        run["forwarded"] = requests.get(sink_address + "/count", timeout=30).json()
        run["log"] = log[-5:]
        return run
    finally:
        _stop(sink)


# -- the report ----------------------------------------------------------------------------------

_SERVE_BOUNDS = (
    "POST bodies answered and not yet folded (`RAY_OTEL_EVENTS_STORE_MAX_PENDING_BYTES`, 64 MiB, and"
    " 200,000 events): what grows while the fold is behind the stream; the fold's id cache"
    " (`state_merge.hex_id`, 65,536 ids); request bodies in flight (`RAY_OTEL_EVENTS_MAX_BODIES_BYTES`,"
    " 256 MiB); connections (`RAY_OTEL_EVENTS_MAX_CONNECTIONS`, 4,096); freed blocks of 128 KiB and"
    " more given back to the system (`RAY_OTEL_EVENTS_MMAP_THRESHOLD_BYTES`: with glibc's sliding"
    " threshold the heap kept the holes of freed bodies, +13 MiB/min)"
)
BOUNDS = {
    "serve (SQLite)": (
        _SERVE_BOUNDS + "; SQLite's page caches (`cache_size`: the store's connection and the compiled"
        " row writer's 64 MiB each, the compiled fold's reader's 16 MiB; SQLite's own allocations,"
        " `sqlite3_memory_used`, measured level at 68-72 MiB through 10 minutes: the mapped file serves"
        " most reads); the file"
        " mapped (`mmap_size` 2 GiB): file-backed pages, counted in RSS as they are touched, the"
        " kernel's to drop under pressure"
    ),
    "serve (PostgreSQL)": (
        _SERVE_BOUNDS + "; PostgreSQL's `shared_buffers` (its default, 128 MiB), counted in the PSS of"
        " its processes as they touch it"
    ),
    "bridge": (
        "entities still open (an actor or worker alive, a task not ended): at most"
        " `RAY_OTEL_EVENTS_BRIDGE_MAX_OPEN_ENTITIES` (100,000) and `..._MAX_OPEN_BYTES` (256 MiB), each"
        " dropped `..._ENTITY_TTL_SECONDS` (600 s) after its last event, so under a steady stream they"
        " grow for the first 10 minutes and then stay level; the duplicate filter (`..._DEDUP_WINDOW`,"
        " 200,000 ids); the export queue (`..._QUEUE_SIZE` 100,000, `..._QUEUE_BYTES` 256 MiB); request"
        " bodies in flight (`RAY_OTEL_EVENTS_MAX_BODIES_BYTES`)"
    ),
}


def _mib(v: float) -> str:
    return f"{v:,.0f}"


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    window_s = 300.0 if args.minutes >= 15 else 60.0
    seconds = args.minutes * 60
    lines = [
        "## soak",
        "",
        f"Command: `{command}`",
        "",
        __doc__.split("\n\n", 1)[1].strip(),
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, shared with other sessions' tests and live"
        " Ray clusters while this ran (the figures of one run on a noisy machine, not a quiet one's).",
        "",
    ]
    for target, run in results.items():
        sent = run["sent"]
        lines += [
            f"### {target}",
            "",
            f"- sent: {sent['events']:,} events ({sent['attempts']:,} task attempts) in {sent['posts']:,}"
            f" POSTs over {sent['seconds'] / 60:.1f} min ({sent['events'] / sent['seconds']:,.0f} events/s;"
            f" the client was at most {sent['behind_s']:.1f} s behind its pace; 503s {sent['503']},"
            f" connection errors {sent['errors']})",
        ]
        if "stored" in run:
            stored = run["stored"]
            lost_a = sent["attempts"] - stored["attempts"]
            lost_e = sent["events"] - stored["raw_events"]
            verdict = (
                "nothing lost"
                if lost_a == 0 and lost_e == 0
                else f"{lost_a:,} attempts, {lost_e:,} events missing"
            )
            lines.append(
                f"- stored: {stored['attempts']:,} task attempts, {stored['raw_events']:,} raw events kept:"
                f" **{verdict}**"
            )
            size = run["bytes"]
            per = size["file"] / max(stored["attempts"], 1)
            lines.append(
                f"- store: {size['file'] / 1e6:,.1f} MB, **{per:,.0f} bytes per task attempt** (this stream:"
                f" {sent['events'] / max(sent['attempts'], 1):.2f} events per attempt, raw events kept);"
                " where, per attempt:"
                + "; ".join(
                    f" {name} {value / max(stored['attempts'], 1):,.0f}"
                    for name, value in sorted(size.items(), key=lambda kv: -kv[1])
                    if name != "file" and value
                )
            )
        if "forwarded" in run:
            fwd = run["forwarded"]
            lost = sent["events"] - fwd["log_records"]
            verdict = "nothing lost" if lost == 0 else f"{lost:,} events missing"
            lines.append(
                f"- forwarded: {fwd['log_records']:,} log records, {fwd['spans']:,} spans,"
                f" {fwd['json_items']:,} JSON items: **{verdict}**"
                " (one log record per event)"
            )
        lines.append(f"- CPU: {run['cpu_s'] / sent['events'] * 1e6:.1f} µs per event (every process sampled)")
        lines.append(f"- what bounds memory: {BOUNDS[target]}")
        lines += [
            "",
            "| process | at start | window (min from start) | min | median | max | MiB |",
            "|---|---|---|---|---|---|---|",
        ]
        for group, samples in run["samples"].items():
            for label, column in (("RSS", 1), ("RSS anon", 2), ("RSS file", 3), ("PSS (with children)", 4)):
                w = windows([(s[0], s[column]) for s in samples], seconds, window_s)
                for start, lo, med, hi in w["rows"]:
                    lines.append(
                        f"| {group} {label} | {_mib(w['first'])} | {start:.0f}-{start + window_s / 60:.0f}"
                        f" | {_mib(lo)} | {_mib(med)} | {_mib(hi)} | |"
                    )
                lines.append(
                    f"| {group} {label} | | slope after warm-up | | **{w['slope']:+.2f} MiB/min** |"
                    f" | just after: {_mib(samples[-1][column] / 2**20)} |"
                )
        queue = run.get("queue") or []
        if queue:
            w = windows([(t, int(v * 2**20)) for t, v in queue], seconds, window_s)  # events, not bytes
            for start, lo, med, hi in w["rows"]:
                lines.append(
                    f"| serve's fold queue (events unfolded) | | {start:.0f}-{start + window_s / 60:.0f}"
                    f" | {lo:,.0f} | {med:,.0f} | {hi:,.0f} | events |"
                )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        _, _, address, path, rate, seconds, per_post, out = sys.argv
        client(address, path, float(rate), float(seconds), int(per_post), out)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="of load per target (default 30)")
    parser.add_argument("--rate", type=float, default=5000.0, help="events/s (default 5,000)")
    parser.add_argument("--replicas-per-post", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="one minute per target, a sanity check")
    parser.add_argument(
        "--only", action="append", choices=("sqlite", "postgres", "bridge"), help="run only these targets"
    )
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument(
        "--probe", help="run serve through soak_probe.py, its lines (SQLite's memory, the heap) to this file"
    )
    args = parser.parse_args()
    if args.quick:
        args.minutes = 1.0
    command = "python bench/bench_soak.py" + (" --quick" if args.quick else f" --minutes {args.minutes:g}")
    if args.rate != 5000.0:
        command += f" --rate {args.rate:g}"
    targets = {
        "sqlite": ("serve (SQLite)", run_sqlite),
        "postgres": ("serve (PostgreSQL)", run_postgres),
        "bridge": ("bridge", run_bridge),
    }
    results: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for key, (label, run) in targets.items():
        if args.only and key not in args.only:
            continue
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            try:
                results[label] = run(args, Path(tmp))
            except Exception as exc:  # the other targets still run and report
                failed[label] = f"{type(exc).__name__}: {exc}"
        print(f"{label}: {failed.get(label, 'done')}", file=sys.stderr, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, default=str))
    print(report(results, args, command))
    for label, reason in failed.items():
        print(f"### {label}\n\nFAILED: {reason}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
