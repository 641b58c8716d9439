"""ray-otel-events: Ray-compatible lifecycle events and tracing, joined to OpenTelemetry."""

__version__ = "0.1.0"
