"""`bridge --workers N`: N processes behind one port, RayEvents routed between them by trace id.

The parent binds the public port and one private 127.0.0.1 port per worker, then forks the workers
(before any thread or event loop exists). Every worker accepts on the shared public socket (the
kernel spreads the connections) and decodes what it receives; each RayEvent then goes to the worker
that owns its trace id (`routing_key`, hashed, modulo N) over that worker's private port, guarded by
a secret made at start. The owner converts and assembles: a task's pieces may come on any
connection in any order, its span is still assembled once, and duplicates meet in one de-dup
window. This is the same split a multi-machine deployment makes with the Collector's loadbalancing
exporter (docs/scaling.md), inside one host.

Shutdown (SIGTERM or SIGINT to the parent): 1. every worker stops taking public requests and
finishes those in progress, their forwarding included; 2. once all have, every worker closes its
private port, flushes its open entities (marked incomplete) and drains its queues; 3. the parent
sums the workers' summaries and prints them. Stdout carries the parent's two lines only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import multiprocessing
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from ray_otel_events.config import BridgeConfig
from ray_otel_events.exporters.transport import HttpTransport, WholeBody
from ray_otel_events.metrics import Counters
from ray_otel_events.observability.merged_metrics import merge_expositions
from ray_otel_events.otel.from_ray_events import routing_groups
from ray_otel_events.otel.posted_events import EventParts, decode_pieces, encode_pieces
from ray_otel_events.receivers.otlp_http import QueueFullError
from ray_otel_events.security.http_limits import ServerGuard
from ray_otel_events.security.options import ServerSecurity
from ray_otel_events.services.bridge import BridgeService
from ray_otel_events.services.lifecycle import print_exit_summary, settle_heap

logger = logging.getLogger(__name__)

FORWARD_PATH = "/internal/v1/ray-event-pieces"
PIECES_TYPE = "application/octet-stream"  # encode_pieces' bytes
METRICS_PATH = "/internal/metrics"
SECRET_HEADER = "X-Ray-Otel-Events-Worker-Secret"
READY_TIMEOUT_S = 60.0
FORWARD_TIMEOUT_S = 30.0
FORWARDED = "forwarded_events"  # RayEvents sent to the worker owning their trace id


# -- routing ------------------------------------------------------------------------------------


class TraceIdRouter:
    """Sends each RayEvent that another worker owns to it, before the request is answered."""

    def __init__(self, index: int, peer_urls: list[str], secret: str, records: bool = True) -> None:
        """`records`: the workers write log records (not an assemble-only tier's), so each event
        goes with its record's parts."""
        self.index = index
        self.records = records
        self.peer_urls = peer_urls
        self.secret = secret
        self.counters = Counters("router")
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def forward(self, events: list[EventParts]) -> list[EventParts]:
        """Each event goes to the worker owning its trace id (hashed: it is a digest), with its
        record's body and attributes as read here, so that the owner does not walk it again."""
        groups = routing_groups(events, len(self.peer_urls))
        local = groups[self.index]
        sends = [
            self._send(owner, group) for owner, group in enumerate(groups) if group and owner != self.index
        ]
        if sends:
            self.counters.add(FORWARDED, len(events) - len(local))
            await asyncio.gather(*sends)
        return local

    async def scrape_all(self, own: bytes) -> bytes:
        """Every worker's /metrics as one exposition, each sample labelled with its worker."""
        assert self._session is not None, "start() first"

        async def scrape(index: int) -> tuple[str, bytes | None]:
            # Tried twice: a pooled connection the peer has just closed fails at once (the GET is
            # safe to repeat); a worker that still cannot answer is missing from this scrape.
            for _ in range(2):
                try:
                    async with self._session.get(  # type: ignore[union-attr]
                        self.peer_urls[index] + METRICS_PATH, headers={SECRET_HEADER: self.secret}
                    ) as response:
                        return str(index), await response.read() if response.status == 200 else None
                except aiohttp.ClientConnectionError:
                    continue
                except (TimeoutError, aiohttp.ClientError):
                    break
            return str(index), None

        peers = [i for i in range(len(self.peer_urls)) if i != self.index]
        texts = {str(self.index): own}
        for index, text in await asyncio.gather(*(scrape(i) for i in peers)):
            if text is not None:
                texts[index] = text
        return merge_expositions(dict(sorted(texts.items())))

    async def _send(self, owner: int, events: list[EventParts]) -> None:
        assert self._session is not None, "start() first"
        try:
            async with self._session.post(
                self.peer_urls[owner] + FORWARD_PATH,
                data=WholeBody(encode_pieces(events, self.records), PIECES_TYPE),
                headers={SECRET_HEADER: self.secret, "Content-Type": PIECES_TYPE},
            ) as response:
                if response.status == 200:
                    return
                reason = (await response.text())[:200]
        except (TimeoutError, aiohttp.ClientError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        # The sender retries the whole request; what was already taken is de-duplicated by eventId.
        raise QueueFullError(f"bridge worker {owner} could not take its share: {reason}")


def _private_routes(service: BridgeService, secret: str) -> list[web.RouteDef]:
    async def take_pieces(request: web.Request) -> web.Response:
        if not hmac.compare_digest(request.headers.get(SECRET_HEADER, ""), secret):
            return web.Response(status=401, text="not a bridge worker")
        try:
            events = decode_pieces(await request.read())
        except ValueError as exc:
            return web.Response(status=400, text=f"undecodable pieces: {exc}")
        try:
            await service.consume_ray_events(events, routed=True)
        except QueueFullError as exc:
            return web.Response(status=503, text=exc.reason)
        return web.Response(status=200)

    async def metrics(request: web.Request) -> web.Response:
        if not hmac.compare_digest(request.headers.get(SECRET_HEADER, ""), secret):
            return web.Response(status=401, text="not a bridge worker")
        return web.Response(body=service.metrics.render(), content_type="text/plain")

    return [web.post(FORWARD_PATH, take_pieces), web.get(METRICS_PATH, metrics)]


# -- one worker ---------------------------------------------------------------------------------


@dataclasses.dataclass
class _WorkerArgs:
    index: int
    config: BridgeConfig
    security: ServerSecurity
    transport: HttpTransport | None
    public: socket.socket
    private: socket.socket
    peer_urls: list[str]
    secret: str


def _worker_main(args: _WorkerArgs, conn: Connection) -> None:
    # The parent alone decides when to stop; a terminal's Ctrl-C reaches the whole group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        asyncio.run(_run_worker(args, conn))
    except Exception:
        logger.exception("bridge worker %d failed", args.index)
        sys.exit(1)


def _receive(conn: Connection) -> str:
    """The parent's next command; its death (EOF) means finish now."""
    try:
        return str(conn.recv())
    except (EOFError, OSError):
        return "finish"


async def _run_worker(args: _WorkerArgs, conn: Connection) -> None:
    config = args.config
    service = BridgeService(config, config.otlp("traces"), config.otlp("logs"), args.transport)
    router = TraceIdRouter(args.index, args.peer_urls, args.secret, records=config.mode != "assemble")
    if config.mode != "convert":  # converting alone holds no state: any worker will do
        service.router = router
    app = service.build_app(args.security.token, lambda: router.scrape_all(service.metrics.render()))
    guard = ServerGuard(args.security.limits)  # each worker's memory and descriptors are its own
    service.metrics.add_guard(guard)
    public = guard.runner(app, auto_decompress=False)
    private_app = web.Application(client_max_size=config.max_body_bytes)
    private_app.add_routes(_private_routes(service, args.secret))
    private = guard.runner(private_app)  # loopback and a secret, but its descriptors are the worker's
    await public.setup()
    await private.setup()
    ssl_context = args.security.tls.ssl_context() if args.security.tls else None
    await guard.listen(private, sock=args.private)
    await guard.listen(public, ssl_context=ssl_context, sock=args.public)
    await router.start()
    service.start()
    settle_heap()
    conn.send(("ready", args.index))
    loop = asyncio.get_running_loop()
    command = await loop.run_in_executor(None, _receive, conn)
    await public.cleanup()  # no new public requests; those in progress finish, forwarding included
    if command == "drain":
        conn.send(("drained", args.index))
        await loop.run_in_executor(None, _receive, conn)  # every worker drained: nothing more comes
    await router.close()
    await private.cleanup()
    await service.stop()
    stats = {**service.stats(), "router": router.counters.snapshot()}
    rows = [*service.summary_rows(), ("RayEvents routed to another worker", router.counters.get(FORWARDED))]
    with contextlib.suppress(OSError):
        conn.send(("stats", args.index, stats, rows))


# -- the parent ---------------------------------------------------------------------------------


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def run_workers(
    config: BridgeConfig, security: ServerSecurity, transport: HttpTransport | None, log_format: str
) -> int:
    """Fork `config.workers` bridge processes on one port; returns the exit status."""
    if config.grpc_port is not None:
        print("ray-otel-events bridge: --grpc-port works with --workers 1 only", file=sys.stderr)
        return 2
    workers = config.workers
    try:
        public = _listen(config.host, config.port)
    except OSError as exc:
        print(f"ray-otel-events bridge: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        return 1
    privates = [_listen("127.0.0.1", 0) for _ in range(workers)]
    peer_urls = [f"http://127.0.0.1:{sock.getsockname()[1]}" for sock in privates]
    secret = secrets.token_hex(16)
    context = multiprocessing.get_context("fork")
    conns: list[Connection] = []
    procs: list[Any] = []
    for index in range(workers):
        worker_config = config
        if config.queue_dir:
            worker_config = dataclasses.replace(
                config, queue_dir=os.path.join(config.queue_dir, f"worker-{index}")
            )
        ours, theirs = context.Pipe()
        args = _WorkerArgs(
            index, worker_config, security, transport, public, privates[index], peer_urls, secret
        )
        proc = context.Process(target=_worker_main, args=(args, theirs), name=f"bridge-worker-{index}")
        proc.start()
        theirs.close()
        conns.append(ours)
        procs.append(proc)
    port = public.getsockname()[1]
    public.close()
    for sock in privates:
        sock.close()
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _supervise(config, port, procs, conns, stop, log_format)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _supervise(
    config: BridgeConfig,
    port: int,
    procs: list[Any],
    conns: list[Connection],
    stop: threading.Event,
    log_format: str,
) -> int:
    workers = len(procs)
    failed = False
    if len(_collect(conns, procs, "ready", READY_TIMEOUT_S, stop.is_set)) < workers and not stop.is_set():
        print("ray-otel-events bridge: a worker failed to start (see the log above)", file=sys.stderr)
        failed = True
    else:
        logger.info("bridge ready: %d workers on %s:%d", workers, config.host, port)
        print(f"listening http={config.host}:{port}", flush=True)
        while not stop.wait(0.2):
            if dead := [p.name for p in procs if not p.is_alive()]:
                logger.error("bridge worker(s) %s died: stopping the others", ", ".join(dead))
                failed = True
                break
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.send("drain")
    _collect(conns, procs, "drained", config.shutdown_flush_timeout_s + 30)
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.send("finish")
    reports = _collect(conns, procs, "stats", config.shutdown_flush_timeout_s + 30)
    for proc in procs:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    if failed:
        return 1
    stats: dict[str, Any] = {"workers": workers}
    rows: dict[str, int | float] = {}
    for _, _, worker_stats, worker_rows in (reports[i] for i in sorted(reports)):
        merge_stats(stats, worker_stats)
        for label, value in worker_rows:
            rows[label] = rows.get(label, 0) + value
    logger.info("bridge stopped")
    print_exit_summary("bridge", [("workers", workers), *rows.items()], stats, log_format)
    return 0 if len(reports) == workers else 1


def merge_stats(into: dict[str, Any], other: dict[str, Any]) -> None:
    """Sum two workers' stats: numbers, nested dicts, and counter series (summed by labels)."""
    for key, value in other.items():
        if isinstance(value, dict):
            merge_stats(into.setdefault(key, {}), value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            into[key] = into.get(key, 0) + value
        elif isinstance(value, list) and key in into:
            into[key] = _merge_series(into[key], value)
        else:
            into.setdefault(key, value)


def _merge_series(a: list[Any], b: list[Any]) -> list[Any]:
    """Counters.snapshot() series: [{"labels": {...}, "value": n}], summed per label set."""
    summed: dict[str, dict[str, Any]] = {}
    for item in [*a, *b]:
        if not (isinstance(item, dict) and "labels" in item and "value" in item):
            return a  # not a counter series: keep the first worker's
        labels = orjson.dumps(item["labels"], option=orjson.OPT_SORT_KEYS).decode()
        entry = summed.setdefault(labels, {"labels": item["labels"], "value": 0})
        entry["value"] += item["value"]
    return [summed[k] for k in sorted(summed)]


def _collect(
    conns: list[Connection],
    procs: list[Any],
    kind: str,
    timeout_s: float,
    give_up: Callable[[], bool] = lambda: False,
) -> dict[int, tuple[Any, ...]]:
    """Messages of `kind` from every worker, until all sent one, one died, or time ran out."""
    got: dict[int, tuple[Any, ...]] = {}
    end = time.monotonic() + timeout_s
    while len(got) < len(conns) and time.monotonic() < end and not give_up():
        for conn in wait([c for i, c in enumerate(conns) if i not in got], timeout=0.2):
            index = conns.index(conn)  # type: ignore[arg-type]
            try:
                message = conns[index].recv()
            except (EOFError, OSError):
                got.setdefault(index, ("gone",))
                continue
            if message[0] == kind:
                got[index] = message
        if any(not p.is_alive() and i not in got for i, p in enumerate(procs)):
            break
    return {i: m for i, m in got.items() if m[0] == kind}
