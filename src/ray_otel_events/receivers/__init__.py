"""Servers that take data in (gRPC AddEvents; later OTLP and Ray-events HTTP)."""
