"""Fixtures shared by the test modules that start CLI servers."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.agg_procs import CliServer, close_all
from helpers.postgres import PostgresServer
from helpers.pure_python import COMPILED_ONLY
from hypothesis import settings
from skip_allowlist import ALLOWED, PURE_PYTHON_SKIPS

from ray_otel_events import native

# No per-example deadline: speed is measured in bench/, and on a loaded machine hypothesis's default
# 200 ms deadline fails a correct example (a timing assertion in all but name).
# Half of each property test's examples (helpers.examples scales the counts the tests set): the
# suite stays under 10 minutes on 2 cores, hypothesis draws new examples each run, and `make fuzz`
# runs the compiled readers these tests compare for as long as it is given.
settings.register_profile("no-deadline", deadline=None, max_examples=50)
# `make sanitize` (fuzz/sanitize.py) sets HYPOTHESIS_PROFILE=sanitized: an example costs tens of
# times more under ASan and UBSan, so every property test runs a tenth of its examples
# (helpers.examples scales the counts the tests set), and the fuzzing covers the rest.
settings.register_profile("sanitized", deadline=None, max_examples=10)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "no-deadline"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--whole-suite",
        action="store_true",
        help="this run is the whole suite: hold its compiled-only skips to tests/skip_allowlist.py's count",
    )


_skips: dict[str, str] = {}  # node id -> reason, of every test or module skipped in this run
_skip_problems: list[str] = []


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skips[report.nodeid] = _skip_reason(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skips[report.nodeid] = _skip_reason(report)


# The slowest modules (each starts live Ray clusters, Phoenix or Chromium), slowest first, as the last
# whole runs measured them. `make test` runs three pytest-xdist workers that each take whole modules
# (--dist loadfile, so a module's clusters start once) in collection order: these go first, and the
# many short modules fill in beside them instead of one long module running alone at the end. Only
# the order changes. Every long module belongs here: xdist hands a worker its next module as soon as
# two or fewer of its current module's tests are left, so a long one left in alphabetical order
# (`test_tracing_*` and the Chromium pages, `test_web_page*`, come last) starts late and ends the
# run alone on one worker.
SLOW_FIRST = (
    "test_docs_blocks.py",
    "test_ray_env.py",
    "test_tracing_otlp_spool.py",
    "test_ray_user_path.py",
    "test_ray_data_train.py",
    "test_ray_dashboard.py",
    "test_tracing_lineage.py",
    "test_ray_token_auth.py",
    "test_ray_wrappers.py",
    "test_state_cli_and_intake.py",
    "test_tracing_serve.py",
    "test_tracing_serve_otlp.py",
    "test_store_poison.py",
    "test_tracing_ray.py",
    # Not measured in a whole run: alone, on a machine loaded 10-20 (so only as a rough order), 112 s,
    # 48 s, 41 s, 32 s, 14-30 s, 19 s. Each sorts late.
    "test_bridge_real_ray.py",
    "test_tracing_serve_exporter.py",
    "test_tracing_pool.py",
    "test_web_page_auth.py",
    "test_web_page.py",
    "test_tracing_pool_start_methods.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module keeps its order


def _xdist_worker(config: pytest.Config) -> bool:
    """True in a pytest-xdist worker (`make test` runs three): it sees only its share of the tests,
    and every report reaches the controlling process, which alone holds the run to the allowlist."""
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run on a skip tests/skip_allowlist.py does not list: a skip passes quietly, so a
    module that did not build or an extra not installed would leave tests unrun in a green run.
    With the compiled helpers off, a check of a compiled half may skip (its reason says so), and
    over the whole suite exactly as many as the allowlist counts."""
    if _xdist_worker(session.config):
        return
    compiled_only = 0
    for nodeid, reason in sorted(_skips.items()):
        if nodeid in ALLOWED:
            continue
        if not native.ENABLED and reason.endswith(COMPILED_ONLY):
            compiled_only += 1
            continue
        _skip_problems.append(f"{nodeid} skipped, not on tests/skip_allowlist.py's list: {reason}")
    if not native.ENABLED and session.config.getoption("whole_suite") and compiled_only != PURE_PYTHON_SKIPS:
        _skip_problems.append(
            f"{compiled_only} compiled-only skips where tests/skip_allowlist.py counts {PURE_PYTHON_SKIPS}"
        )
    if _skip_problems and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skip_problems:
        terminalreporter.section("skips not allowed", sep="=", red=True, bold=True)
        for problem in _skip_problems:
            terminalreporter.line(problem, red=True)


@pytest.fixture
def servers() -> Iterator[list[CliServer]]:
    """Every server a test starts (helpers.agg_procs.start); closed at the end whatever happened, and
    checked (helpers.agg_procs.close_all): an exit the test did not ask for, or a traceback, fails it."""
    started: list[CliServer] = []
    yield started
    close_all(started)


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
