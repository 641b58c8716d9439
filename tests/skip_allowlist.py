"""The skips the suite may take, each with its reason (tests/conftest.py holds every run to them).

Any other skip fails the run, naming the test and its reason: a skip passes quietly, and a module
that did not build, an extra not installed or a missing /proc would otherwise leave tests unrun
with the run still green.
"""

from __future__ import annotations

ALLOWED: dict[str, str] = {
    "tests/test_ray_versions_live.py": "live clusters of Ray 2.49-2.55, each in a venv of its own: "
    "`make test-ray-versions` runs them (minutes of installs and cluster starts a release)",
}
"""Node id (a test's, or a module's for a skip at collection) -> why its skip is acceptable. Nothing
else: `make test` installs everything the suite needs (the ray and test extras, SQLite's and zlib's
headers, PostgreSQL, Chromium), so no other test has a reason to skip there."""

PURE_PYTHON_SKIPS = 134
"""The tests `make test-pure` (RAY_OTEL_EVENTS_PURE_PYTHON=1) skips, all of them checks of a
compiled half (helpers.pure_python.needs_compiled and skip_unless_compiled, whose reason says so).
Held to the number over the whole suite (`--whole-suite`, as the Makefile runs it): a test that newly
skips there is one whose Python twin no longer runs anywhere. Change it with the tests that change it."""
