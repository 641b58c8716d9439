"""Fixtures shared by the test modules that start CLI servers."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from helpers.agg_procs import CliServer
from hypothesis import settings

# No per-example deadline: speed is measured in bench/, and on a loaded machine hypothesis's default
# 200 ms deadline fails a correct example (a timing assertion in all but name).
settings.register_profile("no-deadline", deadline=None)
# `make sanitize` (fuzz/sanitize.py) sets HYPOTHESIS_PROFILE=sanitized: an example costs tens of
# times more under ASan and UBSan, so every property test runs a tenth of its examples
# (helpers.examples scales the counts the tests set), and the fuzzing covers the rest.
settings.register_profile("sanitized", deadline=None, max_examples=10)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "no-deadline"))


@pytest.fixture
def servers() -> Iterator[list[CliServer]]:
    """Every server a test starts (helpers.agg_procs.start); closed at the end whatever happened."""
    started: list[CliServer] = []
    yield started
    for server in started:
        server.close()
