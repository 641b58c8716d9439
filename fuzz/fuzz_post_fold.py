"""serve's intake of a RayEvent JSON POST (native/_post_fold.c: `scan` reads the text, `Folder.fold`
folds its task rows into SQLite) against its Python twin (orjson, store/state_merge.prepare and
the store's Python fold): the same answer (rejections named, or orjson's refusal), and where the
body is accepted, the same ingest results and the same rows, column for column."""

from __future__ import annotations

import tempfile
from pathlib import Path

import engine
import seeds

from tests.test_store_posted_fold import _ingest_both, _read_compiled, _read_python

# The stores of each accepted body live on a RAM disk where there is one.
_TEMP = "/dev/shm" if Path("/dev/shm").is_dir() else None


def check(data: bytes) -> None:
    compiled, python = _read_compiled(data), _read_python(data)
    if isinstance(compiled, str) or isinstance(python, str):
        assert compiled == python  # refused alike, with orjson's message
        return
    assert (len(compiled[0]), compiled[1]) == (len(python[0]), python[1])
    if python[0]:
        with tempfile.TemporaryDirectory(prefix="fuzz-post-fold-", dir=_TEMP) as directory:
            _ingest_both(Path(directory), [[data], [data]])  # again: read back, all duplicates


if __name__ == "__main__":
    engine.main(check, seeds.posted_bodies)
