"""The receivers of Ray's posts answer bad bodies alike, on `serve` and on the bridge: a wrong
Content-Type 415, a broken gzip or a body that is not JSON 400, a body inflating past the limit 413,
each naming why in `{"error": ...}`; every refusal is counted by path and status in /metrics; and a
good post after them is still taken (nothing already accepted is lost)."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import requests
from helpers.agg_procs import CliServer
from helpers.bridge_procs import ServerGroup, url

SESSION = "session_2026-12-02_06-00-00_000000_1"
NODE = "ab" * 28
JSON = {"Content-Type": "application/json"}
GZIPPED_JSON = {**JSON, "Content-Encoding": "gzip"}
OCTETS = {"Content-Type": "application/octet-stream"}
LOG_QUERY = {"session": SESSION, "node": NODE, "file": "worker.out", "offset": "0"}
EXPORT_POST = {"sessionName": SESSION, "nodeId": NODE, "hostname": "head", "events": []}
# Inflates to 80 MiB, past the 64 MiB every receiver allows (80 KiB on the wire).
BOMB = gzip.compress(b"\0" * (80 << 20))
BROKEN_GZIP = gzip.compress(b"[]")[:-6] + b"xxxxxx"

JSON_PATHS = ("/v1/ray-events", "/v1/ray-export-events")


def _refusals(path: str) -> list[tuple[dict[str, str], bytes, int, str]]:
    """(headers, body, status, what the reason says) for each bad body `path` must refuse."""
    kind = OCTETS if path == "/v1/ray-log-files" else JSON
    cases = [
        ({"Content-Type": "text/plain"}, b"[]", 415, "unsupported Content-Type 'text/plain': post"),
        ({**kind, "Content-Encoding": "gzip"}, BROKEN_GZIP, 400, "gzip"),
        ({**kind, "Content-Encoding": "gzip"}, BOMB, 413, "exceeds the limit"),
    ]
    if path in JSON_PATHS:
        cases.append((JSON, b"{nope", 400, "JSON"))
    return cases


def _params(path: str) -> dict[str, str]:
    return LOG_QUERY if path == "/v1/ray-log-files" else {}


def _refused_everything(base: str, path: str) -> int:
    for headers, body, status, says in _refusals(path):
        answer = requests.post(base + path, params=_params(path), data=body, headers=headers, timeout=60)
        assert answer.status_code == status, (path, headers, answer.text)
        assert says in answer.json()["error"], (path, answer.text)
    return len(_refusals(path))


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliServer]:
    store = tmp_path_factory.mktemp("refusals") / "events.db"
    server = CliServer("serve", "--store", str(store))
    try:
        yield server
        metrics = requests.get(f"http://{server.address}/metrics", timeout=30).text
        counted = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("ray_otel_events_serve_refused_posts_total{")
        )
        assert server.stop()["refused_posts"] == counted > 0  # the exit line counts every path's
    finally:
        server.kill()


@pytest.mark.parametrize("path", [*JSON_PATHS, "/v1/ray-log-files"])
def test_serve_refuses_bad_bodies_naming_why_and_counts_them_by_path(serve: CliServer, path: str) -> None:
    base = f"http://{serve.address}"
    refused = _refused_everything(base, path)
    metrics = requests.get(f"{base}/metrics", timeout=30).text
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("ray_otel_events_serve_refused_posts_total{") and f'path="{path}"' in line
    )
    assert counted == refused, [line for line in metrics.splitlines() if "refused_posts" in line]
    # a good post after the refusals is taken, and gzip is read as the limit allows
    if path == "/v1/ray-log-files":
        good = requests.post(
            base + path,
            params=LOG_QUERY,
            data=gzip.compress(b"one\n"),
            headers={**OCTETS, "Content-Encoding": "gzip"},
            timeout=30,
        )
        assert good.status_code == 200 and good.json() == {"accepted": 4}, good.text
    else:
        body = b"[]" if path == "/v1/ray-events" else orjson.dumps(EXPORT_POST)
        good = requests.post(base + path, data=gzip.compress(body), headers=GZIPPED_JSON, timeout=30)
        assert good.status_code == 200 and good.json()["rejected"] == 0, good.text


def test_the_bridge_refuses_bad_bodies_alike_and_counts_them(tmp_path: Path) -> None:
    with ServerGroup(tmp_path) as group:
        sink, _ = group.sink("otlp")
        bridge = group.bridge("--otlp-endpoint", url(sink))
        for path in JSON_PATHS:
            refused = _refused_everything(url(bridge), path)
            metrics = requests.get(url(bridge, "/metrics"), timeout=30).text
            stage = "ray_events_receiver" if path == "/v1/ray-events" else "ray_export_events_receiver"
            counted = sum(
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith(f"ray_otel_events_{stage}_refused_requests_total{{")
            )
            assert counted == refused, [line for line in metrics.splitlines() if "refused" in line]
        bridge.stop()
