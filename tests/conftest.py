"""Fixtures shared by the test modules that start CLI servers."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.agg_procs import CliServer
from helpers.postgres import PostgresServer
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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL for the whole run (helpers/postgres.py); each test takes a fresh database."""
    server = PostgresServer()  # in /tmp: pytest's folders are closed to the server's user
    yield server
    server.stop()


_databases = itertools.count()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """Where a test's store lives, once per backend: a SQLite file, or a new empty PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "events.sqlite3"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database(f"t{next(_databases)}")


@pytest.fixture
def new_store_location(
    store_location: str | Path, request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[str], str | Path]:
    """Further stores on the backend of `store_location` (a reference to compare with, say)."""

    def make(name: str) -> str | Path:
        if isinstance(store_location, Path):
            return tmp_path / f"{name}.sqlite3"
        server: PostgresServer = request.getfixturevalue("postgres_server")
        return server.new_database(f"t{next(_databases)}")

    return make
