"""The tracing section of config.py: defaults, validation messages, OTLP protocol precedence."""

from __future__ import annotations

import pytest

from ray_otel_events.config import ConfigError, OtlpProtocols, TracingConfig


def test_defaults() -> None:
    cfg = TracingConfig.from_env({})
    assert cfg == TracingConfig(spans_dir="/tmp/spans", aggregator_address="", session_name="", node_id=b"")
    assert cfg.event_logs is None and cfg.sync_task_events is False and cfg.ray_wrappers is True
    assert OtlpProtocols.from_env({}) == OtlpProtocols("http/protobuf", "http/protobuf")


def test_values_are_read() -> None:
    cfg = TracingConfig.from_env(
        {
            "RAY_OTEL_EVENTS_SPANS_DIR": " /data/spans ",
            "RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS": "[::1]:5555",
            "RAY_OTEL_EVENTS_SESSION_NAME": "session_x",
            "RAY_OTEL_EVENTS_NODE_ID": "ab" * 28,
            "RAY_OTEL_EVENTS_EVENT_LOGS": "0",
            "RAY_OTEL_EVENTS_SYNC_TASK_EVENTS": "yes",
            "RAY_OTEL_EVENTS_RAY_WRAPPERS": "0",
        }
    )
    assert cfg.spans_dir == "/data/spans" and cfg.aggregator_address == "[::1]:5555"
    assert cfg.session_name == "session_x" and cfg.node_id == bytes.fromhex("ab" * 28)
    assert cfg.event_logs is False and cfg.sync_task_events is True and cfg.ray_wrappers is False


@pytest.mark.parametrize(
    "env,message",
    [
        (
            {"RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS": "localhost"},
            "RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS='localhost': expected host:port",
        ),
        ({"RAY_OTEL_EVENTS_AGGREGATOR_ADDRESS": "h:99999"}, "port must be 1..65535"),
        ({"RAY_OTEL_EVENTS_NODE_ID": "xyz"}, "RAY_OTEL_EVENTS_NODE_ID='xyz': expected hex"),
        ({"RAY_OTEL_EVENTS_NODE_ID": "abcd"}, "must be 28 bytes (56 hex digits), got 2"),
        ({"RAY_OTEL_EVENTS_EVENT_LOGS": "maybe"}, "RAY_OTEL_EVENTS_EVENT_LOGS='maybe': expected a boolean"),
        ({"RAY_OTEL_EVENTS_RAY_WRAPPERS": "some"}, "RAY_OTEL_EVENTS_RAY_WRAPPERS='some': expected a boolean"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        TracingConfig.from_env(env)
    assert message in str(caught.value)


def test_otlp_protocol_per_signal_wins_over_the_general_one() -> None:
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/protobuf"}
    assert OtlpProtocols.from_env(env) == OtlpProtocols(traces="grpc", logs="http/protobuf")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json': expected one of"):
        OtlpProtocols.from_env({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})
