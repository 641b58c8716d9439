"""Collected log files in the store, on SQLite and PostgreSQL alike: a file is its chunks stitched in
offset order (overlaps once, a longer resend replacing a shorter one), listed by node; retention
drops them with their session, by age, and first when the store is over its bytes."""

from __future__ import annotations

from pathlib import Path

from ray_otel_events.store.backend import Retention
from ray_otel_events.store.location import open_store

SESSION = "session_2026-11-22_01-37-25_288381_8892"


def test_chunks_stitch_list_and_go_with_retention(store_location: str | Path) -> None:
    store = open_store(store_location)
    try:
        store.add_log_chunk(SESSION, "aa", "raylet.out", 0, b"one\n", now=100.0)
        store.add_log_chunk(SESSION, "aa", "raylet.out", 0, b"one\n", now=101.0)  # a resend
        store.add_log_chunk(SESSION, "aa", "raylet.out", 4, b"two\nthr", now=102.0)
        store.add_log_chunk(SESSION, "aa", "raylet.out", 4, b"two\nthree\n", now=103.0)  # longer
        store.add_log_chunk(SESSION, "aa", "raylet.out", 8, b"three\nfour\n", now=104.0)  # overlaps
        store.add_log_chunk(SESSION, "aa", "gcs_server.err", 0, b"", now=105.0)  # empty, listed
        store.add_log_chunk(SESSION, "bb", "raylet.out", 0, b"other node\x00\xff\n", now=106.0)
        assert store.log_file(SESSION, "aa", "raylet.out", 1 << 20) == b"one\ntwo\nthree\nfour\n"
        assert store.log_file(SESSION, "aa", "raylet.out", 5) == b"four\n"
        assert store.log_file(SESSION, "bb", "raylet.out", 1 << 20) == b"other node\x00\xff\n"
        assert store.log_file(SESSION, "aa", "nothing.log", 100) is None
        assert store.log_files(SESSION, "aa") == [("aa", "gcs_server.err", 0), ("aa", "raylet.out", 19)]
        assert [f for _, f, _ in store.log_files(SESSION)] == ["gcs_server.err", "raylet.out", "raylet.out"]
        # by age: chunks received before the cutoff go
        store.prune(Retention(max_age_s=1000.0), now=1104.5)
        assert store.log_files(SESSION) == [("aa", "gcs_server.err", 0), ("bb", "raylet.out", 13)]
        # over the store's bytes with one session left: collected files go before its rows
        store.prune(Retention(max_bytes=1))
        assert store.log_files(SESSION) == []
    finally:
        store.close()
