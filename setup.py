"""The compiled log-record walk (src/ray_otel_events/otel/_record_walk.c), optional: where no C
compiler is present the build goes on without it and the package walks in Python (the same bytes).
Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ray_otel_events.otel._record_walk",
            ["src/ray_otel_events/otel/_record_walk.c"],
            optional=True,
        )
    ]
)
