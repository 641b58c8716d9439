"""The compiled helpers (src/ray_otel_events/native/, see docs/native.md), each optional: where no C
compiler is present the build goes on without them and the package runs their Python twins (the
same results). The store's row writer and intake also need SQLite's headers, the row writer and the raw events'
compression zlib's. Everything else is in
pyproject.toml."""

import glob

from setuptools import Extension, setup

_NATIVE = "src/ray_otel_events/native"
_HEADERS = sorted(glob.glob(f"{_NATIVE}/*.h"))


def _optional(name: str, libraries: tuple[str, ...] = ()) -> Extension:
    """`ray_otel_events.native.<name>`, built from native/<name>.c, if it can be."""
    return Extension(
        f"ray_otel_events.native.{name}",
        [f"{_NATIVE}/{name}.c"],
        include_dirs=[_NATIVE],
        depends=_HEADERS,
        libraries=list(libraries),
        optional=True,
    )


setup(
    ext_modules=[
        _optional(m)
        for m in (
            "_record_walk",
            "_any_value_wire",
            "_span_records",
            "_otlp_wire",
            "_entity_spans",
            "_event_head",
            "_posted_events",
            "_log_events",
            "_span_json",
            "_ray_json_wire",
            "_ray_json_encode",
            "_state_fold",
        )
    ]
    + [_optional("_row_writer", ("sqlite3", "z")), _optional("_post_fold", ("sqlite3",))]  # SQLite's, zlib's
    + [_optional("_raw_deflate", ("z",))]  # where zlib's headers are
)
