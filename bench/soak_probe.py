"""`serve` with probes inside, for bench_soak's `--probe`: every 30 s one JSON line of what its RSS is.

Beside RSS (anonymous and file-backed): SQLite's own allocations (`sqlite3_memory_used`: its page
caches and statements, every connection of the process), glibc's main heap (`mallinfo2`: its size,
the bytes in use, the bytes free inside it, the blocks mapped apart) and the number of Python
objects the collector tracks (the pending POSTs show in it). What told the heap's kept holes apart
from the store's caches and the pending queue (bench/RESULTS.md, soak).

Usage: PROBE_OUT=FILE python bench/soak_probe.py serve ARGS..."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path

_MALLINFO2 = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2.split(" ")]


def _rss() -> dict[str, int]:
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            found[key] = int(value.split()[0]) // 1024
    return found


def _probe(out: str) -> None:
    sqlite = ctypes.CDLL("libsqlite3.so.0")
    sqlite.sqlite3_memory_used.restype = ctypes.c_int64
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    t0 = time.monotonic()
    with open(out, "a") as sink:
        while True:
            time.sleep(30)
            heap = libc.mallinfo2()
            record = {
                "t": round(time.monotonic() - t0),
                **_rss(),
                "sqlite_mib": sqlite.sqlite3_memory_used() / 2**20,
                "heap_arena_mib": heap.arena / 2**20,
                "heap_used_mib": heap.uordblks / 2**20,
                "heap_free_mib": heap.fordblks / 2**20,
                "mmap_mib": heap.hblkhd / 2**20,
                "gc": len(gc.get_objects()),
            }
            sink.write(json.dumps(record) + "\n")
            sink.flush()


def main() -> int:
    threading.Thread(target=_probe, args=(os.environ["PROBE_OUT"],), daemon=True).start()
    from ray_otel_events.cli import main as cli

    return cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
