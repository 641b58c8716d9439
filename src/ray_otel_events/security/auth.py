"""A shared bearer token, checked in constant time on every route but the liveness probe.

HTTP: `Authorization: Bearer <token>`, else 401 with `WWW-Authenticate: Bearer`. gRPC: the same in
the `authorization` metadata, else UNAUTHENTICATED. The health endpoints a kubelet calls without
credentials (`GET /healthz`, `grpc.health.v1.Health`) stay open; they reveal nothing but liveness.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from aiohttp import web

OPEN_HTTP_PATHS = frozenset({"/healthz"})
OPEN_GRPC_PREFIX = "/grpc.health.v1.Health/"


class BearerToken:
    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an empty token would let everyone in")
        self._expected = f"Bearer {token}".encode()

    def accepts(self, authorization: str | None) -> bool:
        """Constant-time comparison of the whole header value (no early exit on the first byte)."""
        given = (authorization or "").strip().encode()
        return hmac.compare_digest(given, self._expected)

    def http_middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        @web.middleware
        async def require_token(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            if request.path in OPEN_HTTP_PATHS or self.accepts(request.headers.get("Authorization")):
                return await handler(request)
            return web.json_response(
                {"error": "missing or wrong bearer token (send 'Authorization: Bearer <token>')"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )

        return require_token

    def grpc_interceptor(self) -> grpc.aio.ServerInterceptor:
        return _TokenInterceptor(self)


class _TokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, token: BearerToken) -> None:
        self._token = token

        async def deny(_request: Any, context: Any) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method.startswith(OPEN_GRPC_PREFIX):
            return await continuation(details)
        metadata = dict(details.invocation_metadata or ())
        if self._token.accepts(metadata.get("authorization")):
            return await continuation(details)
        return self._deny
