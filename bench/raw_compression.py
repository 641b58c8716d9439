"""The raw events' two stored formats on a real stream's events: FORMAT_V1 (deflate level 5 primed
with raw_events.dict, the SQLite store's) against FORMAT_V2 (Zstandard primed with the same
dictionary, the PostgreSQL store's) and Zstandard's other levels, in bytes per task attempt and CPU
per event, over the blobs of a store as `serve` kept them and over those blobs cut into arrays of
100 events (a quieter stream's batches).

python bench/store_bytes_live.py --tasks 3000 --keep /tmp/live.sqlite3
python bench/raw_compression.py /tmp/live.sqlite3

A measurement, not a test: how raw_events.ZSTD_LEVEL and FORMAT_V2 were chosen (raw_events' docstring).
"""

from __future__ import annotations

import argparse
import sqlite3
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import orjson
import zstandard

from ray_otel_events.store import raw_events


def _texts(store: Path) -> tuple[list[bytes], int]:
    """The store's raw events blobs as JSON arrays, and its task attempts."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        blobs = [bytes(blob) for (blob,) in db.execute("SELECT data FROM raw_events ORDER BY rowid")]
        (attempts,) = db.execute("SELECT COUNT(*) FROM state_rows WHERE resource IN (1, 'tasks')").fetchone()
    finally:
        db.close()
    return [raw_events.decompress(blob) for blob in blobs], int(attempts)


def _cut(texts: list[bytes], size: int) -> list[bytes]:
    events = [event for text in texts for event in orjson.loads(text)]
    return [orjson.dumps(events[i : i + size]) for i in range(0, len(events), size)]


def _zstd(level: int, dictionary: bool) -> Callable[[bytes], bytes]:
    data = zstandard.ZstdCompressionDict(raw_events.RAW_DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    packer = zstandard.ZstdCompressor(level=level, dict_data=data if dictionary else None)
    return packer.compress


def measure(texts: list[bytes], attempts: int) -> None:
    events = sum(len(orjson.loads(text)) for text in texts)
    ways: list[tuple[str, Callable[[bytes], bytes]]] = [
        ("FORMAT_V1: deflate 5 + dictionary", lambda text: raw_events.compress_python([text])),
        ("FORMAT_V2: zstd 1 + dictionary", lambda text: raw_events.compress_zstd([text])),
        *((f"zstd {n}{' + dictionary' * d}", _zstd(n, d)) for n in (1, 3, 9) for d in (False, True)),
        ("deflate 9 + dictionary", _deflate9),
    ]
    for name, way in ways:
        start = time.process_time()
        size = sum(len(way(text)) for text in texts)
        cpu = time.process_time() - start
        per_event = cpu / events * 1e6
        print(f"  {name:36s} {size / attempts:7.1f} bytes a task attempt  {per_event:6.2f} us CPU an event")


def _deflate9(text: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, raw_events.RAW_DICTIONARY)
    return packer.compress(text) + packer.flush()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("store", type=Path, help="a SQLite store written by serve from a live stream")
    args = parser.parse_args()
    texts, attempts = _texts(args.store)
    total = sum(map(len, texts))
    print(f"{args.store}: {len(texts)} blobs, {total:,} bytes of JSON, {attempts:,} task attempts")
    measure(texts, attempts)
    cut = _cut(texts, 100)
    print(f"cut into {len(cut)} arrays of 100 events:")
    measure(cut, attempts)


if __name__ == "__main__":
    main()
