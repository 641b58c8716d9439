"""One grpc.aio server for any receiver: its port, TLS, interceptors and graceful stop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import grpc

MAX_MESSAGE_BYTES = 512 * 1024 * 1024


class GrpcReceiver(Protocol):
    def handler(self) -> grpc.GenericRpcHandler: ...

    def begin_shutdown(self) -> None:
        """From now on refuse calls with UNAVAILABLE (the server is flushing)."""


class GrpcServer:
    """A grpc.aio server bound to host:port (0 = any free port) serving one receiver."""

    def __init__(
        self,
        receiver: GrpcReceiver,
        host: str,
        port: int,
        credentials: grpc.ServerCredentials | None = None,
        interceptors: Sequence[Any] = (),
        add_services: Callable[[Any], None] | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        options: Sequence[tuple[str, int]] = (),
    ) -> None:
        self.receiver = receiver
        self.max_message_bytes = max_message_bytes  # larger: RESOURCE_EXHAUSTED, before it is read
        self.host = host
        self._requested_port = port
        self._credentials = credentials
        self._interceptors = tuple(interceptors)
        self._add_services = add_services  # more services on the same port (grpc.health.v1)
        self._options = list(options)  # more grpc core options (the server's limits)
        self.port = 0
        self._server: Any = None

    async def start(self) -> int:
        server = grpc.aio.server(
            interceptors=self._interceptors,
            options=[
                ("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.so_reuseport", 0),
                *self._options,
            ],
        )
        server.add_generic_rpc_handlers((self.receiver.handler(),))
        if self._add_services is not None:
            self._add_services(server)
        address = (
            f"[{self.host}]:{self._requested_port}"
            if ":" in self.host
            else f"{self.host}:{self._requested_port}"
        )
        try:
            if self._credentials is None:
                self.port = server.add_insecure_port(address)
            else:
                self.port = server.add_secure_port(address, self._credentials)
        except RuntimeError as exc:
            raise OSError(f"cannot listen for gRPC on {address}: {exc}") from exc
        if self.port == 0:
            raise OSError(f"cannot listen for gRPC on {address}")
        await server.start()
        self._server = server
        return self.port

    async def stop(self, grace_s: float) -> None:
        """Close the port, letting calls in progress finish for up to `grace_s`. Call
        `receiver.begin_shutdown()` earlier to refuse calls with a message while flushing."""
        self.receiver.begin_shutdown()
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
