"""The compiled helpers, optional: the log-record walk (otel/_record_walk.c), OTLP values read from
their wire bytes (otel/_any_value_wire.c), spans' JSON records written from theirs
(otel/_span_records.c), OTLP log records and requests written from their parts (otel/_otlp_wire.c), the
RayEvents converter's core and task spans (otel/_entity_spans.c), a RayEvent's head
(otel/_event_head.c), a POST's RayEvents read from its JSON text (otel/_posted_events.c), a logs
request's RayEvents read from its protobuf bytes (otel/_log_events.c), span lines' ISO times (otel/_span_json.c),
the RayEvent JSON reader (encoding/_ray_json_wire.c) and writer
(encoding/_ray_json_encode.c), and
the store's fold (store/_state_fold.c), its row writer (store/_row_writer.c) and its intake from a
POST's text (store/_post_fold.c; the last two also need SQLite's headers).
Where no C compiler is present the build goes on without them and the package runs the same Python
code (the same results). Everything else is in pyproject.toml."""

from setuptools import Extension, setup


def _optional(module: str, libraries: tuple[str, ...] = ()) -> Extension:
    """`ray_otel_events.<module>`, built from its .c file beside it, if it can be."""
    return Extension(
        f"ray_otel_events.{module}",
        [f"src/ray_otel_events/{module.replace('.', '/')}.c"],
        include_dirs=["src/ray_otel_events"],
        depends=[
            f"src/ray_otel_events/{h}"
            for h in (
                "protobuf_wire.h",
                "json_text.h",
                "json_lexer.h",
                "otlp_span_wire.h",
                "otlp_wire.h",
                "civil_dates.h",
                "ray_json_values.h",
                "packed_rows.h",
            )
        ],
        libraries=list(libraries),
        optional=True,
    )


setup(
    ext_modules=[
        _optional(m)
        for m in (
            "otel._record_walk",
            "otel._any_value_wire",
            "otel._span_records",
            "otel._otlp_wire",
            "otel._entity_spans",
            "otel._event_head",
            "otel._posted_events",
            "otel._log_events",
            "otel._span_json",
            "encoding._ray_json_wire",
            "encoding._ray_json_encode",
            "store._state_fold",
        )
    ]
    + [_optional(m, ("sqlite3",)) for m in ("store._row_writer", "store._post_fold")]  # where SQLite's headers are
)
