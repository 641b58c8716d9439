"""collector-config.yaml and collector-loadbalancing.yaml parse, name only current otelcol-contrib
components, and use all they define.

No Collector binary runs here (none is installable from PyPI), so this checks the file's structure
against the Collector's rules: every component a pipeline names is defined, every defined component
is used, storage references point at a defined extension, and the names are today's ones.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "collector-config.yaml"
LOADBALANCING = ROOT / "collector-loadbalancing.yaml"

# Component types that exist in otelcol-contrib under these (current) names.
KNOWN = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter", "batch"},
    "exporters": {"otlp_grpc", "otlp_http", "file", "debug", "loadbalancing"},
    "extensions": {"file_storage", "health_check"},
}
# Names that still load but are deprecated aliases since Collector v0.144.
DEPRECATED = {"exporters": {"otlp": "otlp_grpc", "otlphttp": "otlp_http"}}
KINDS = ("receivers", "processors", "exporters")


@pytest.fixture(scope="module", params=[CONFIG, LOADBALANCING], ids=lambda p: p.name)
def config(request: pytest.FixtureRequest) -> dict[str, Any]:
    value = yaml.safe_load(request.param.read_text())
    assert isinstance(value, dict)
    return value


def _type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def test_components_are_current_contrib_names(config: dict[str, Any]) -> None:
    for section, known in KNOWN.items():
        for component_id in config.get(section, {}):
            kind = _type(component_id)
            assert kind not in DEPRECATED.get(section, {}), f"{component_id}: use {DEPRECATED[section][kind]}"
            assert kind in known, f"{section}.{component_id} is not an otelcol-contrib component"


def test_every_component_is_defined_and_used(config: dict[str, Any]) -> None:
    pipelines = config["service"]["pipelines"]
    used: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for name, pipeline in pipelines.items():
        assert _type(name) in {"traces", "logs", "metrics"}, name
        assert pipeline["receivers"] and pipeline["exporters"], name
        for kind in KINDS:
            for component_id in pipeline.get(kind, []):
                assert component_id in config[kind], f"pipeline {name} names undefined {kind}.{component_id}"
                used[kind].add(component_id)
    for kind in KINDS:
        assert set(config[kind]) == used[kind], (
            f"{kind} defined but not used: {set(config[kind]) - used[kind]}"
        )
    extensions = config["service"]["extensions"]
    assert set(extensions) == set(config["extensions"])


def test_required_shape() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    assert protocols["http"]["endpoint"].endswith(":4318")
    pipelines = config["service"]["pipelines"]
    for pipeline in pipelines.values():
        assert pipeline["processors"][0] == "memory_limiter"  # first, as its docs require
    traces, logs = pipelines["traces"]["exporters"], pipelines["logs"]["exporters"]
    jaeger = [e for e in traces if _type(e) == "otlp_grpc"]
    assert jaeger, "traces must go to Jaeger over OTLP"
    assert not [e for e in logs if e in jaeger], "Jaeger has no logs pipeline"
    bridge = config["exporters"]["otlp_http/bridge"]
    assert "otlp_http/bridge" in traces and "otlp_http/bridge" in logs
    assert bridge["encoding"] == "json"
    assert bridge["traces_endpoint"].endswith("/v1/traces") and bridge["logs_endpoint"].endswith("/v1/logs")
    assert any(_type(e) == "file" for e in traces) and any(_type(e) == "file" for e in logs)


def test_sending_queues_are_persistent(config: dict[str, Any]) -> None:
    storages = {c for c in config["extensions"] if _type(c) == "file_storage"}
    queued = 0
    for component_id, settings in config["exporters"].items():
        settings = settings or {}
        # The loadbalancing exporter keeps its OTLP exporter's settings under protocol.otlp.
        nested = settings.get("protocol", {}).get("otlp", {})
        queue = settings.get("sending_queue") or nested.get("sending_queue")
        if queue is None:
            continue
        queued += 1
        assert queue.get("storage") in storages, (
            f"{component_id}: sending_queue.storage must be a file_storage"
        )
    assert queued >= 2
    for storage in storages:
        assert config["extensions"][storage]["directory"]


def test_loadbalancing_routes_logs_by_trace_id_to_assemblers_over_grpc() -> None:
    config = yaml.safe_load(LOADBALANCING.read_text())
    balancer = config["exporters"]["loadbalancing/assemblers"]
    assert balancer["routing_key"] == "traceID"
    assert "otlp" in balancer["protocol"]  # the only protocol it speaks: OTLP/gRPC
    hostnames = balancer["resolver"]["static"]["hostnames"]
    assert len(hostnames) >= 2 and all(h.rsplit(":", 1)[1].isdigit() for h in hostnames)
    pipelines = config["service"]["pipelines"]
    assert "loadbalancing/assemblers" in pipelines["logs"]["exporters"]
    assert "loadbalancing/assemblers" not in pipelines["traces"]["exporters"]  # no loop
    assert balancer["protocol"]["otlp"]["sending_queue"]["storage"] in config["extensions"]


def test_the_commands_the_example_names_exist() -> None:
    text = LOADBALANCING.read_text()
    usage = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "bridge", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for flag in ("--convert-only", "--assemble-only", "--grpc-port", "--otlp-endpoint", "--port"):
        assert flag in text and flag in usage, flag
