"""What any client may hold of an HTTP server: memory, connections and time, set by the operator.

One `ServerGuard` a server process (shared by its ports) gives:

* a budget for the bytes of every request body in flight, wire and inflated bytes both
  (`receivers/http_body.read_body` charges it as it reads; past it, 503 with Retry-After and the
  connection closed), given back when the request's handler returns (and, once much came back,
  glibc's heap trimmed, so that RSS falls back after a burst instead of staying at its peak);
* the whole body within `body_timeout_s` (`read_body`: 408 and the connection closed);
* idle connections, and those whose request head is not complete, closed `idle_timeout_s` after
  they opened or after their last answer (aiohttp's keep-alive timer, which runs from the
  connection's opening too, and fires only while no request is being handled); a TLS handshake
  gets the same time;
* at most `max_connections` open connections: one past it is answered 503 with Retry-After and
  closed at once, so the descriptors stay for the work already admitted (and the soft descriptor
  limit is raised, within the hard one, to hold the cap and a reserve);
* malformed requests (aiohttp's parser refuses them before any handler, token check included)
  counted and logged one line per interval by `ClientErrors`, without aiohttp's traceback.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import resource
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ray_otel_events.config import ServerLimitsConfig
from ray_otel_events.security.client_errors import (
    BODIES_BUDGET,
    BODY_CUT_SHORT,
    MALFORMED_HTTP,
    SLOW_BODY,
    TOO_MANY_CONNECTIONS,
    ClientErrors,
)

logger = logging.getLogger(__name__)

BODY_TICKET = "ray_otel_events.body_ticket"  # the request's share of the budget (request[...])
RETRY_AFTER_S = 1
FD_RESERVE = 256  # descriptors kept beyond the connections: store, spool, gRPC port, threads
REFUSED_CONNECTIONS = "refused_connections"  # counter (the guard's `counters`)
# After answering a request whose body it did not read (a refusal), aiohttp reads and drops the
# rest for this long, so the client sees the answer rather than a reset, then closes (its 10 s
# would let a client hold a refused connection five times as long).
LINGER_S = 2.0
TRIM_AFTER_BYTES = 64 * 1024 * 1024
TRIM_DELAY_S = 0.5


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim (None elsewhere: musl and macOS give memory back by themselves)."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def map_large_blocks(threshold: int) -> bool:
    """Blocks of `threshold` bytes and more mapped apart and unmapped when freed, for good
    (`ServerLimitsConfig.mmap_threshold_bytes` says why); 0 leaves glibc's sliding threshold. False
    where there is no glibc."""
    if not threshold:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BodyTicket:
    """One request's share of its server's budget: what it holds, given back at once when done."""

    def __init__(self, guard: ServerGuard) -> None:
        self.guard = guard
        self.held = 0

    @property
    def body_timeout_s(self) -> float:
        return self.guard.config.body_timeout_s

    def take(self, size: int) -> bool:
        """Charge `size` more bytes; False (nothing charged) when the server's budget is spent."""
        guard = self.guard
        if guard.bodies_in_flight + size > guard.config.max_bodies_bytes:
            guard.errors.report(
                BODIES_BUDGET,
                f"request bodies in flight would pass {guard.config.max_bodies_bytes} bytes; "
                "answered 503 with Retry-After",
            )
            return False
        guard.bodies_in_flight += size
        self.held += size
        return True

    def slow(self) -> None:
        self.guard.errors.report(
            SLOW_BODY, f"a body took longer than {self.body_timeout_s:g} s; answered 408 and closed"
        )

    def cut_short(self) -> None:
        self.guard.errors.report(BODY_CUT_SHORT, "a client closed its connection before its whole body")

    def release(self) -> None:
        self.guard.given_back(self.held)
        self.held = 0


class ServerGuard:
    """The bounds of one server process (see the module doc)."""

    def __init__(self, config: ServerLimitsConfig) -> None:
        self.config = config
        map_large_blocks(config.mmap_threshold_bytes)
        self.errors = ClientErrors(
            logging.getLogger("ray_otel_events.client_errors"), None, config.client_error_log_interval_s
        )
        self.counters = self.errors.counters
        self.bodies_in_flight = 0
        self.connections = 0
        self.max_connections = _fit_descriptors(config.max_connections)
        self._given_back = 0  # bytes given back since the heap was last trimmed
        self._trim: asyncio.TimerHandle | None = None

    def given_back(self, size: int) -> None:
        """A request's bodies are answered. Once none is in flight and many bytes came back since
        the last time, the C heap is trimmed a moment later (when the answer's objects are gone
        too): glibc keeps freed pieces of bodies for reuse, and RSS would stay at its peak."""
        self.bodies_in_flight -= size
        self._given_back += size
        enough = min(TRIM_AFTER_BYTES, self.config.max_bodies_bytes // 2)
        if self.bodies_in_flight or self._given_back < enough or self._trim is not None:
            return
        self._given_back = 0
        self._trim = asyncio.get_running_loop().call_later(TRIM_DELAY_S, self._trim_heap)

    def _trim_heap(self) -> None:
        self._trim = None
        if _MALLOC_TRIM is not None:
            _MALLOC_TRIM(0)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Gives each request its ticket, and takes back what it holds when it is answered."""
        ticket = BodyTicket(self)
        request[BODY_TICKET] = ticket
        try:
            return await handler(request)
        finally:
            ticket.release()

    def runner_kwargs(self) -> dict[str, Any]:
        """What `web.AppRunner` takes from the guard: the idle timer, and the log that keeps a
        client's malformed request to one counted line."""
        return {
            "keepalive_timeout": self.config.idle_timeout_s,
            "lingering_time": LINGER_S,
            "logger": _ServerLog(self.errors),
        }

    def runner(self, app: web.Application, **kwargs: Any) -> web.AppRunner:
        """A runner of `app` under the guard (its middleware first in the app's, which must not
        be started yet)."""
        app.middlewares.insert(0, self.middleware)
        return web.AppRunner(app, access_log=None, **self.runner_kwargs(), **kwargs)

    async def listen(
        self,
        runner: web.AppRunner,
        host: str | None = None,
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        sock: Any = None,
    ) -> GuardedSite:
        """Start a site of `runner` on host:port (or an already bound `sock`) under the guard."""
        site = GuardedSite(runner, self, host, port, ssl_context, sock)
        await site.start()
        return site

    def gauges(self) -> dict[str, tuple[str, Callable[[], float]]]:
        """{metric name: (help, read)} for the server's registry."""
        return {
            "http_bodies_in_flight_bytes": (
                "bytes of request bodies held now (wire and inflated), against --max-bodies-bytes",
                lambda: float(self.bodies_in_flight),
            ),
            "http_connections": (
                "open HTTP connections, against --max-connections",
                lambda: float(self.connections),
            ),
        }


def _fit_descriptors(wanted: int) -> int:
    """The connection cap this process can keep: the soft descriptor limit is raised (within the
    hard one) to hold `wanted` connections and a reserve; if it cannot be, the cap is lowered."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < need:
        fitted = max(1, soft - FD_RESERVE)
        logger.warning(
            "--max-connections %d lowered to %d: the descriptor limit is %d (%d kept in reserve)",
            wanted,
            fitted,
            soft,
            FD_RESERVE,
        )
        return fitted
    return wanted


class _ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server log: a request its parser refuses is the client's error (one counted line
    an interval); anything else (a handler's failure) keeps its traceback."""

    def __init__(self, errors: ClientErrors) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self.errors = errors

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if not self._malformed(exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]):
            self.logger.error(msg, *args, exc_info=exc_info, **kwargs)

    def debug(self, msg: object, *args: object, exc_info: Any = None, **kwargs: Any) -> None:
        """(aiohttp logs a first request that is not HTTP at all here: counted the same way.)"""
        if not self._malformed(exc_info):
            self.logger.debug(msg, *args, exc_info=exc_info, **kwargs)

    def _malformed(self, exc: object) -> bool:
        if not isinstance(exc, HttpProcessingError):
            return False
        self.errors.report(MALFORMED_HTTP, f"{type(exc).__name__}: {exc.message}; answered 400")
        return True


_REFUSAL_BODY = b'{"error": "too many connections to this server; retry later"}'
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    + f"Retry-After: {RETRY_AFTER_S}\r\n".encode()
    + b"Content-Type: application/json\r\nConnection: close\r\n"
    + f"Content-Length: {len(_REFUSAL_BODY)}\r\n\r\n".encode()
    + _REFUSAL_BODY
)


class _Admitted(asyncio.Protocol):
    """A connection under the cap: aiohttp's handler behind it; past the cap, a 503 and closed."""

    def __init__(self, guard: ServerGuard, make: Callable[[], asyncio.Protocol]) -> None:
        self.guard = guard
        self.make = make
        self.inner: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self.guard
        if guard.connections >= guard.max_connections:
            guard.counters.add(REFUSED_CONNECTIONS)
            guard.errors.report(
                TOO_MANY_CONNECTIONS,
                f"{guard.connections} connections open (the limit); a new one answered 503 and closed",
            )
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(_REFUSAL)
            transport.close()
            return
        guard.connections += 1
        self.inner = self.make()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        inner, self.inner = self.inner, None
        if inner is not None:
            self.guard.connections -= 1
            inner.connection_lost(exc)


class GuardedSite(web.BaseSite):
    """A TCP site (host:port, or a bound socket) whose connections pass the guard's cap."""

    def __init__(
        self,
        runner: web.AppRunner,
        guard: ServerGuard,
        host: str | None,
        port: int,
        ssl_context: ssl.SSLContext | None,
        sock: Any = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._guard = guard
        self._host = host
        self._port = port
        self._sock = sock

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        guard = self._guard

        def admit() -> asyncio.Protocol:
            return _Admitted(guard, server)

        options: dict[str, Any] = {"ssl": self._ssl_context, "backlog": self._backlog}
        if self._ssl_context is not None:
            options["ssl_handshake_timeout"] = guard.config.idle_timeout_s
        loop = asyncio.get_running_loop()
        if self._sock is not None:
            self._server = await loop.create_server(admit, sock=self._sock, **options)
        else:
            self._server = await loop.create_server(admit, self._host, self._port, **options)
