"""OTLP log records and export requests written from their parts (_otlp_wire.c)."""

def log_record(
    time_unix_nano: int,
    observed_time_unix_nano: int,
    severity_number: int,
    severity_text: str,
    body_entries: bytes | None,
    attributes: list[bytes],
    trace_id: bytes,
    span_id: bytes,
    flags: int,
    event_name: str,
    /,
) -> bytes: ...
def attributes(values: dict[str, object], tag: bytes, /) -> bytes | None: ...
def merge(items: list[bytes], /) -> bytes | None: ...
