"""The compiled helpers (src/ray_otel_events/native/, see docs/native.md), each optional: where no C
compiler is present the build goes on without them and the package runs their Python twins (the
same results). The store's row writer and intake also need SQLite's headers, the row writer and
the raw events' compression zlib's. Everything else is in pyproject.toml."""

import glob

from setuptools import Extension, setup

_NATIVE = "src/ray_otel_events/native"
_HEADERS = sorted(glob.glob(f"{_NATIVE}/*.h"))
# Warning-clean under gcc and clang (a sign conversion once hid an out-of-bounds write); `make
# sanitize` and `make fuzz` add -Werror, the user's build only warns.
_WARNINGS = ["-Wall", "-Wextra", "-Wconversion", "-Wsign-compare"]


def _optional(name: str, libraries: tuple[str, ...] = ()) -> Extension:
    """`ray_otel_events.native.<name>`, built from native/<name>.c, if it can be."""
    return Extension(
        f"ray_otel_events.native.{name}",
        [f"{_NATIVE}/{name}.c"],
        include_dirs=[_NATIVE],
        depends=_HEADERS,
        libraries=list(libraries),
        extra_compile_args=_WARNINGS,
        optional=True,
    )


# Every compiled module, by the name of its source (docs/native.md lists the same; a test checks).
NATIVE_MODULES = (
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
    "_spool_lines",
    "_spool_line",
)
SQLITE_MODULES = ("_row_writer", "_post_fold")  # built only where SQLite's headers are
ZLIB_MODULES = ("_raw_deflate",)  # built only where zlib's headers are (the row writer and fold need both)
_LIBRARIES = {"_row_writer": ("sqlite3", "z"), "_post_fold": ("sqlite3", "z"), "_raw_deflate": ("z",)}


setup(
    ext_modules=[
        _optional(m, _LIBRARIES.get(m, ())) for m in (*NATIVE_MODULES, *SQLITE_MODULES, *ZLIB_MODULES)
    ]
)
