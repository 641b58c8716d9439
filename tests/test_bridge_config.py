"""The bridge's settings: OTLP exporter variables per the OTLP exporter spec, flags over environment."""

from __future__ import annotations

import pytest

from ray_otel_events.config import BridgeConfig, ConfigError, otlp_signal_config


def test_endpoint_precedence() -> None:
    assert otlp_signal_config("traces", env={}).endpoint == "http://localhost:4318/v1/traces"
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert otlp_signal_config("logs", env=base).endpoint == "http://collector:4318/v1/logs"
    specific = {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:9999/custom"}
    assert otlp_signal_config("traces", env=specific).endpoint == "http://other:9999/custom"  # as is
    assert otlp_signal_config("logs", env=specific).endpoint == "http://collector:4318/v1/logs"
    flag = otlp_signal_config("traces", endpoint_override="http://flag:1", env=specific)
    assert flag.endpoint == "http://flag:1/v1/traces"  # the flag wins over every variable


def test_protocol_headers_compression_timeout() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
        "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b, x=1",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500",
    }
    traces = otlp_signal_config("traces", env=env)
    logs = otlp_signal_config("logs", env=env)
    assert traces.protocol == "http/json" and logs.protocol == "http/protobuf"
    assert dict(traces.headers) == {"api-key": "a b", "x": "1"}
    assert traces.compression == "gzip" and traces.timeout_s == 2.5 and logs.timeout_s == 10.0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTLP over HTTP only"),
        ({"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, "expected gzip or none"),
        ({"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "expected key=value"),
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, "expected a number"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "expected an http:// or https:// URL"),
    ],
)
def test_bad_otlp_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        otlp_signal_config("traces", env=env)
    assert "OTEL_EXPORTER_OTLP" in str(info.value)


def test_bridge_config_from_env_and_flags() -> None:
    cfg = BridgeConfig.from_env({"RAY_OTEL_EVENTS_BRIDGE_QUEUE_SIZE": "7", "OTEL_SERVICE_NAME": "cluster-a"})
    assert cfg.queue_size == 7 and cfg.service_name == "cluster-a"
    cfg = cfg.with_overrides(queue_size=9, export_addr="http://sink/x", port=None)
    assert cfg.queue_size == 9 and cfg.port == 0
    with pytest.raises(ConfigError, match="--export-addr='sink:1'"):
        cfg.with_overrides(export_addr="sink:1")
    with pytest.raises(ConfigError, match="RAY_OTEL_EVENTS_BRIDGE_ENTITY_TTL_SECONDS must be > 0"):
        BridgeConfig.from_env({"RAY_OTEL_EVENTS_BRIDGE_ENTITY_TTL_SECONDS": "0"})
