"""A composed Ray Serve application for the tracing tests, and a driver that deploys it and calls it.

    python serve_app.py PORT SAMPLING_RATIO REQUESTS_JSON

Connects to the cluster RAY_ADDRESS names, starts Serve on 127.0.0.1:PORT with tracing through
`ray_otel_events.tracing.serve:span_processors`, and deploys `Ingress` (the HTTP route `/`), which
calls `Inner` through a deployment handle; `Inner` runs the Ray task `leaf` and calls the actor
`Counter`. Each request in REQUESTS_JSON (a list of objects, each with an optional "traceparent")
is sent over HTTP; one JSON line is printed: the pids and each response with its request id.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from typing import Any

import ray
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request

SERVE_EXPORTER = "ray_otel_events.tracing.serve:span_processors"
PROXY_WAIT_SECONDS = 180


@ray.remote(num_cpus=0)
def leaf(x: int) -> dict[str, int]:
    return {"leaf": x * 2, "leaf_pid": os.getpid()}


@ray.remote(num_cpus=0)
class Counter:
    def __init__(self) -> None:
        self.count = 0

    def add(self, x: int) -> int:
        self.count += x
        return self.count


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Inner:
    def __init__(self) -> None:
        self.counter = Counter.remote()  # type: ignore[attr-defined]

    async def __call__(self, x: int) -> dict[str, Any]:
        result = await leaf.remote(x)
        total = await self.counter.add.remote(x)
        return {**result, "total": total, "inner_pid": os.getpid()}


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Ingress:
    def __init__(self, inner: DeploymentHandle) -> None:
        self.inner = inner

    async def __call__(self, request: Request) -> dict[str, Any]:
        x = int(request.query_params.get("x", "1"))
        inner = await self.inner.remote(x)
        return {**inner, "ingress_pid": os.getpid()}


app = Ingress.bind(Inner.bind())


def _wait_for_proxy(port: int, seconds: float) -> None:
    """Until Serve's proxy answers its health route: on a machine busy with the suite's other
    clusters, a proxy importing Serve once took longer than Serve's own wait."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/healthz", timeout=10):
                return  # (an error status raises)
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def main() -> None:
    port, ratio, requests = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
    ray.init(logging_level="ERROR")
    try:
        serve.start(
            http_options={"host": "127.0.0.1", "port": port},
            tracing_config={"enabled": True, "sampling_ratio": ratio, "exporter_import_path": SERVE_EXPORTER},
        )
    except TimeoutError as slow:  # Serve waits 60 s for its proxy, a bound no setting changes
        print(f"serve_app: {slow}; waiting longer for the proxy", file=sys.stderr)
        _wait_for_proxy(port, PROXY_WAIT_SECONDS)
    serve.run(app, name="traced", route_prefix="/", blocking=False)
    responses = []
    for i, spec in enumerate(requests):
        headers = {"traceparent": spec["traceparent"]} if spec.get("traceparent") else {}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/?x={i + 1}", headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            body = json.loads(response.read())
            responses.append({**body, "request_id": response.headers["x-request-id"]})
    print(json.dumps({"pid": os.getpid(), "responses": responses}))


if __name__ == "__main__":
    main()
