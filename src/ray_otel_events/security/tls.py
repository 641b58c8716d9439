"""Server-side TLS from PEM files: one cert/key pair, optionally a CA that client certs must chain to."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from ray_otel_events.config import ConfigError


@dataclass(frozen=True)
class TlsFiles:
    cert: str
    key: str
    client_ca: str = ""  # set: clients must present a certificate signed by this CA (mutual TLS)

    def _read(self, path: str, what: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {what} {path!r}: {exc}") from None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.cert, self.key)
            if self.client_ca:
                context.load_verify_locations(cafile=self.client_ca)
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"TLS files unusable (cert {self.cert!r}, key {self.key!r}): {exc}") from None
        return context

    def grpc_credentials(self) -> grpc.ServerCredentials:
        self.ssl_context()  # the same checks and messages as HTTP, before gRPC's own opaque errors
        pair = (self._read(self.key, "--tls-key"), self._read(self.cert, "--tls-cert"))
        root = self._read(self.client_ca, "--tls-client-ca") if self.client_ca else None
        return grpc.ssl_server_credentials([pair], root_certificates=root, require_client_auth=bool(root))
