"""Configuration: Ray's variable names, defaults, flags over env, and clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ray_otel_events.config import (
    DEFAULT_EXPOSABLE_EVENT_TYPES,
    AggregatorConfig,
    ConfigError,
    RecorderConfig,
    parse_exposable_event_types,
)
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

ET = RayEvent.EventType


def test_defaults_match_rays() -> None:
    agg = AggregatorConfig.from_env({})
    assert (agg.max_buffer_size, agg.max_batch_size, agg.publisher_max_retries) == (100_000, 1000, -1)
    assert (agg.publisher_initial_backoff_s, agg.publisher_max_backoff_s, agg.publisher_jitter_ratio) == (
        0.01,
        5.0,
        0.1,
    )
    assert agg.publisher_send_interval_s == 0.1 and agg.publisher_timeout_s == 3.0
    assert agg.exposable_event_types == DEFAULT_EXPOSABLE_EVENT_TYPES
    assert ET.TASK_PROFILE_EVENT not in DEFAULT_EXPOSABLE_EVENT_TYPES
    assert not agg.http_enabled
    rec = RecorderConfig.from_env({})
    assert (rec.max_queued_events, rec.report_interval_ms) == (10_000, 1000)


def test_rays_variable_names_are_read() -> None:
    env = {
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": "http://127.0.0.1:9/x",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_BUFFER_SIZE": "10",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_SEND_BATCH_SIZE": "3",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_PRESERVE_PROTO_FIELD_NAME": "True",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES": "TASK_PROFILE_EVENT,",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISH_EVENTS_TO_EXTERNAL_HTTP_SERVICE": "0",
    }
    agg = AggregatorConfig.from_env(env)
    assert agg.export_addr == "http://127.0.0.1:9/x" and agg.max_buffer_size == 10 and agg.max_batch_size == 3
    assert agg.preserve_proto_field_name and agg.exposable_event_types == {ET.TASK_PROFILE_EVENT}
    assert not agg.http_enabled  # publishing switched off although an address is set
    rec = RecorderConfig.from_env(
        {"RAY_ray_event_recorder_max_queued_events": "5", "RAY_ray_events_report_interval_ms": "20"}
    )
    assert (rec.max_queued_events, rec.report_interval_ms) == (5, 20)


def test_legacy_export_addr_is_accepted_and_the_current_name_wins() -> None:
    assert AggregatorConfig.from_env({"RAY_events_export_addr": "http://a/"}).export_addr == "http://a/"
    both = {
        "RAY_events_export_addr": "http://a/",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": "http://b/",
    }
    assert AggregatorConfig.from_env(both).export_addr == "http://b/"


def test_all_means_every_type() -> None:
    assert parse_exposable_event_types(" all ") is None


def test_flags_override_env() -> None:
    agg = AggregatorConfig.from_env({"RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": "http://env/"})
    assert agg.with_overrides(export_addr="http://flag/", max_batch_size=None).export_addr == "http://flag/"


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_BUFFER_SIZE": "lots"}, "MAX_EVENT_BUFFER_SIZE='lots'"),
        ({"RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_BUFFER_SIZE": "0"}, "must be > 0"),
        ({"RAY_DASHBOARD_AGGREGATOR_AGENT_PRESERVE_PROTO_FIELD_NAME": "maybe"}, "expected a boolean"),
        (
            {"RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES": "TASK_EVENT"},
            "unknown event type 'TASK_EVENT'",
        ),
        ({"RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": "127.0.0.1:80"}, "expected an http"),
        ({"RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_JITTER_RATIO": "2"}, "JITTER_RATIO"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        AggregatorConfig.from_env(env)
    assert needle in str(info.value)


def test_bad_recorder_value() -> None:
    with pytest.raises(ConfigError, match="RAY_ray_events_report_interval_ms"):
        RecorderConfig.from_env({"RAY_ray_events_report_interval_ms": "-5"})


def test_cli_reports_a_bad_value_without_a_traceback() -> None:
    env = {"RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_SEND_BATCH_SIZE": "ten", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "aggregator", "--grpc-port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "MAX_EVENT_SEND_BATCH_SIZE='ten'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_encoder_processes_default_to_the_writer_built_and_are_checked() -> None:
    """Unset: chosen by the aggregator (0 with the compiled JSON writer, else 2); set: as given."""
    assert AggregatorConfig.from_env({}).encoder_processes is None
    assert AggregatorConfig.from_env({"RAY_OTEL_EVENTS_ENCODER_PROCESSES": " "}).encoder_processes is None
    assert AggregatorConfig.from_env({"RAY_OTEL_EVENTS_ENCODER_PROCESSES": "0"}).encoder_processes == 0
    assert AggregatorConfig.from_env({"RAY_OTEL_EVENTS_ENCODER_PROCESSES": "3"}).encoder_processes == 3
    env = {"RAY_OTEL_EVENTS_ENCODER_PROCESSES": "65", "RAY_OTEL_EVENTS_EXPORT_ADDR": "http://a/"}
    with pytest.raises(ConfigError, match="RAY_OTEL_EVENTS_ENCODER_PROCESSES must be 0"):
        AggregatorConfig.from_env(env).validate()
