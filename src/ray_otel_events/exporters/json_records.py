"""POST batches of plain JSON records (already encoded one by one) as one JSON array each.

The bridge's "other telemetry" goes this way: same request, retries and success rule as the
RayEvent JSON publisher (POST to exactly the URL, 2xx is success), but the payload is whatever the
records are, so batches are just joined.
"""

from __future__ import annotations

from ray_otel_events.encoding.ray_json import RayEventJsonEncoder
from ray_otel_events.exporters.http_json import HttpJsonPublisherClient
from ray_otel_events.exporters.publisher import PreparedBatch
from ray_otel_events.exporters.transport import HttpTransport
from ray_otel_events.processors.event_buffer import EventBatch


class JsonRecordsPublisherClient(HttpJsonPublisherClient):
    def __init__(self, url: str, timeout_s: float, transport: HttpTransport | None = None) -> None:
        super().__init__(url, RayEventJsonEncoder(), timeout_s, transport=transport)

    def prepare(self, batch: EventBatch) -> PreparedBatch[bytes]:
        return PreparedBatch(b"[" + b",".join(batch.wires) + b"]", batch.types)
