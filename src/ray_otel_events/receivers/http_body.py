"""Read an HTTP request body under a size limit that holds after decompression.

The limit is on the bytes the server has to hold and parse, so it is checked on the decompressed
stream, incrementally: a gzip bomb (a few KB that inflate to GBs) is stopped one chunk past the
limit, never inflated in full. Servers built here run aiohttp with `auto_decompress=False` and let
this module gunzip; a server that leaves aiohttp's own decompression on passes
`decoded_by_server=True` and only the size limit applies.

Under a `ServerGuard` (security/http_limits.py) every wire chunk and every inflated piece is also
charged to the server's budget for the bodies of all requests in flight (503 with Retry-After past
it), and the whole body must arrive within the guard's body timeout (408): both close the
connection, since what is left of the body is not worth reading. Inflation goes in pieces of
`_PIECE` bytes, each charged before the next is made, so neither bound is passed by more than one.
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web

from ray_otel_events.security.http_limits import BODY_TICKET, RETRY_AFTER_S, BodyTicket

_CHUNK = 64 * 1024
_PIECE = 256 * 1024
_IDENTITY = frozenset({"", "identity", "none"})
_GZIP = frozenset({"gzip", "x-gzip"})


class BodyError(Exception):
    """A body the server will not take; `status` is the HTTP status to answer with."""

    def __init__(
        self, status: int, reason: str, headers: dict[str, str] | None = None, close: bool | None = None
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers
        # The rest of the body is not worth reading (a timeout, the budget): close the connection.
        self.close = status in (408, 503) if close is None else close


def content_encoding(request: web.Request) -> str:
    """The single content coding of the body, lower case; BodyError 415 if it is not supported."""
    raw = request.headers.get("Content-Encoding", "").strip().lower()
    codings = [c.strip() for c in raw.split(",") if c.strip()]
    if len(codings) > 1:
        raise BodyError(415, f"unsupported Content-Encoding {raw!r}: one coding at most (gzip)")
    coding = codings[0] if codings else ""
    if coding not in _IDENTITY and coding not in _GZIP:
        raise BodyError(415, f"unsupported Content-Encoding {coding!r} (supported: gzip, identity)")
    return "gzip" if coding in _GZIP else ""


def media_type(request: web.Request) -> str:
    """The Content-Type without parameters, lower case ("application/json; charset=utf-8" -> ...)."""
    return request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


async def read_body(request: web.Request, max_bytes: int, decoded_by_server: bool = False) -> bytes:
    """The whole (decompressed) body, or BodyError: 413 past `max_bytes`, 400 for broken gzip,
    503 past the server's budget of bodies in flight, 408 past its body timeout."""
    coding = content_encoding(request)
    gunzip = coding == "gzip" and not decoded_by_server
    declared = request.content_length
    if declared is not None and declared > max_bytes and not gunzip:
        raise BodyError(413, f"body of {declared} bytes exceeds the limit of {max_bytes} bytes")
    # A gzip body that is valid and inflates to <= max_bytes is never much bigger than max_bytes.
    max_wire = max_bytes + max_bytes // 100 + 1024 if gunzip else max_bytes
    if declared is not None and declared > max_wire:
        raise BodyError(413, f"body of {declared} bytes exceeds the limit of {max_bytes} bytes")
    ticket: BodyTicket | None = request.get(BODY_TICKET)
    try:
        if ticket is None:
            return await _read(request, max_bytes, max_wire, gunzip, None)
        async with asyncio.timeout(ticket.body_timeout_s):
            return await _read(request, max_bytes, max_wire, gunzip, ticket)
    except TimeoutError:
        assert ticket is not None  # (only its timeout raises this)
        ticket.slow()
        raise BodyError(408, f"the body did not arrive within {ticket.body_timeout_s:g} s") from None
    except ConnectionError:  # the client went away mid-body: its error, and no one to answer
        if ticket is not None:
            ticket.cut_short()
        raise BodyError(400, "the connection closed before the whole body came", close=True) from None


async def _read(
    request: web.Request, max_bytes: int, max_wire: int, gunzip: bool, ticket: BodyTicket | None
) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if gunzip else None
    parts: list[bytes] = []
    try:
        return _join(await _read_parts(request, max_bytes, max_wire, inflater, parts, ticket), inflater)
    except BaseException:
        # The exception's traceback keeps this frame, and the frame `parts`, for as long as the
        # exception lives (a cycle, freed only by a full collection): what was read goes now.
        parts.clear()
        raise


async def _read_parts(
    request: web.Request,
    max_bytes: int,
    max_wire: int,
    inflater: zlib._Decompress | None,
    parts: list[bytes],
    ticket: BodyTicket | None,
) -> list[bytes]:
    size = 0
    wire = 0
    while True:
        chunk = await request.content.read(_CHUNK)
        if not chunk:
            break
        wire += len(chunk)
        if wire > max_wire:
            raise BodyError(413, f"body exceeds the limit of {max_bytes} bytes")
        _charge(ticket, len(chunk))
        if inflater is None:
            parts.append(chunk)
            size += len(chunk)
        else:
            size += _inflate(inflater, chunk, parts, max_bytes - size, ticket)
        if size > max_bytes:
            what = "decompressed body" if inflater is not None else "body"
            raise BodyError(413, f"{what} exceeds the limit of {max_bytes} bytes")
    if inflater is not None and wire and not inflater.eof:
        raise BodyError(400, "gzip body is truncated (no end of stream)")
    return parts


def _join(parts: list[bytes], inflater: zlib._Decompress | None) -> bytes:
    if inflater is not None and inflater.unused_data.strip(b"\0"):
        raise BodyError(400, "unexpected bytes after the end of the gzip stream")
    return b"".join(parts)


def _charge(ticket: BodyTicket | None, size: int) -> None:
    if ticket is not None and not ticket.take(size):
        raise BodyError(
            503,
            "the server holds as many request bodies as it is allowed to; retry later",
            {"Retry-After": str(RETRY_AFTER_S)},
        )


def _inflate(
    inflater: zlib._Decompress, chunk: bytes, parts: list[bytes], room: int, ticket: BodyTicket | None
) -> int:
    """Inflate one wire chunk, producing at most room + 1 bytes (one past the limit is enough),
    `_PIECE` bytes at a time, each charged to the budget."""
    produced = 0
    data = chunk
    while data:
        try:
            out = inflater.decompress(data, min(_PIECE, max(1, room - produced + 1)))
        except zlib.error as exc:
            raise BodyError(400, f"body is not valid gzip: {exc}") from None
        _charge(ticket, len(out))
        parts.append(out)
        produced += len(out)
        if produced > room:
            return produced
        data = inflater.unconsumed_tail
        if inflater.eof:
            break
    return produced
