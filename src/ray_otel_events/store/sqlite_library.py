"""Whether the compiled store writer calls the same SQLite library as Python's `sqlite3`.

The row writer (native/_row_writer.c) and the compiled fold (native/_post_fold.c) open the store's
file with the SQLite they were linked against; the store opens it too, through Python's `sqlite3`.
Two SQLite libraries in one process on one file can corrupt it: each keeps its own POSIX locks and
file bookkeeping, and one library's close drops the other's locks. They differ wherever Python
carries its own SQLite (python-build-standalone, conda, macOS's system Python). So the compiled
writer runs only when every compiled module names the same library as Python's `_sqlite3`: the same
version, the same source id, loaded from the same file; otherwise the store writes through Python
and says why (`compiled_writer_refusal`).
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
from collections.abc import Mapping
from typing import NamedTuple


class SqliteLibrary(NamedTuple):
    """A SQLite library as loaded in this process."""

    version: str  # sqlite3_libversion()
    source_id: str  # sqlite3_sourceid(): the exact check-in, which a version alone does not name
    file: str | None  # the real path of the file holding sqlite3_libversion; None: unknown


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _file_of(address: int) -> str | None:
    """The file mapped at `address` in this process: dladdr where the C library has it, else the
    mapping in /proc/self/maps."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except (AttributeError, OSError):
        dladdr = None
    if dladdr is not None:
        info = _DlInfo()
        if dladdr(ctypes.c_void_p(address), ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                low, _, high = fields[0].partition("-")
                if len(fields) == 6 and int(low, 16) <= address < int(high, 16):
                    return fields[5].strip()
    except OSError:
        pass
    return None


def real_file(file: str | None) -> str | None:
    """`file` with its symbolic links resolved (libsqlite3.so.0 -> libsqlite3.so.0.8.6)."""
    return os.path.realpath(file) if file else None


def python_library() -> SqliteLibrary:
    """The SQLite Python's `sqlite3` calls: the file `_sqlite3`'s own lookup of sqlite3_libversion
    finds (a shared libsqlite3 it links, or `_sqlite3` itself where SQLite is built into it)."""
    import _sqlite3

    with sqlite3.connect(":memory:") as db:
        source_id = db.execute("SELECT sqlite_source_id()").fetchone()[0]
    module = _sqlite3.__file__
    try:
        symbol = ctypes.CDLL(module).sqlite3_libversion  # already loaded: the same handle
        address = ctypes.cast(symbol, ctypes.c_void_p).value
        file = _file_of(address) if address else module
    except (AttributeError, OSError):  # SQLite built into the module, its symbols hidden
        file = module
    return SqliteLibrary(sqlite3.sqlite_version, source_id, real_file(file))


def compiled_library(module: object) -> SqliteLibrary:
    """The SQLite a compiled module (_row_writer, _post_fold) calls, as it reports it."""
    version, source_id, file = module.sqlite_library()  # type: ignore[attr-defined]
    return SqliteLibrary(version, source_id, real_file(file))


def compiled_writer_refusal(python: SqliteLibrary, compiled: Mapping[str, SqliteLibrary]) -> str | None:
    """Why the compiled modules (name -> the library each calls) may not write beside Python's
    `sqlite3`, or None when every one calls Python's library."""
    for name, library in compiled.items():
        if library.file is None or python.file is None:
            return f"cannot tell which SQLite library {name} calls (dladdr found no file)"
        if library.version != python.version or library.source_id != python.source_id:
            return (
                f"{name} links SQLite {library.version} ({library.source_id}),"
                f" Python's sqlite3 SQLite {python.version} ({python.source_id})"
            )
        if library.file != python.file:
            return f"{name} links SQLite from {library.file}, Python's sqlite3 from {python.file}"
    return None
