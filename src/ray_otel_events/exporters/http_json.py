"""POST each batch as a JSON array to one URL, the way Ray's AsyncHttpPublisherClient does.

Same request as Ray 2.60 (ray_live §3): POST to exactly the configured URL, `Content-Type:
application/json`, body a JSON array of RayEvent objects in buffer order, one kept-alive session,
a total timeout per request. Success is a 2xx status (redirects are not followed).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from ray_otel_events.encoding.newer_releases import POSTED_JSON_TYPE, with_posted_texts
from ray_otel_events.encoding.process_pool import EncoderProcessPool
from ray_otel_events.encoding.ray_json import EncodeResult, RayEventJsonEncoder
from ray_otel_events.exporters.publisher import PreparedBatch, PublisherClient
from ray_otel_events.exporters.retry import SendError, status_error
from ray_otel_events.exporters.transport import HttpTransport, WholeBody
from ray_otel_events.processors.event_buffer import EventBatch

logger = logging.getLogger(__name__)

_HEADERS = {"Content-Type": "application/json"}


class HttpJsonPublisherClient(PublisherClient[bytes]):
    """`pool`, when given, encodes batches in worker processes (and is closed with the client)."""

    def __init__(
        self,
        url: str,
        encoder: RayEventJsonEncoder,
        timeout_s: float,
        pool: EncoderProcessPool | None = None,
        transport: HttpTransport | None = None,
    ) -> None:
        self.url = url
        transport = transport or HttpTransport()
        self._headers = {**transport.headers, **_HEADERS}
        self._ssl = transport.ssl
        self._encoder = encoder
        self._pool = pool
        self.concurrency = pool.processes if pool is not None else 1
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def prepare(self, batch: EventBatch) -> PreparedBatch[bytes]:
        batch, posted = _posted_apart(batch)
        return _with_posted(self._prepared(batch, self._encoder.try_encode_serialized(batch.wires)), posted)

    async def prepare_async(self, batch: EventBatch) -> PreparedBatch[bytes]:
        if self._pool is None:
            return self.prepare(batch)
        batch, posted = _posted_apart(batch)
        encoded = await self._pool.try_encode_serialized(list(batch.wires))
        return _with_posted(self._prepared(batch, encoded), posted)

    def _prepared(self, batch: EventBatch, result: EncodeResult) -> PreparedBatch[bytes]:
        # One bad event must not sink its batch: the others go, the bad ones count as dropped.
        if not result.failures:
            return PreparedBatch(result.json, batch.types)
        bad = {failure.index for failure in result.failures}
        for failure in result.failures:
            logger.warning(
                "dropping an event of type %d that cannot be encoded: %s",
                batch.types[failure.index],
                failure.reason,
            )
        sent = [etype for i, etype in enumerate(batch.types) if i not in bad]
        return PreparedBatch(result.json, sent, [batch.types[i] for i in sorted(bad)])

    async def send(self, payload: bytes) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, connector=aiohttp.TCPConnector(ssl=self._ssl or True)
            )
        try:
            async with self._session.post(
                self.url,
                data=WholeBody(payload, self._headers["Content-Type"]),
                headers=self._headers,
                allow_redirects=False,
            ) as response:
                body = await response.read()  # read fully so the connection is reused
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SendError(f"POST {self.url} failed: {exc!r}", "connection", retryable=True) from None
        if not 200 <= status < 300:
            raise status_error(f"POST {self.url}", status, body, retry_after)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._pool is not None:
            await asyncio.to_thread(self._pool.close)
            self._pool = None


def _posted_apart(batch: EventBatch) -> tuple[EventBatch, list[bytes]]:
    """The batch's RayEvents, and the JSON texts of the events it carries as posted (a type our
    protos cannot name, the bridge's): those are posted as they are, after the others."""
    if POSTED_JSON_TYPE not in batch.types:
        return batch, []
    events = EventBatch()
    posted: list[bytes] = []
    for wire, etype in zip(batch.wires, batch.types, strict=True):
        if etype == POSTED_JSON_TYPE:
            posted.append(wire)
        else:
            events.wires.append(wire)
            events.types.append(etype)
    return events, posted


def _with_posted(prepared: PreparedBatch[bytes], posted: list[bytes]) -> PreparedBatch[bytes]:
    if not posted:
        return prepared
    return PreparedBatch(
        with_posted_texts(prepared.payload, posted),
        [*prepared.sent_types, *[POSTED_JSON_TYPE] * len(posted)],
        prepared.failed_types,
    )
