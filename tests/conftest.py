"""Fixtures shared by the test modules that start CLI servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.agg_procs import CliServer
from hypothesis import settings

# No per-example deadline: speed is measured in bench/, and on a loaded machine hypothesis's default
# 200 ms deadline fails a correct example (a timing assertion in all but name).
settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")


@pytest.fixture
def servers() -> Iterator[list[CliServer]]:
    """Every server a test starts (helpers.agg_procs.start); closed at the end whatever happened."""
    started: list[CliServer] = []
    yield started
    for server in started:
        server.close()
