"""Accepted RayEvents kept as their text, compressed, per session, beside the folded rows.

Why: the fold keeps only what this version reads of an event. The text kept here lets
`store rebuild` refold a store after an upgrade (new fields, a fixed fold), and lets `get` show a
field Ray added in a later release (`new_fields`) without a schema change. It is kept as it was
POSTed: a fold batch's POST bodies of one session become one JSON array, compressed (zlib's raw
deflate at level 5: 16% fewer bytes than level 1 on a real stream for ~8 µs more an event, on the
row writer's thread; no new dependency) and written as one blob right after the fold's
commit, so keeping it costs the compression per event (bench/HISTORY.md) and no Python object.
A body is split by session only when its items name more than one.

A blob is `FORMAT_V1` then the deflate stream primed with `RAW_DICTIONARY` (raw_events.dict, 16
KiB: the keys and enum names of Ray 2.49-2.55's events, then Ray 2.60's events as Ray posts them,
two of each type, the commonest types last; bench/raw_dictionary.py built it and measured it
against others). A blob starts with its first events, whose keys deflate has not seen yet: the
dictionary gives them as if seen. On a live stream's events: 4.8% fewer bytes in blobs of 90
events, 11.8% in blobs of 30, 0.7% in the ~600 of a busy stream, for ~25-35 us more a blob (0.1 to
0.8 us an event). The dictionary is part of the format: another one takes another format byte. A
blob of an earlier version (no format byte, no dictionary) is read as it was: no raw deflate
stream starts with `FORMAT_V1` (its first block's type bits would be 11, which deflate reserves).

The PostgreSQL store writes `FORMAT_V2` instead (`compress_zstd`): the same array as one Zstandard
frame at level 1 primed with the same dictionary (as raw content). On a live Ray 2.60 stream's
events: 13-15% fewer bytes than FORMAT_V1 (369 against 437 a task attempt in blobs of ~2,700
events, 395 against 456 in blobs of 100) for a fourth of the CPU (1.6-2.2 against 8.5-8.9 us an
event, the array's join included; bench/raw_compression.py), and python-zstandard gives up the GIL
for the whole frame as the compiled deflate does. The SQLite store keeps FORMAT_V1: its compiled row
writer compresses in C on its own thread with zlib, whose headers every machine has and libzstd's
are not. Every reader reads every format (`decompress`); zstandard comes with the `postgres` extra,
as only that store writes it.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

try:  # the `postgres` extra: only the PostgreSQL store writes FORMAT_V2, which postgres_store checks
    import zstandard
except ImportError:
    zstandard = None  # type: ignore[assignment]

from ray_otel_events import native
from ray_otel_events.protobuf import events_base_event_pb2
from ray_otel_events.store.kept_ids import event_hash, utf8_hash
from ray_otel_events.store.state_merge import FOLDED_KEYS

try:  # setup.py builds it where zlib's headers are
    from ray_otel_events.native import _raw_deflate
except ImportError:
    _raw_deflate = None  # type: ignore[assignment]
_compiled = _raw_deflate is not None and native.ENABLED

LEVEL = 5  # native/raw_deflate.h's RAW_LEVEL
WBITS = -15  # raw deflate: no header and no Adler-32
FORMAT_V1 = 0x06  # raw_deflate.h's RAW_FORMAT_V1: BFINAL 0, BTYPE 11 (reserved): no old blob's first byte
# Never change it: stored blobs are read with it (tests check its digest).
RAW_DICTIONARY = (Path(__file__).parent / "raw_events.dict").read_bytes()
_MARK = bytes((FORMAT_V1,))
FORMAT_V2 = 0x07  # BFINAL 1, BTYPE 11 (reserved): no old blob's first byte either; a Zstandard frame
_MARK_V2 = bytes((FORMAT_V2,))
ZSTD_LEVEL = 1  # 3 took more bytes; 9 at most 2% fewer for 5 times the CPU (bench/raw_compression.py)
ZSTD_MAX_TEXT = 1 << 30  # a frame said to hold more is damaged: a fold batch's bodies are far smaller
_SESSION_KEY = b'"sessionName"'
_SESSION = re.compile(rb'"sessionName"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _session_of(item: Any) -> str:
    return str(item.get("sessionName", "")) if isinstance(item, dict) else ""


def by_session(body: bytes) -> dict[str, list[bytes]]:
    """A POSTed JSON array's text by session: the whole body when every item names one session (two
    memmem counts), else its items regrouped (read with orjson)."""
    first = _SESSION.search(body)
    named = body.count(_SESSION_KEY)
    if first is None and named == 0:
        return {"": [body]}
    if first is not None and body.count(first.group(0)) == named:
        return {orjson.loads(b'"' + first.group(1) + b'"'): [body]}
    return {session: [orjson.dumps(items)] for session, items in group_events(orjson.loads(body)).items()}


def group_events(events: Iterable[Any]) -> dict[str, list[Any]]:
    """Events (dicts) by their session name ("" when they name none)."""
    groups: dict[str, list[Any]] = {}
    for event in events:
        groups.setdefault(_session_of(event), []).append(event)
    return groups


def event_texts(events: Iterable[Any]) -> tuple[dict[str, list[bytes]], int]:
    """Events (dicts) as one JSON array's text per session, and how many cannot be written as JSON
    (an integer beyond 64 bits, a lone surrogate): those are folded but not kept."""
    texts: dict[str, list[bytes]] = {}
    unwritten = 0
    for session, items in group_events(events).items():
        try:
            texts[session] = [orjson.dumps(items)]
        except TypeError:
            kept: list[bytes] = []
            for item in items:
                try:
                    kept.append(orjson.dumps(item))
                except TypeError:
                    unwritten += 1
            if kept:
                texts[session] = [b"[" + b",".join(kept) + b"]"]
    return texts, unwritten


def merge_bodies(groups: Iterable[dict[str, list[bytes]]]) -> dict[str, list[bytes]]:
    merged: dict[str, list[bytes]] = {}
    for group in groups:
        for session, texts in group.items():
            merged.setdefault(session, []).extend(texts)
    return merged


def compress(bodies: Sequence[bytes]) -> bytes:
    """JSON arrays' texts as one compressed JSON array of all their items: compiled where built
    (it gives up the GIL once, where Python's zlib takes it back for every output block, each time
    waiting on serve's event loop), else `compress_python`."""
    if _compiled:
        return _raw_deflate.compress(bodies if isinstance(bodies, list) else list(bodies), RAW_DICTIONARY)
    return compress_python(bodies)


_ITEM = re.compile(rb"[^ \t\n\r]")  # JSON's white space is these four, and only these


def _items(bodies: Sequence[bytes]) -> Iterator[memoryview]:
    """Each JSON array's items as a view of its text: what lies between its first '[' and its last
    ']'; an empty array or a text that is not one gives nothing (as raw_deflate.h's raw_inner)."""
    for body in bodies:
        start, end = body.find(b"["), body.rfind(b"]")
        if start >= 0 and end > start and _ITEM.search(body, start + 1, end) is not None:
            yield memoryview(body)[start + 1 : end]


def compress_python(bodies: Sequence[bytes]) -> bytes:
    """The compiled `compress`'s twin. The items are fed to zlib in place (a body is most of a
    megabyte: each copy would cost page faults)."""
    packer = zlib.compressobj(LEVEL, zlib.DEFLATED, WBITS, 8, zlib.Z_DEFAULT_STRATEGY, RAW_DICTIONARY)
    out = [_MARK, packer.compress(b"[")]
    for i, items in enumerate(_items(bodies)):
        if i:
            out.append(packer.compress(b","))
        out.append(packer.compress(items))
    out.append(packer.compress(b"]"))
    out.append(packer.flush())
    return b"".join(out)


class DamagedBlob(zlib.error):
    """A stored FORMAT_V2 blob that is not a whole frame (a zlib.error, as a damaged deflate is)."""


@functools.cache
def _zstd_dictionary() -> Any:
    if zstandard is None:
        raise RuntimeError("raw events of FORMAT_V2 need zstandard: pip install 'ray-otel-events[postgres]'")
    dictionary = zstandard.ZstdCompressionDict(RAW_DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    dictionary.precompute_compress(level=ZSTD_LEVEL)
    return dictionary


def compress_zstd(bodies: Sequence[bytes]) -> bytes:
    """`compress`'s array as FORMAT_V2: one frame holding its length and a checksum. A compressor
    per call (one is not safe to share between threads; with the dictionary precomputed it costs
    microseconds); the array is joined first, so the GIL is given up once, for the whole frame."""
    text = b"[" + b",".join(_items(bodies)) + b"]"
    packer = zstandard.ZstdCompressor(level=ZSTD_LEVEL, dict_data=_zstd_dictionary(), write_checksum=True)
    return _MARK_V2 + packer.compress(text)


def _decompress_zstd(frame: memoryview) -> bytes:
    dictionary = _zstd_dictionary()
    try:
        size = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise DamagedBlob(f"a stored raw events blob is damaged: {exc}") from None
    if not 0 <= size <= ZSTD_MAX_TEXT:
        raise DamagedBlob(f"a stored raw events blob is damaged: its frame claims {size} bytes")
    try:
        text = zstandard.ZstdDecompressor(dict_data=dictionary).decompress(frame, max_output_size=size)
    except zstandard.ZstdError as exc:
        raise DamagedBlob(f"a stored raw events blob is damaged: {exc}") from None
    if len(text) != size:
        raise DamagedBlob("a stored raw events blob is damaged: not its stated length")
    return text


def decompress(blob: bytes) -> bytes:
    """A stored blob's JSON array: `FORMAT_V2`'s, `FORMAT_V1`'s, or an earlier version's plain raw
    deflate. zlib.error when it is damaged (or cut short)."""
    if blob[:1] == _MARK_V2:
        return _decompress_zstd(memoryview(blob)[1:])
    if blob[:1] != _MARK:
        return zlib.decompress(blob, WBITS)
    unpacker = zlib.decompressobj(WBITS, RAW_DICTIONARY)
    text = unpacker.decompress(memoryview(blob)[1:])
    if not unpacker.eof:
        raise zlib.error("Error -5 while decompressing data: incomplete or truncated stream")
    return text


_EVENT_ID = re.compile(rb'"eventId"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _hash_of_string(inner: bytes) -> int | None:
    """The hash of a JSON string given its text between the quotes (None: not a JSON string)."""
    if b"\\" not in inner:
        return utf8_hash(inner)
    try:
        value = orjson.loads(b'"' + inner + b'"')
    except orjson.JSONDecodeError:
        return None
    return event_hash(value)


def events_with_ids(text: bytes, hashes: set[int]) -> list[tuple[int, int, dict[str, Any]]]:
    """The events of a JSON array's text (a decompressed block) whose `eventId` has one of these
    hashes (kept_ids.event_hash): (place in the array, hash, event), in order. The array is read
    only when one of its `"eventId": "..."` texts has one of them (or is not a string JSON reads),
    so a block holding none of a row's events costs a scan and a hash per event, not a parse."""
    found = (_hash_of_string(m.group(1)) for m in _EVENT_ID.finditer(text))
    if not any(hashed is None or hashed in hashes for hashed in found):
        return []
    matched = []
    for position, event in enumerate(orjson.loads(text)):
        event_id = event.get("eventId") if isinstance(event, dict) else None
        if isinstance(event_id, str) and (hashed := event_hash(event_id)) in hashes:
            matched.append((position, hashed, event))
    return matched


_EVENT = events_base_event_pb2.RayEvent.DESCRIPTOR
# Known of a payload is what the folds read (state_merge's tables, and the route's id and attempt),
# not what the schema names, so a field `make proto` adds (or one the schema has and no fold reads)
# shows in `get` and the task page with no other edit. A payload no fold reads (no row has its
# events) is known by its schema.
_KNOWN: dict[str, frozenset[str]] = {
    field.json_name: frozenset(f.json_name for f in field.message_type.fields)
    for field in _EVENT.fields
    if field.message_type is not None
}
_KNOWN.update(FOLDED_KEYS)


# The envelope every event has (Ray 2.60's base event beside its payloads), by the names Ray posts
# and the proto names the receiver takes: any other base-event field shows, a later Ray's, before
# `make proto` adds it and after.
_ENVELOPE = (
    "event_id",
    "source_type",
    "event_type",
    "timestamp",
    "severity",
    "message",
    "session_name",
    "node_id",
)
_BASE = frozenset(name for field in _ENVELOPE for name in (_EVENT.fields_by_name[field].json_name, field))


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def new_fields(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The fields of these events that no fold reads: in a folded payload, every field outside the
    keys its fold reads (a later Ray's, or one our schema names and no fold reads); beside the
    payloads, the base-event fields beyond the envelope (a later Ray's `sourceHostname`). By
    snake_case name as Ray's state API names fields, with the values as posted; a later event's
    value wins."""
    found: dict[str, Any] = {}
    for event in events:
        for key, value in event.items():
            known = _KNOWN.get(key)
            if known is None and key not in _BASE:
                found[_snake(key)] = value
            if known is None or not isinstance(value, dict):
                continue
            for name, item in value.items():
                if name not in known:
                    found[_snake(name)] = item
    return found
