"""Operating the servers: /metrics equal to what really happened, health probes, logs and exit table."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
import requests
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers.agg_procs import (
    FIXTURE,
    TASK_TYPES,
    CliServer,
    check_ended_well,
    clean_env,
    read_jsonl,
    run_producer,
    start,
    start_aggregator,
    wait_for_lines,
)
from helpers.bridge_procs import otlp_log_records, otlp_spans
from prometheus_client.parser import text_string_to_metric_families

from ray_otel_events.config import AggregatorConfig, RecorderConfig


def scrape(url: str) -> dict[str, float]:
    """{'name{k="v",...}': value} for every sample, and 'name' alone for the sum over label sets."""
    response = requests.get(url, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain")
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples


def test_metrics_equal_what_the_sink_received_and_what_was_dropped(
    servers: list[CliServer], tmp_path: Path
) -> None:
    out = tmp_path / "events.jsonl"
    # The first POST is refused for good (400): those events are dropped, counted with the status.
    sink = start(servers, "sink", "--out", str(out), "--fail-first", "1", "--fail-status", "400")
    agg, metrics = start_aggregator(servers, sink, "--max-batch-size", "10")
    sent = run_producer(agg.address, "--fixture", FIXTURE, "--count", "60", "--types", TASK_TYPES)
    deadline = time.monotonic() + 30
    while True:
        m = scrape(f"{metrics}/metrics")
        settled = m.get("ray_otel_events_publisher_published_total", 0) + m.get(
            "ray_otel_events_publisher_rejected_total", 0
        )
        if settled >= 60 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    delivered = read_jsonl(out)
    sink_m = scrape(f"http://{sink.address}/metrics")
    assert m["ray_otel_events_receiver_received_total"] == sent["sent"] == 60
    published = m["ray_otel_events_publisher_published_total"]
    rejected = m["ray_otel_events_publisher_rejected_total"]
    assert published == len(delivered) == sink_m["ray_otel_events_sink_events_total"]
    assert rejected > 0 and published + rejected == 60
    assert m['ray_otel_events_publisher_failures_by_status_total{publisher="http_service",status="400"}'] == 1
    assert (
        m["ray_otel_events_publisher_requests_sent_total"]
        == sink_m["ray_otel_events_sink_requests_total"] - 1
    )
    assert m['ray_otel_events_queue_events{queue="events"}'] == 0
    assert m['ray_otel_events_publisher_consecutive_failures{publisher="http_service"}'] == 0
    assert (
        m['ray_otel_events_publish_duration_seconds_count{publisher="http_service"}']
        == sink_m["ray_otel_events_sink_requests_total"]
    )
    assert m["ray_otel_events_process_cpu_seconds_total"] > 0
    stats = agg.stop()
    assert sum(stats["publishers"]["http_service"]["rejected"].values()) == rejected


def test_health_probes_and_grpc_health(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    sink = start(servers, "sink", "--out", str(out), "--fail-first", "1000000", "--fail-status", "503")
    agg, metrics = start_aggregator(servers, sink)
    assert requests.get(metrics + "/healthz", timeout=5).json() == {"status": "ok"}
    ready = requests.get(metrics + "/readyz", timeout=5)
    assert ready.status_code == 200 and ready.json()["ready"] is True
    with grpc.insecure_channel(agg.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "ray.rpc.events.EventAggregatorService"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    # The destination keeps answering 503: not ready (send traffic elsewhere), still alive.
    run_producer(agg.address, "--fixture", FIXTURE, "--count", "5", "--types", TASK_TYPES)
    deadline = time.monotonic() + 20
    while requests.get(metrics + "/readyz", timeout=5).status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    ready = requests.get(metrics + "/readyz", timeout=5)
    assert ready.status_code == 503
    checks = ready.json()["checks"]
    assert checks["exporter_http_service"]["ok"] is False and checks["listening"]["ok"] is True
    assert requests.get(metrics + "/healthz", timeout=5).status_code == 200
    # Bridge and sink serve the same probes on their own port.
    assert requests.get(f"http://{sink.address}/healthz", timeout=5).status_code == 200
    assert requests.get(f"http://{sink.address}/readyz", timeout=5).json()["ready"] is True


def test_bridge_metrics_count_what_it_did(servers: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    sink = start(servers, "sink", "--out", str(out))
    bridge = start(
        servers,
        "bridge",
        "--export-addr",
        f"http://{sink.address}/events",
        "--otlp-endpoint",
        f"http://{sink.address}",
        "--terminal-grace",
        "0.2",
    )
    wrapped = json.loads(
        (Path(__file__).parent / "fixtures" / "ray-2.60" / "TASK_LIFECYCLE_EVENT.json").read_text()
    )
    events = [item["event"] for item in wrapped]
    response = requests.post(f"http://{bridge.address}/v1/ray-events", json=events, timeout=10)
    assert response.status_code == 200, response.text
    m = scrape(f"http://{bridge.address}/metrics")
    assert m["ray_otel_events_ray_events_receiver_accepted_events_total"] == len(events)
    assert "ray_otel_events_assembler_open_entities" in m
    assert requests.get(f"http://{bridge.address}/readyz", timeout=5).json()["ready"] is True
    stats = bridge.stop()  # flushes: the spans (done or not) and the events' log records go out
    exported = {
        signal: sum(s["value"] for s in c["exported_items"]) for signal, c in stats["otlp_exporter"].items()
    }
    spans = sum(s["value"] for s in stats["ray_events_to_otel"]["spans"])
    assert exported == {"traces": spans, "logs": len(events)} and spans > 0
    wait_for_lines(out, 2)  # one OTLP request of each signal, as the sink received them
    assert len(otlp_spans(out)) == spans and len(otlp_log_records(out)) == len(events)


def test_text_logs_and_exit_table_for_people(tmp_path: Path) -> None:
    """Default format: readable log lines on stderr, a short table (not a JSON line) at exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_otel_events", "sink", "--out", str(tmp_path / "o.jsonl")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.startswith("listening http=127.0.0.1:")
    address = ready.strip().split("=", 1)[1]
    requests.post(f"http://{address}/x", json=[{"a": 1}, {"a": 2}], timeout=5)
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    check_ended_well(proc, err, ended_by_test=False)  # exit 0, no traceback
    lines = out.splitlines()
    assert lines[0] == "sink summary"
    assert any(line.split() == ["events", "2"] for line in lines), out
    assert "stats {" not in out
    assert "SIGTERM received" in err


def test_json_logs_are_one_object_per_line(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_otel_events", "aggregator", "--log-format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("listening grpc=")
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    check_ended_well(proc, err, ended_by_test=False)
    records = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any("ready" in r["message"] for r in records)
    assert out.splitlines()[-1].startswith("stats {")


def test_version_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "--version"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0 and out.stdout.startswith("ray-otel-events 0.")


def test_ray_exposable_types_names_the_per_publisher_one_wins() -> None:
    old = "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES"
    new = "RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_HTTP_ENDPOINT_EXPOSABLE_EVENT_TYPES"
    both = AggregatorConfig.from_env({old: "TASK_DEFINITION_EVENT", new: "NODE_DEFINITION_EVENT"})
    assert both.exposable_event_types == frozenset({7})  # NODE_DEFINITION_EVENT
    only_old = AggregatorConfig.from_env({old: "ALL"})
    assert only_old.exposable_event_types is None
    only_new = AggregatorConfig.from_env({new: "ALL"})
    assert only_new.exposable_event_types is None
    with pytest.raises(ValueError, match=new):
        AggregatorConfig.from_env({new: "NOT_A_TYPE"})


def test_ray_enable_ray_event_switches_the_recorder() -> None:
    assert RecorderConfig.from_env({}).enabled is True
    assert RecorderConfig.from_env({"RAY_enable_ray_event": "0"}).enabled is False
    assert RecorderConfig.from_env({"RAY_enable_ray_event": "1"}).enabled is True
