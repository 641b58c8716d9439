"""Candidate preset dictionaries for the raw events' deflate, built from the captured Ray event JSON
in tests/fixtures, measured on the raw events of another store (the blobs of a store the
dictionaries were not built from: `store_bytes_live.py --keep`'s, or any store `serve` wrote).

How store/raw_events.dict was chosen (its docstring says why a dictionary at all): each candidate
deflates every blob's text again (level 5, as stored) and the total bytes and the time per event are
printed beside no dictionary's. `--write NAME` writes that candidate as the dictionary. The
dictionary is part of the stored format: it is never rebuilt once shipped (tests check its digest).
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
RUN_E = sorted((FIXTURES / "ray-2.60" / "raw" / "runE").glob("*.body"))
OLDER = [FIXTURES / "ray-versions" / v / "events.jsonl" for v in ("2.49.2", "2.52.1", "2.55.0")]
LEVEL = 5
WINDOW = 32 * 1024

# String values kept as they are in a templated event: Ray's enum names, component names and the
# like (upper-case words, `task:...` profile names, the empty JSON object); every other string (ids,
# times, paths, names of this workload) is emptied, as no other stream repeats it.
_KEPT_VALUE = re.compile(r"[A-Z][A-Z0-9_]*|[a-z_]+(?::[a-z_:]*)?|\{\}|0|AQAAAA==")


def ray_text(value: Any) -> bytes:
    """JSON as Ray's aggregator writes it (Python's json: `, ` and `: `, non-ASCII escaped)."""
    import json

    return json.dumps(value).encode()


def _templated(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _templated(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_templated(v) for v in value[:4]]
    if isinstance(value, str):
        return value if _KEPT_VALUE.fullmatch(value) else ""
    return value


def _run_e_events() -> list[dict[str, Any]]:
    return [event for path in RUN_E for event in orjson.loads(path.read_bytes())]


def _older_events() -> list[dict[str, Any]]:
    return [orjson.loads(line) for path in OLDER for line in path.read_bytes().splitlines() if line.strip()]


def _by_commonness(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events ordered by how common their type is, the rarest first (deflate's nearest matches are
    the cheapest: the commonest text goes last)."""
    counts = Counter(e.get("eventType") for e in events)
    return sorted(events, key=lambda e: (counts[e.get("eventType")], str(e.get("eventType"))))


def _one_per_type(events: list[dict[str, Any]], per_type: int) -> list[dict[str, Any]]:
    taken: Counter[Any] = Counter()
    out = []
    for event in events:
        if taken[event.get("eventType")] < per_type:
            taken[event.get("eventType")] += 1
            out.append(event)
    return out


def _fill(texts: list[bytes], size: int) -> bytes:
    """The texts joined as a POST body's items are (`, `), keeping the last `size` bytes."""
    return b", ".join(texts)[-size:]


def candidates() -> dict[str, bytes]:
    run_e = _run_e_events()
    older = _older_events()
    found: dict[str, bytes] = {}
    whole = b"".join(path.read_bytes() for path in RUN_E)
    found["runE-tail-32k"] = whole[-WINDOW:]
    for per_type in (1, 2, 4):
        for templated in (False, True):
            pick = _one_per_type(_by_commonness(run_e), per_type)
            old = _one_per_type(_by_commonness(older), 1)
            shape = _templated if templated else (lambda e: e)
            # the older releases' events only for their keys and enum names (their capture's paths
            # and names are of no other stream)
            texts = [ray_text(_templated(e)) for e in old] + [ray_text(shape(e)) for e in pick]
            if not templated:  # the older releases' keys first, then the nearest of 2.60's
                keys = b", ".join(texts[: len(old)])
                for size in (12 * 1024, 16 * 1024):
                    text = keys + b", " + b", ".join(texts[len(old) :])[-(size - len(keys) - 2) :]
                    found[f"old+raw-{per_type}pt-{size // 1024}k"] = text
            for size in (8 * 1024, 16 * 1024, WINDOW):
                text = _fill(texts, size)
                if len(text) < size and size != WINDOW:
                    continue
                name = f"{'tpl' if templated else 'raw'}-{per_type}pt-{len(text) // 1024}k"
                found.setdefault(name, text)
    return found


def store_texts(path: Path) -> list[bytes]:
    sys.path.insert(0, str(ROOT / "src"))
    from ray_otel_events.store import raw_events

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    blobs = [bytes(row[0]) for row in db.execute("SELECT data FROM raw_events ORDER BY rowid")]
    db.close()
    return [raw_events.decompress(blob) for blob in blobs]


_ITEM_START = re.compile(rb"(?<=\}), ?(?=\{\"eventId\")")


def rechunked(texts: list[bytes], per_blob: int) -> list[bytes]:
    """The texts' events, as they are, in blobs of `per_blob` events (the store's blob of a stream
    that posts fewer events a second: smaller fold batches)."""
    items = [item for text in texts for item in _ITEM_START.split(text.strip()[1:-1])]
    return [b"[" + b", ".join(items[i : i + per_blob]) + b"]" for i in range(0, len(items), per_blob)]


def deflated(texts: list[bytes], dictionary: bytes, level: int = LEVEL) -> tuple[int, float]:
    """Total bytes of the texts deflated alone each, and the seconds it took (best of 3)."""
    best = float("inf")
    total = 0
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for text in texts:
            if dictionary:
                packer = zlib.compressobj(level, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY, dictionary)
            else:
                packer = zlib.compressobj(level, zlib.DEFLATED, -15)
            total += len(packer.compress(text)) + len(packer.flush())
        best = min(best, time.perf_counter() - started)
    return total, best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="a SQLite store whose raw events are the test set")
    parser.add_argument("--attempts", type=int, help="its task attempts (prints bytes per attempt)")
    parser.add_argument("--level", type=int, default=LEVEL)
    parser.add_argument(
        "--chunk", type=int, help="cut the blobs' texts into blobs of this many events (a slower stream's)"
    )
    parser.add_argument("--write", metavar="NAME", help="write this candidate to store/raw_events.dict")
    args = parser.parse_args()
    texts = store_texts(args.store)
    if args.chunk:
        texts = rechunked(texts, args.chunk)
    events = sum(text.count(b'"eventId"') for text in texts)
    per = args.attempts or events
    base, base_time = deflated(texts, b"", args.level)
    print(f"{len(texts)} blobs, {events} events, {sum(map(len, texts)):,} bytes of text")
    print(
        f"{'none':>16}: {base:>10,} bytes {base / per:7.1f} per {'attempt' if args.attempts else 'event'}"
        f"  {base_time / events * 1e6:5.2f} us/event"
    )
    for name, dictionary in candidates().items():
        size, took = deflated(texts, dictionary, args.level)
        print(
            f"{name:>16}: {size:>10,} bytes {size / per:7.1f} ({(size - base) / base:+.1%})"
            f"  {took / events * 1e6:5.2f} us/event  dict {len(dictionary):,}"
        )
    if args.write:
        out = ROOT / "src" / "ray_otel_events" / "store" / "raw_events.dict"
        out.write_bytes(candidates()[args.write])
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
