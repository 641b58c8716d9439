"""Real sink and bridge processes for the bridge tests, and readers for what the sinks wrote."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from helpers.agg_procs import CliServer, close_all, read_jsonl

# The bridge's OTLP side reads these; the developer's shell must not change what a test sees.
_OTEL_VARS = [
    f"OTEL_EXPORTER_OTLP_{signal}{name}"
    for signal in ("", "TRACES_", "LOGS_")
    for name in ("ENDPOINT", "PROTOCOL", "HEADERS", "COMPRESSION", "TIMEOUT")
]
BRIDGE_ENV = {name: "" for name in [*_OTEL_VARS, "OTEL_SERVICE_NAME"]}


def start_sink(tmp_path: Path, name: str, *args: str) -> tuple[CliServer, Path]:
    out = tmp_path / f"{name}.jsonl"
    return CliServer("sink", "--out", str(out), *args), out


def start_bridge(*args: str, env: dict[str, str] | None = None) -> CliServer:
    return CliServer("bridge", *args, env={**BRIDGE_ENV, **(env or {})})


def url(server: CliServer, path: str = "") -> str:
    return f"http://{server.address}{path}"


def post_ray_events(bridge: CliServer, body: bytes) -> dict[str, Any]:
    """POST one JSON array of RayEvents as Ray's aggregator does; every event must be accepted."""
    response = requests.post(
        url(bridge, "/v1/ray-events"), data=body, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer["rejected"] == 0, answer
    return answer


def wait_until(read: Callable[[], list[Any]], n: int, timeout_s: float = 60.0) -> list[Any]:
    """Poll `read()` until it returns at least n items; fails the test, saying how many came, when
    they do not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        items = read()
        if len(items) >= n:
            return items
        assert time.monotonic() < deadline, f"{len(items)} of {n} items within {timeout_s} s"
        time.sleep(0.05)


def otlp_spans(path: Path) -> list[dict[str, Any]]:
    """Every span in a sink's OTLP/JSON lines, with `_resource` (attributes as a dict) added."""
    spans = []
    for line in read_jsonl(path):
        for resource_spans in line.get("resourceSpans", []):
            resource = _attrs(resource_spans.get("resource", {}).get("attributes", []))
            for scope_spans in resource_spans.get("scopeSpans", []):
                for span in scope_spans.get("spans", []):
                    spans.append(
                        {**span, "_resource": resource, "_attrs": _attrs(span.get("attributes", []))}
                    )
    return spans


def otlp_log_records(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in read_jsonl(path):
        for resource_logs in line.get("resourceLogs", []):
            for scope_logs in resource_logs.get("scopeLogs", []):
                for record in scope_logs.get("logRecords", []):
                    records.append({**record, "_attrs": _attrs(record.get("attributes", []))})
    return records


def any_value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON AnyValue as a plain value."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return value["doubleValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "arrayValue" in value:
        return [any_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return _attrs(value["kvlistValue"].get("values", []))
    return None


def _attrs(key_values: list[dict[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: any_value(kv.get("value", {})) for kv in key_values}


class ServerGroup:
    """Starts sinks and bridges and closes every one it started, even when a later start fails."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[CliServer] = []

    def sink(self, name: str, *args: str) -> tuple[CliServer, Path]:
        server, path = start_sink(self.tmp_path, name, *args)
        self.started.append(server)
        return server, path

    def bridge(self, *args: str, env: dict[str, str] | None = None) -> CliServer:
        server = start_bridge(*args, env=env)
        self.started.append(server)
        return server

    def close(self) -> None:
        close_all(self.started)

    def __enter__(self) -> ServerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
