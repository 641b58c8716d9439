"""The compiled helpers, optional: the log-record walk (otel/_record_walk.c), OTLP values read from
their wire bytes (otel/_any_value_wire.c) and the RayEvent JSON reader (encoding/_ray_json_wire.c).
Where no C compiler is present the build goes on without them and the package runs the same Python
code (the same results). Everything else is in pyproject.toml."""

from setuptools import Extension, setup


def _optional(module: str) -> Extension:
    """`ray_otel_events.<module>`, built from its .c file beside it, if it can be."""
    return Extension(
        f"ray_otel_events.{module}",
        [f"src/ray_otel_events/{module.replace('.', '/')}.c"],
        include_dirs=["src/ray_otel_events"],
        depends=["src/ray_otel_events/protobuf_wire.h"],
        optional=True,
    )


setup(
    ext_modules=[
        _optional(m) for m in ("otel._record_walk", "otel._any_value_wire", "encoding._ray_json_wire")
    ]
)
