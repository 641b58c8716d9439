"""The security flags every server takes (TLS, token, and the limits on what a client may hold),
and what they turn into."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path

from ray_otel_events.config import (
    AUTH_TOKEN,
    AUTH_TOKEN_FILE,
    BODY_TIMEOUT_S,
    IDLE_TIMEOUT_S,
    MAX_BODIES_BYTES,
    MAX_CONNECTIONS,
    RAY_AUTH_MODE,
    ConfigError,
    ServerLimitsConfig,
    auth_token,
    auth_token_file,
    ray_server_token,
)
from ray_otel_events.security.auth import BearerToken
from ray_otel_events.security.tls import TlsFiles

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerSecurity:
    tls: TlsFiles | None = None
    token: BearerToken | None = None
    limits: ServerLimitsConfig = field(default_factory=ServerLimitsConfig)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security (default: plain text, no token, 127.0.0.1 only)")
    group.add_argument("--tls-cert", help="PEM certificate (chain) the server presents")
    group.add_argument("--tls-key", help="PEM private key of --tls-cert")
    group.add_argument("--tls-client-ca", help="PEM CA bundle; clients must present a certificate it signed")
    group.add_argument(
        "--auth-token-file",
        help=f"file holding the bearer token every request must carry, except GET /healthz and /readyz "
        f"(env {AUTH_TOKEN_FILE}, or the token itself in {AUTH_TOKEN}); with {RAY_AUTH_MODE}=token, "
        "Ray's cluster token is accepted too",
    )
    limits = parser.add_argument_group("limits on what clients may hold (README: Limits on input)")
    defaults = ServerLimitsConfig()
    limits.add_argument(
        "--max-bodies-bytes",
        type=int,
        help="bytes of all request bodies in flight, wire and inflated; past it 503 with Retry-After "
        f"(env {MAX_BODIES_BYTES}, default {defaults.max_bodies_bytes})",
    )
    limits.add_argument(
        "--max-connections",
        type=int,
        help=f"open connections, HTTP (past it 503 and closed) and gRPC (grpc's own cap) "
        f"(env {MAX_CONNECTIONS}, default {defaults.max_connections})",
    )
    limits.add_argument(
        "--idle-timeout",
        type=float,
        dest="idle_timeout_s",
        help="seconds a connection may stay without a complete request head (idle, or slow "
        f"headers) before it is closed (env {IDLE_TIMEOUT_S}, default {defaults.idle_timeout_s:g})",
    )
    limits.add_argument(
        "--body-timeout",
        type=float,
        dest="body_timeout_s",
        help=f"seconds one request body may take to arrive; past it 408 (env {BODY_TIMEOUT_S}, "
        f"default {defaults.body_timeout_s:g})",
    )


def _token(args: argparse.Namespace) -> str:
    path, source = args.auth_token_file, "--auth-token-file"
    if not path:
        path, source = auth_token_file(), AUTH_TOKEN_FILE
    if path:
        try:
            token = Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{source} {path!r}: {exc}") from None
        if not token:
            raise ConfigError(f"{source} {path!r} is empty")
        return token
    return auth_token()


def security_from_args(args: argparse.Namespace) -> ServerSecurity:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca or "") if args.tls_cert else None
    limits = ServerLimitsConfig.from_env().with_overrides(
        max_bodies_bytes=args.max_bodies_bytes,
        max_connections=args.max_connections,
        idle_timeout_s=args.idle_timeout_s,
        body_timeout_s=args.body_timeout_s,
    )
    if tls is not None:
        tls.ssl_context()  # fail at start, with the file named, not at the first connection
    ours, ray = _token(args), ray_server_token()
    if not (ours or ray):
        return ServerSecurity(tls, None, limits)
    if not ours:
        logger.warning(
            "%s=token: Ray's token is required on reads and gRPC; HTTP POSTs of events need none, as "
            "Ray's aggregator sends none with its export (--auth-token-file guards them too)",
            RAY_AUTH_MODE,
        )
    return ServerSecurity(tls, BearerToken(ours, ray, post_tokens=[ours] if ours else []), limits)
