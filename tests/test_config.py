"""Configuration: Ray's variable names, defaults, flags over env, and clear errors."""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ray_otel_events.config import (
    DEFAULT_EXPOSABLE_EVENT_TYPES,
    AggregatorConfig,
    ConfigError,
    RecorderConfig,
    ServerLimitsConfig,
    data_home,
    otlp_export_config,
    otlp_signal_config,
    otlp_timeout_s,
    parse_exposable_event_types,
    serve_address,
    serve_tracing_exporter,
    store_fold_linger_s,
    store_max_pending_bytes,
    timezone_name,
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


def test_otlp_insecure_per_signal_wins_and_only_true_is_true(caplog: pytest.LogCaptureFixture) -> None:
    """As the SDK reads it: `true` (any case) is no TLS, the per-signal variable wins, unset leaves
    it to the endpoint's scheme; another value is false, as the spec says, with a warning naming it."""
    grpc = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert otlp_export_config("traces", {**grpc}).insecure is None
    assert otlp_export_config("traces", {**grpc, "OTEL_EXPORTER_OTLP_INSECURE": "TRUE"}).insecure is True
    both = {**grpc, "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_EXPORTER_OTLP_LOGS_INSECURE": "false"}
    assert otlp_export_config("logs", both).insecure is False
    assert otlp_export_config("traces", both).insecure is True
    with caplog.at_level(logging.WARNING, logger="ray_otel_events.config"):
        assert otlp_export_config("traces", {**grpc, "OTEL_EXPORTER_OTLP_INSECURE": "yes"}).insecure is False
    assert "OTEL_EXPORTER_OTLP_INSECURE='yes': expected true or false" in caplog.text


def test_otlp_timeout_is_milliseconds_whatever_the_protocol() -> None:
    assert otlp_timeout_s("logs", {}) is None
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}
    assert otlp_timeout_s("logs", env) == 2.5
    assert otlp_timeout_s("logs", {**env, "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT": "100"}) == 0.1
    for raw, needle in (("soon", "OTEL_EXPORTER_OTLP_TIMEOUT='soon': expected a number"), ("0", "> 0")):
        with pytest.raises(ConfigError, match=needle):
            otlp_timeout_s("traces", {"OTEL_EXPORTER_OTLP_TIMEOUT": raw})


def test_the_client_certificate_and_key_are_read_per_signal(caplog: pytest.LogCaptureFixture) -> None:
    """Mutual TLS: OTEL_EXPORTER_OTLP_[SIGNAL_]CLIENT_CERTIFICATE / _CLIENT_KEY, the per-signal one
    winning, in both protocols; a key without a certificate is named in a warning."""
    env = {
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/c.pem",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY": "/k.pem",
        "OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY": "/logs-k.pem",
    }
    traces, logs = otlp_signal_config("traces", env=env), otlp_signal_config("logs", env=env)
    assert (traces.client_certificate, traces.client_key) == ("/c.pem", "/k.pem")
    assert (logs.client_certificate, logs.client_key) == ("/c.pem", "/logs-k.pem")
    grpc = otlp_export_config("logs", {**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert (grpc.protocol, grpc.client_certificate, grpc.client_key) == ("grpc", "/c.pem", "/logs-k.pem")
    assert otlp_signal_config("traces", env={"OTEL_EXPORTER_OTLP_CLIENT_KEY": " "}).client_key == ""
    with caplog.at_level(logging.WARNING):
        alone = otlp_signal_config("traces", env={"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": "/k.pem"})
    assert alone.client_certificate == ""
    assert "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY is set without a client certificate" in caplog.text


def test_the_commands_settings_and_their_defaults() -> None:
    assert data_home({"XDG_DATA_HOME": "/data"}) == "/data"
    assert data_home({}) == os.path.join(os.path.expanduser("~"), ".local", "share")
    assert timezone_name({"TZ": "America/Sao_Paulo"}) == "America/Sao_Paulo"
    assert timezone_name({}) != ""  # the /etc/localtime link's zone, else UTC
    assert serve_tracing_exporter({}) == ""
    assert serve_address({}) is None and serve_address({"RAY_OTEL_EVENTS_ADDRESS": " "}) is None
    assert serve_address({"RAY_OTEL_EVENTS_ADDRESS": "127.0.0.1:8265"}) == "http://127.0.0.1:8265"
    assert serve_address({"RAY_OTEL_EVENTS_ADDRESS": "https://h:1/p"}) == "https://h:1/p"
    for raw, needle in (("ftp://h:1", "expected http://HOST:PORT"), ("h:99999", "the port must be")):
        with pytest.raises(ConfigError, match=f"RAY_OTEL_EVENTS_ADDRESS='{raw}': {needle}"):
            serve_address({"RAY_OTEL_EVENTS_ADDRESS": raw})


def test_store_rebuild_help_names_the_store_variable_and_the_data_home(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "store", "rebuild", "--help"],
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"$RAY_OTEL_EVENTS_STORE, else {tmp_path}/ray-otel-events/events.sqlite3" in proc.stdout


def test_server_limits_from_env_and_flags_with_errors_naming_the_variable() -> None:
    env = {
        "RAY_OTEL_EVENTS_MAX_BODIES_BYTES": "1048576",
        "RAY_OTEL_EVENTS_MAX_CONNECTIONS": "10",
        "RAY_OTEL_EVENTS_IDLE_TIMEOUT_SECONDS": "2.5",
        "RAY_OTEL_EVENTS_BODY_TIMEOUT_SECONDS": "7",
    }
    limits = ServerLimitsConfig.from_env(env)
    assert (limits.max_bodies_bytes, limits.max_connections) == (1048576, 10)
    assert (limits.idle_timeout_s, limits.body_timeout_s) == (2.5, 7.0)
    assert limits.with_overrides(max_connections=3, idle_timeout_s=None).max_connections == 3
    assert ServerLimitsConfig.from_env({}) == ServerLimitsConfig()
    with pytest.raises(ConfigError, match="RAY_OTEL_EVENTS_MAX_CONNECTIONS"):
        ServerLimitsConfig.from_env({"RAY_OTEL_EVENTS_MAX_CONNECTIONS": "0"})
    with pytest.raises(ConfigError, match="RAY_OTEL_EVENTS_BODY_TIMEOUT_SECONDS"):
        ServerLimitsConfig().with_overrides(body_timeout_s=-1.0)


def test_store_max_pending_bytes_is_read_and_checked() -> None:
    assert store_max_pending_bytes({}) == 64 * 1024 * 1024
    assert store_max_pending_bytes({"RAY_OTEL_EVENTS_STORE_MAX_PENDING_BYTES": "1000"}) == 1000
    for bad in ("0", "-5", "lots"):
        with pytest.raises(ConfigError, match="RAY_OTEL_EVENTS_STORE_MAX_PENDING_BYTES"):
            store_max_pending_bytes({"RAY_OTEL_EVENTS_STORE_MAX_PENDING_BYTES": bad})


def test_store_fold_linger_is_read_and_checked() -> None:
    assert store_fold_linger_s({}) == 1.0
    assert store_fold_linger_s({"RAY_OTEL_EVENTS_STORE_FOLD_LINGER_SECONDS": "0"}) == 0
    for bad in ("-1", "61", "soon"):
        with pytest.raises(ConfigError, match="RAY_OTEL_EVENTS_STORE_FOLD_LINGER_SECONDS"):
            store_fold_linger_s({"RAY_OTEL_EVENTS_STORE_FOLD_LINGER_SECONDS": bad})


def test_the_mmap_threshold_is_read_and_checked() -> None:
    assert ServerLimitsConfig.from_env({}).mmap_threshold_bytes == 128 * 1024
    assert (
        ServerLimitsConfig.from_env({"RAY_OTEL_EVENTS_MMAP_THRESHOLD_BYTES": "0"}).mmap_threshold_bytes == 0
    )
    for bad in ("-1", str(64 * 1024 * 1024), "big"):
        with pytest.raises(ConfigError, match="RAY_OTEL_EVENTS_MMAP_THRESHOLD_BYTES"):
            ServerLimitsConfig.from_env({"RAY_OTEL_EVENTS_MMAP_THRESHOLD_BYTES": bad})


_SECOND_BLOCK = """
import ctypes, sys
from ray_otel_events.security.http_limits import map_large_blocks
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype, libc.malloc.restype = Info, ctypes.c_void_p
map_large_blocks(int(sys.argv[1]))
libc.free(ctypes.c_void_p(libc.malloc(4 << 20)))  # glibc's own threshold rises past this block
mapped = libc.mallinfo2().hblks
block = libc.malloc(4 << 20)
print(libc.mallinfo2().hblks - mapped)  # is the second one mapped apart?
libc.free(ctypes.c_void_p(block))
"""


@pytest.mark.skipif(sys.platform != "linux" or not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc's")
def test_a_server_keeps_large_blocks_off_the_heap_after_one_is_freed() -> None:
    """With the threshold set (every server's guard sets it), a body-sized block freed does not
    send the next ones into the heap, whose holes glibc keeps: it stays mapped apart."""
    answers = [
        subprocess.run(
            [sys.executable, "-c", _SECOND_BLOCK, threshold], capture_output=True, text=True, timeout=60
        )
        for threshold in ("0", str(128 * 1024))
    ]
    assert [a.stdout.strip() for a in answers] == ["0", "1"], [a.stderr for a in answers]
