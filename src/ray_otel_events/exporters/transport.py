"""How an exporter reaches its destination: extra headers (a token) and TLS verification.

One value object shared by every HTTP exporter, so `--export-header` and `--export-ca-file` mean
the same for the RayEvent JSON publisher, the plain-records publisher and the OTLP exporter.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from aiohttp import payload

from ray_otel_events.config import ConfigError


@dataclass(frozen=True)
class HttpTransport:
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # None: aiohttp's default verification against the system CAs (https) / nothing (http).
    ssl: ssl.SSLContext | None = None

    @classmethod
    def build(cls, headers: Mapping[str, str], ca_file: str = "") -> HttpTransport:
        """Headers as given; with `ca_file`, https destinations are verified against that CA only."""
        context = None
        if ca_file:
            try:
                context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"cannot load CA file {ca_file!r}: {exc}") from None
        return cls(MappingProxyType(dict(headers)), context)


def parse_header_flags(values: list[str] | None, source: str = "--export-header") -> dict[str, str]:
    """`Name: value` or `Name=value` items (repeatable flag) as a dict; ConfigError if malformed."""
    headers: dict[str, str] = {}
    for item in values or []:
        sep = ":" if ":" in item and ("=" not in item or item.index(":") < item.index("=")) else "="
        name, found, value = item.partition(sep)
        if not found or not name.strip():
            raise ConfigError(f"{source} {item!r}: expected 'Name: value' or 'Name=value'")
        headers[name.strip()] = value.strip()
    return headers


class WholeBody(payload.BytesPayload):
    """A request body of bytes, written after the request's headers have gone out on their own.

    aiohttp holds the headers back to send them with the first body chunk, and joins the two into
    one new bytes to do so: a copy of the whole body (the bridge's OTLP requests are megabytes).
    The same bytes reach the server either way, in one more segment."""

    def __init__(self, body: bytes, content_type: str) -> None:
        super().__init__(body, content_type=content_type)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        send_headers = getattr(writer, "send_headers", None)  # aiohttp >= 3.12; earlier ones sent them
        if send_headers is not None:
            send_headers()
        await super().write_with_length(writer, content_length)
