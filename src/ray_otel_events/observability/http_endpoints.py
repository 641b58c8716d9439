"""GET /metrics, /healthz and /readyz for an aiohttp server, and its in-flight request gauge.

/healthz answers 200 while the process can answer at all (a Kubernetes liveness probe). /readyz
answers 200 only when every readiness check passes, else 503, both with a JSON body naming each
check, so a probe's failure says why (a Kubernetes readiness probe, a load balancer's health check).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from ray_otel_events.observability.metrics_registry import ServerMetrics

Handler = Callable[[web.Request], "web.StreamResponse"]


@dataclass
class Readiness:
    """Named checks: {name: (ok, detail)}."""

    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)

    def add(self, name: str, ok: bool, detail: str = "") -> Readiness:
        self.checks[name] = (ok, detail)
        return self

    @property
    def ready(self) -> bool:
        return all(ok for ok, _ in self.checks.values())

    def as_json(self) -> dict[str, object]:
        return {
            "ready": self.ready,
            "checks": {name: {"ok": ok, "detail": detail} for name, (ok, detail) in self.checks.items()},
        }


def observability_routes(
    metrics: ServerMetrics,
    readiness: Callable[[], Readiness],
    render: Callable[[], Awaitable[bytes]] | None = None,
) -> list[web.RouteDef]:
    """`render`: what /metrics serves when it is more than this process's registry."""

    async def get_metrics(_request: web.Request) -> web.Response:
        response = web.Response(body=await render() if render is not None else metrics.render())
        response.headers["Content-Type"] = metrics.content_type
        return response

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_request: web.Request) -> web.Response:
        state = readiness()
        return web.json_response(state.as_json(), status=200 if state.ready else 503)

    return [web.get("/metrics", get_metrics), web.get("/healthz", healthz), web.get("/readyz", readyz)]


def in_flight_middleware(metrics: ServerMetrics, server: str) -> Callable[..., object]:
    gauge = metrics.in_flight.labels(server)

    @web.middleware
    async def count_in_flight(request: web.Request, handler: Callable[..., object]) -> web.StreamResponse:
        gauge.inc()
        try:
            response = await handler(request)  # type: ignore[misc]
            assert isinstance(response, web.StreamResponse)
            return response
        finally:
            gauge.dec()

    return count_in_flight
