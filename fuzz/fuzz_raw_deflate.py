"""The raw events' compression (native/_raw_deflate.c, the row writer's `raw_deflate.h`) against its
Python twin (store/raw_events.compress_python): the POST bodies `serve` keeps are outside bytes, and
both must find each array's items alike and write the same deflate stream, whatever the bytes; the
PostgreSQL store's Zstandard blob (raw_events.compress_zstd) must hold the same array."""

from __future__ import annotations

import engine
import seeds

from ray_otel_events.store import raw_events

assert raw_events._raw_deflate is not None, "the compiled compression is not built"
_SPLIT = b"\x00\xff"  # a mutated input is cut into several bodies where this appears


def check(data: bytes) -> None:
    bodies = data.split(_SPLIT)[:8]
    compiled = raw_events._raw_deflate.compress(bodies, raw_events.RAW_DICTIONARY)
    assert compiled == raw_events.compress_python(bodies), bodies
    text = raw_events.decompress(compiled)
    assert text.startswith(b"[")
    assert raw_events.decompress(raw_events.compress_zstd(bodies)) == text


def _seeds() -> list[bytes]:
    bodies = list(seeds.posted_bodies())[:40]
    return [*bodies, _SPLIT.join(bodies[:3]), b"[]", b"[ ]" + _SPLIT + b"[1]"]


if __name__ == "__main__":
    engine.main(check, _seeds)
