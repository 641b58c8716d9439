"""Just enough of Ray's GCS for Ray's own `ray logs ... --address HOST:PORT` to reach the store.

Ray 2.60's `ray logs` takes a GCS address, never an HTTP one: it opens a `GcsClient` (one
`NodeInfoGcsService.GetClusterId` call), reads the dashboard's `host:port` from GCS's internal KV
(`InternalKVGcsService.InternalKVGet`, key `dashboard` in namespace `dashboard`), then asks that
dashboard's `/api/v0/logs/...` over HTTP. `serve --ray-gcs-port` answers those two calls, pointing
the CLI at `serve`'s Ray dashboard port; every other GCS method is UNIMPLEMENTED, and every other
KV key is not found: this is a history store, not a live cluster.

Ray's CLI never dials a loopback address as given: it swaps `127.0.0.1` and `localhost` for the
machine's own address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is in its environment. The facade
binds `--ray-gcs-host` (`--host` by default, so loopback): widening it is the user's choice, as for
every server here. It takes the same token as the rest of `serve`. Message classes come from the
user's installed `ray` package, imported only when the option is given.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import grpc

from ray_otel_events.security.client_errors import UNIMPLEMENTED_GRPC, ClientErrors, log_text

logger = logging.getLogger(__name__)

NOT_A_CLUSTER = (
    "ray-otel-events serve answers only what `ray logs` needs (GetClusterId, InternalKVGet of the "
    "dashboard's address): this is a history store, not a live Ray cluster"
)
CLUSTER_ID_BYTES = 28  # Ray's ClusterID
NOT_FOUND = 17  # Ray's StatusCode::NotFound, as its GCS answers a missing KV key
BIND_ATTEMPTS = 8


class GcsProtocolUnavailable(RuntimeError):
    """The `ray` package (and so its GCS message classes) is not installed."""


@dataclass(frozen=True)
class RayGcsProtocol:
    """Ray's generated GCS messages and the KV key under which Ray's CLI finds the dashboard."""

    messages: ModuleType
    dashboard_key: bytes
    dashboard_namespace: bytes
    node_ip: str  # the machine's address, as Ray's CLI finds it: where a wildcard bind is reached


def load_ray_gcs_protocol() -> RayGcsProtocol:
    try:
        from ray._private import ray_constants, services
        from ray.core.generated import gcs_service_pb2
    except ImportError as exc:
        raise GcsProtocolUnavailable(
            f"Ray's GCS messages come from the `ray` package, which is not importable here ({exc}): "
            "pip install 'ray-otel-events[ray]'"
        ) from None
    key = ray_constants.DASHBOARD_ADDRESS
    return RayGcsProtocol(
        messages=gcs_service_pb2,
        dashboard_key=key.encode() if isinstance(key, str) else bytes(key),
        dashboard_namespace=bytes(ray_constants.KV_NAMESPACE_DASHBOARD),
        node_ip=str(services.get_node_ip_address()),  # type: ignore[no-untyped-call]
    )


def is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host == ""


class RayGcsFacade(grpc.GenericRpcHandler):  # type: ignore[misc]
    """GetClusterId and InternalKVGet of the dashboard's address; UNIMPLEMENTED for the rest."""

    def __init__(
        self,
        protocol: RayGcsProtocol,
        dashboard_address: str,
        cluster_id: bytes | None = None,
        errors: ClientErrors | None = None,
    ) -> None:
        self.protocol = protocol
        self.errors = errors if errors is not None else ClientErrors(logger)
        self.dashboard_address = dashboard_address.encode()
        self.cluster_id = cluster_id or os.urandom(CLUSTER_ID_BYTES)
        pb = protocol.messages
        self._handlers: dict[str, grpc.RpcMethodHandler] = {
            "/ray.rpc.NodeInfoGcsService/GetClusterId": grpc.unary_unary_rpc_method_handler(
                self.get_cluster_id, pb.GetClusterIdRequest.FromString, pb.GetClusterIdReply.SerializeToString
            ),
            "/ray.rpc.InternalKVGcsService/InternalKVGet": grpc.unary_unary_rpc_method_handler(
                self.internal_kv_get,
                pb.InternalKVGetRequest.FromString,
                pb.InternalKVGetReply.SerializeToString,
            ),
        }
        self._unimplemented = grpc.unary_unary_rpc_method_handler(self.unimplemented)

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler:
        found = self._handlers.get(handler_call_details.method)
        if found is None:
            method = log_text(handler_call_details.method)
            self.errors.report(UNIMPLEMENTED_GRPC, f"ray-gcs: {method} is not answered by a history store")
            return self._unimplemented
        return found

    async def get_cluster_id(self, _request: Any, _context: Any) -> Any:
        return self.protocol.messages.GetClusterIdReply(cluster_id=self.cluster_id)

    async def internal_kv_get(self, request: Any, _context: Any) -> Any:
        pb = self.protocol.messages
        if (
            request.namespace == self.protocol.dashboard_namespace
            and request.key == self.protocol.dashboard_key
        ):
            return pb.InternalKVGetReply(value=self.dashboard_address)
        status = pb.GcsStatus(code=NOT_FOUND, message=f"{request.key!r}: {NOT_A_CLUSTER}")
        return pb.InternalKVGetReply(status=status)

    async def unimplemented(self, _request: bytes, context: Any) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, NOT_A_CLUSTER)


def dashboard_address(host: str, dashboard_port: int, protocol: RayGcsProtocol) -> str:
    """Where the CLI should fetch logs: `serve`'s Ray dashboard port on the host it binds (the
    machine's address when that is every interface)."""
    return f"{protocol.node_ip if is_wildcard(host) else host}:{dashboard_port}"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def start_gcs_server(
    facade: RayGcsFacade,
    hosts: Sequence[str],
    port: int,
    credentials: grpc.ServerCredentials | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    options: Sequence[tuple[str, int]] = (),
) -> tuple[grpc.aio.Server, int]:
    """A started server listening on one port on every host: with port 0, the first host picks
    it and the others take the same (tried again with another when one of them has it in use)."""
    last_error: Exception | None = None
    for _ in range(BIND_ATTEMPTS if port == 0 else 1):
        server = grpc.aio.server(interceptors=list(interceptors), options=list(options))
        server.add_generic_rpc_handlers((facade,))
        chosen = port
        try:
            for host in hosts:
                target = f"{_bracket(host)}:{chosen}"
                bound = (
                    server.add_secure_port(target, credentials)
                    if credentials is not None
                    else server.add_insecure_port(target)
                )
                if not bound:
                    raise OSError(f"cannot listen on {target}")
                chosen = bound
        except (OSError, RuntimeError) as exc:
            last_error = exc
            await server.stop(None)
            continue
        await server.start()
        return server, chosen
    raise OSError(str(last_error))
