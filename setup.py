"""The compiled helpers, optional: the log-record walk (otel/_record_walk.c), OTLP values read from
their wire bytes (otel/_any_value_wire.c) and the RayEvent JSON reader (encoding/_ray_json_wire.c). Where no C compiler is present the build goes on without them
and the package runs the same Python code (the same results). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ray_otel_events.otel._record_walk",
            ["src/ray_otel_events/otel/_record_walk.c"],
            include_dirs=["src/ray_otel_events"],
            depends=["src/ray_otel_events/protobuf_wire.h"],
            optional=True,
        ),
        Extension(
            "ray_otel_events.otel._any_value_wire",
            ["src/ray_otel_events/otel/_any_value_wire.c"],
            include_dirs=["src/ray_otel_events"],
            depends=["src/ray_otel_events/protobuf_wire.h"],
            optional=True,
        ),
        Extension(
            "ray_otel_events.encoding._ray_json_wire",
            ["src/ray_otel_events/encoding/_ray_json_wire.c"],
            include_dirs=["src/ray_otel_events"],
            depends=["src/ray_otel_events/protobuf_wire.h"],
            optional=True,
        ),
    ]
)
