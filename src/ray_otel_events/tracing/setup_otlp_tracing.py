"""Startup hook: spans, event log records and task logs over OTLP to a Collector or Jaeger.

    ray start --head --tracing-startup-hook=ray_otel_events.tracing.setup_otlp_tracing:setup_tracing

Every traced process hands its spans and its task logs (prints and `logging` in a task, with its
trace context) to the node's spool (tracing/spool.py: a line per span and per log record in its own
file; an execution span's, with the lines its task wrote, before its task returns), and one
forwarder process per spool folder (tracing/forwarder.py) makes the OTLP spans, the event log
records and the task logs' OTLP log records and sends them. So a worker that Ray ends without exit
hooks (as it does to a job's workers at `ray.shutdown()`) has lost nothing, and an endpoint that is
down leaves the spool to be sent later (bounded; what is dropped is counted). Configured by the
standard variables: OTEL_EXPORTER_OTLP_ENDPOINT (or the per-signal _TRACES_/_LOGS_ forms),
_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, and
OTEL_EXPORTER_OTLP_PROTOCOL (`http/protobuf`, the default, or `grpc`); the spool by
RAY_OTEL_EVENTS_SPOOL_DIR and the other variables of `config.SpoolConfig`.
The hook never raises: a problem is reported once and the process runs on.
"""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource

from ray_otel_events.config import OtlpProtocols, SpoolConfig, TracingConfig, otlp_exporter_settings
from ray_otel_events.tracing.install import install_tracing, run_setup_hook
from ray_otel_events.tracing.ray_session import with_ray_session
from ray_otel_events.tracing.spool import (
    SpoolLogRecordProcessor,
    SpoolSpanProcessor,
    ensure_forwarder,
    spool_folder,
)

HOOK = "ray_otel_events.tracing.setup_otlp_tracing:setup_tracing"


def destination_key(config: TracingConfig) -> dict[str, str]:
    """What decides where and how the forwarder sends: processes that differ get their own folder."""
    key = otlp_exporter_settings()
    key["event_logs"] = str(config.event_logs is not False)
    return key  # not the session: each spool file's header names its own


def setup_tracing() -> None:
    run_setup_hook(HOOK, _install)


def _install() -> None:
    config = with_ray_session(TracingConfig.from_env())
    OtlpProtocols.from_env()  # a protocol the forwarder cannot send over is reported here, by the hook
    spool = SpoolConfig.from_env()
    resource = Resource.create()
    folder = spool_folder(spool.root, destination_key(config))
    processor = SpoolSpanProcessor(folder, resource, session_name=config.session_name)
    ensure_forwarder(folder)
    install_tracing(
        [processor],
        [SpoolLogRecordProcessor(processor)],
        config=config,
        resource=resource,
        event_logs=False,  # the forwarder makes the event records from the spooled spans
    )
