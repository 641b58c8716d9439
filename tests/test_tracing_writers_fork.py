"""The span file and spool writers keep their descriptor per process: a forked child, which
inherits the parent's open file, writes its own (`<pid>.json`, its own spool file) and leaves the
parent's as it was. Real forks, real files."""

from __future__ import annotations

import os
from pathlib import Path

from ray_otel_events.tracing.files import LineFileWriter
from ray_otel_events.tracing.spool import SPOOL_SUFFIX, SpoolWriter


def _in_child(write: object) -> int:
    """Runs `write()` in a forked child; returns the child's pid once it has exited cleanly."""
    pid = os.fork()
    if pid == 0:
        try:
            write()  # type: ignore[operator]
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return pid


def test_a_forked_child_writes_its_own_span_file(tmp_path: Path) -> None:
    writer: LineFileWriter[str] = LineFileWriter(str(tmp_path), ".json", str)
    assert writer.write_now("parent 1")
    child = _in_child(lambda: writer.write_now("child 1"))
    assert writer.write_now("parent 2")
    assert (tmp_path / f"{os.getpid()}.json").read_text() == "parent 1\nparent 2\n"
    assert (tmp_path / f"{child}.json").read_text() == "child 1\n"
    writer.close()


def test_a_forked_child_writes_its_own_spool_file(tmp_path: Path) -> None:
    writer = SpoolWriter(str(tmp_path), b"header\n", start_forwarder=False)
    assert writer.write(b"parent 1\n", 1)
    child = _in_child(lambda: writer.write(b"child 1\n", 1))
    assert writer.write(b"parent 2\n", 1)
    files = {path.name.split(".")[0]: path.read_bytes() for path in tmp_path.glob(f"*{SPOOL_SUFFIX}")}
    assert files == {
        str(os.getpid()): b"header\nparent 1\nparent 2\n",
        str(child): b"header\nchild 1\n",
    }
    writer.close()
