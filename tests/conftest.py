"""Fixtures shared by the test modules that start CLI servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.agg_procs import CliServer


@pytest.fixture
def servers() -> Iterator[list[CliServer]]:
    """Every server a test starts (helpers.agg_procs.start); closed at the end whatever happened."""
    started: list[CliServer] = []
    yield started
    for server in started:
        server.close()
