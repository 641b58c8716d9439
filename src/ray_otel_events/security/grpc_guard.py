"""Every gRPC server's guard: a message that does not decode is the client's error, not ours.

grpc's own handling of a request its deserializer cannot read is a logged traceback and a handler
called with None (UNKNOWN to the client). `DecodeGuard` wraps each method's deserializer so that
such a call is answered INVALID_ARGUMENT, counted and logged one line per interval
(`ClientErrors`), and never reaches the handler. `grpc_options` bounds connections, idle time and
handshakes by the server's limits, as for HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from ray_otel_events.config import ServerLimitsConfig
from ray_otel_events.security.auth import BearerToken
from ray_otel_events.security.client_errors import UNDECODABLE_GRPC, ClientErrors, log_text


class _Undecodable:
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class DecodeGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, errors: ClientErrors) -> None:
        self.errors = errors

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None or handler.request_streaming:
            return handler
        method = str(details.method)
        deserialize: Callable[[bytes], Any] = handler.request_deserializer

        def guarded(data: bytes) -> Any:
            try:
                return deserialize(data)
            except Exception as exc:  # any failure to read the client's bytes is the client's
                return _Undecodable(f"{type(exc).__name__}: {exc}")

        async def refuse(request: _Undecodable, context: Any) -> None:
            self.errors.report(UNDECODABLE_GRPC, f"{log_text(method)}: {request.reason}")
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"the request message does not decode: {request.reason}"
            )

        if handler.unary_unary is not None:
            unary = handler.unary_unary

            async def unary_call(request: Any, context: Any) -> Any:
                if isinstance(request, _Undecodable):
                    await refuse(request, context)
                return await unary(request, context)

            return grpc.unary_unary_rpc_method_handler(unary_call, guarded, handler.response_serializer)
        stream = handler.unary_stream

        async def stream_call(request: Any, context: Any) -> AsyncIterator[Any]:
            if isinstance(request, _Undecodable):
                await refuse(request, context)
            result = stream(request, context)
            if hasattr(result, "__aiter__"):
                async for item in result:
                    yield item
            else:
                await result

        return grpc.unary_stream_rpc_method_handler(stream_call, guarded, handler.response_serializer)


def grpc_interceptors(errors: ClientErrors, token: BearerToken | None) -> list[grpc.aio.ServerInterceptor]:
    """The decode guard, then the token check when there is a token."""
    guard: list[grpc.aio.ServerInterceptor] = [DecodeGuard(errors)]
    return [*guard, token.grpc_interceptor()] if token is not None else guard


def grpc_options(limits: ServerLimitsConfig) -> list[tuple[str, int]]:
    """grpc core's own bounds, set from the server's limits."""
    idle_ms = int(limits.idle_timeout_s * 1000)
    return [
        ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ("grpc.max_connection_idle_ms", idle_ms),
        ("grpc.server_handshake_timeout_ms", idle_ms),
    ]
