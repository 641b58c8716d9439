"""One SQLite library and one writing process per store file.

The compiled store writer runs only where it calls the SQLite library Python's `sqlite3` calls
(checked at import: version, source id, the file it was loaded from); otherwise the store writes in
Python and says why. A second `serve` on a store another one writes is refused (exit 2), while the
CLI's readers still read it."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import requests
from helpers.agg_procs import FIXTURE, CliServer, clean_env, start
from helpers.pure_python import needs_compiled
from helpers.stored_rows import SELECT_ROWS, unpacked

from ray_otel_events.store import sqlite_store
from ray_otel_events.store.sqlite_library import (
    compiled_library,
    compiled_writer_refusal,
    python_library,
    real_file,
)
from ray_otel_events.store.sqlite_store import EventStore

try:
    from ray_otel_events.native import _post_fold, _row_writer
except ImportError:
    _row_writer = _post_fold = None  # type: ignore[assignment]

EVENTS: list[dict[str, Any]] = json.loads(Path(FIXTURE).read_text())
needs_row_writer = needs_compiled(
    _row_writer is not None and _post_fold is not None, "the store's row writer"
)


def _mapped_files() -> set[str]:
    """The real paths of the files mapped into this process."""
    files = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            files.add(os.path.realpath(fields[5]))
    return files


def _rows(store: EventStore) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(store.path)
    try:
        return unpacked(db.execute(SELECT_ROWS).fetchall())
    finally:
        db.close()


def test_pythons_library_is_the_one_its_sqlite3_module_loaded() -> None:
    python = python_library()
    assert python.version == sqlite3.sqlite_version
    with sqlite3.connect(":memory:") as db:
        assert python.source_id == db.execute("SELECT sqlite_source_id()").fetchone()[0]
    assert python.file is not None and python.file == os.path.realpath(python.file)
    assert python.file in _mapped_files()
    # A shared libsqlite3 that _sqlite3 links, or _sqlite3 itself where SQLite is built into it.
    assert "sqlite3" in Path(python.file).name


@needs_row_writer
def test_each_compiled_module_names_the_library_it_loaded(tmp_path: Path) -> None:
    for module in (_row_writer, _post_fold):
        version, source_id, file = module.sqlite_library()
        assert file is not None and Path(file).exists()
        library = compiled_library(module)
        assert library.file == real_file(file) and library.file in _mapped_files()
        assert (library.version, library.source_id) == (version, source_id)
    assert {
        "_row_writer": compiled_library(_row_writer),
        "_post_fold": compiled_library(_post_fold),
    } == sqlite_store.COMPILED_SQLITE
    refusal = compiled_writer_refusal(sqlite_store.PYTHON_SQLITE, sqlite_store.COMPILED_SQLITE)
    same = all(lib == sqlite_store.PYTHON_SQLITE for lib in sqlite_store.COMPILED_SQLITE.values())
    assert (refusal is None) == same
    store = EventStore(tmp_path / "events.sqlite3")
    assert (store.writer, store.writer_reason is None) == (("compiled", True) if same else ("python", False))
    store.close()


@needs_row_writer
def test_another_library_takes_the_python_writer_and_the_same_rows(tmp_path: Path) -> None:
    """What the modules would report with SQLite built into them (python-build-standalone's way),
    or built from another check-in: the store writes in Python, says why, and stores the same rows."""
    python = sqlite_store.PYTHON_SQLITE
    built_in = {
        name: lib._replace(file=real_file(module.__file__))
        for name, lib, module in (
            ("_row_writer", compiled_library(_row_writer), _row_writer),
            ("_post_fold", compiled_library(_post_fold), _post_fold),
        )
    }
    other_checkin = {"_row_writer": python._replace(source_id=python.source_id[:-8] + "00000000")}
    reference = EventStore(tmp_path / "compiled.sqlite3")
    reference.ingest(EVENTS, now=1000.0)
    for name, libraries in (("built-in", built_in), ("other", other_checkin)):
        store = EventStore(tmp_path / f"{name}.sqlite3", compiled_sqlite=libraries)
        assert store.writer == "python"
        assert store.writer_reason is not None
        assert store.writer_reason.startswith("not the SQLite library Python's sqlite3 uses: _row_writer")
        if name == "built-in":
            assert (
                real_file(_row_writer.__file__) in store.writer_reason
                and str(python.file) in store.writer_reason
            )
        else:
            assert other_checkin["_row_writer"].source_id in store.writer_reason
        store.ingest(EVENTS, now=1000.0)
        assert _rows(store) == _rows(reference)
        store.close()
    assert reference.writer == "compiled"
    reference.close()


def test_a_second_serve_on_one_store_is_refused_while_readers_read(
    servers: list[CliServer], tmp_path: Path
) -> None:
    store = tmp_path / "events.sqlite3"
    written = EventStore(store)
    written.ingest(EVENTS)
    written.close()
    first = start(servers, "serve", "--store", str(store))
    posted = requests.post(f"http://{first.address}/v1/ray-events", json=EVENTS, timeout=30)
    assert posted.status_code == 200 and posted.json()["accepted"] == len(EVENTS)
    writer = requests.get(f"http://{first.address}/readyz", timeout=30).json()["checks"]["store_writer"]
    assert writer["ok"] and writer["detail"].split(":")[0] in ("compiled", "python")
    metrics = requests.get(f"http://{first.address}/metrics", timeout=30).text
    kind = writer["detail"].split(":")[0]
    assert re.search(
        rf'^ray_otel_events_serve_store_writer{{reason="[^"]*",writer="{kind}"}} 1.0$', metrics, re.M
    )

    second = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "serve", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert second.returncode == 2, second.stderr
    assert f"{store} is in use by another ray-otel-events serve (pid {first.proc.pid}" in second.stderr
    assert "Traceback" not in second.stderr and "listening" not in second.stdout

    listed = subprocess.run(
        [sys.executable, "-m", "ray_otel_events", "list", "tasks", "--store", str(store), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) > 0

    first.stop()
    again = start(servers, "serve", "--store", str(store))  # the lock went with the first process
    assert requests.get(f"http://{again.address}/healthz", timeout=30).status_code == 200
