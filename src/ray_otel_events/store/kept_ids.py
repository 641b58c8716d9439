"""The event ids a stored row keeps, as 64-bit hashes.

A row keeps the ids of the events folded into it so that an event sent again (a retried POST, a
spool replayed after `kill -9`) is not folded twice, and so that `new_fields` finds the row's raw
events. It keeps each as the 8 bytes of a 64-bit hash (`event_hash`), not the id's text (Ray's 40
base64 characters, 29 bytes as bytes): ~5 ids a task attempt, ~150 bytes fewer per attempt.

The hash is BLAKE2b (RFC 7693) with an 8-byte digest over the id's UTF-8, read little-endian:
hashlib's, here, and native/event_hash.h's in the compiled folds (the tests compare them). Ids are
chosen by whoever POSTs events, and two ids of one row with one hash would make the second event a
duplicate; with the code public a key would hide nothing, and a cryptographic hash makes finding an
id with the hash of a given one cost ~2^64 hashes whatever is known. A chance collision needs two of
one row's few ids to meet in 2^64.

What rows keep, per value, so older stores need no migration:
- SQLite: a BLOB of the hashes (8 bytes each, little-endian); a TEXT value is a row written
  before, its ids joined by spaces (hashed when read).
- PostgreSQL: bytea, `HASHED` (a zero byte, which never starts the older form) then the hashes; any
  other value is the older form, each id as its byte count and bytes (postgres_store._event_ids).
"""

from __future__ import annotations

import hashlib
import struct

HASH_BYTES = 8
HASHED = b"\x00"  # the first byte of a PostgreSQL value of hashes (the older form starts 1..128)


def event_hash(event_id: str) -> int:
    """The 64-bit hash a row keeps of an event id (native/event_hash.h's twin)."""
    return utf8_hash(event_id.encode("utf-8", "surrogatepass"))


def utf8_hash(event_id: bytes) -> int:
    """`event_hash` of an id given as its UTF-8."""
    return int.from_bytes(hashlib.blake2b(event_id, digest_size=HASH_BYTES).digest(), "little")


def packed(hashes: list[int]) -> bytes:
    """Hashes as a row keeps them: 8 little-endian bytes each."""
    return struct.pack(f"<{len(hashes)}Q", *hashes)


def unpacked(stored: bytes) -> list[int]:
    """The hashes of `packed` bytes (a trailing part of one, which the store never writes, is not
    read: as the compiled fold reads them)."""
    return list(struct.unpack_from(f"<{len(stored) // HASH_BYTES}Q", stored))


def hashed_text(joined: str) -> list[int]:
    """The hashes of ids kept as text, joined by spaces (SQLite's rows written before)."""
    return [event_hash(event_id) for event_id in joined.split()]


def sqlite_hashes(stored: str | bytes) -> list[int]:
    """A SQLite row's kept ids (its `event_ids`), as hashes: BLOB, or TEXT written before."""
    return hashed_text(stored) if isinstance(stored, str) else unpacked(stored)
