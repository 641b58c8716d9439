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
    ca_file: str = ""  # what `ssl` verifies against, for a context made again with a client certificate

    @classmethod
    def build(
        cls, headers: Mapping[str, str], ca_file: str = "", client_cert: str = "", client_key: str = ""
    ) -> HttpTransport:
        """Headers as given; with `ca_file`, https destinations are verified against that CA only;
        with `client_cert` (and `client_key`, unless the key is in its file), it is presented to
        a server that requires client certificates (mutual TLS)."""
        context = None
        if ca_file or client_cert:
            try:
                context = ssl.create_default_context(cafile=ca_file or None)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"cannot load CA file {ca_file!r}: {exc}") from None
        if context is not None and client_cert:
            try:
                context.load_cert_chain(client_cert, client_key or None)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"cannot load client certificate {client_cert!r}: {exc}") from None
        return cls(MappingProxyType(dict(headers)), context, ca_file)


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
