"""`ray-otel-events sink` as a real process: JSON arrays in, JSON Lines out, clear 400s, fail-first."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from helpers.agg_procs import CliServer, read_jsonl, refused_by_cli


@pytest.fixture
def sink_factory(tmp_path: Path) -> Iterator[list[CliServer]]:
    started: list[CliServer] = []
    yield started
    for server in started:
        server.close()


def start_sink(started: list[CliServer], out: Path, *args: str) -> CliServer:
    server = CliServer("sink", "--out", str(out), *args)
    started.append(server)
    return server


def test_appends_one_line_per_event_on_any_path(sink_factory: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    sink = start_sink(sink_factory, out)
    base = f"http://{sink.address}"
    first = [{"eventId": "a", "n": 1}, {"eventId": "b", "nested": {"x": [1, 2]}}]
    r = requests.post(f"{base}/", json=first, timeout=30)
    assert r.status_code == 200 and r.json() == {}
    r = requests.post(f"{base}/v1/events?token=1", json=[{"eventId": "c"}], timeout=30)
    assert r.status_code == 200
    assert requests.post(f"{base}/x", json=[], timeout=30).status_code == 200
    assert read_jsonl(out) == [*first, {"eventId": "c"}]  # flushed per request: readable at once
    stats = sink.stop()
    assert stats == {"events": 3, "failed_on_purpose": 0, "rejected": 0, "requests": 3}


def test_rejects_what_is_not_a_json_array(sink_factory: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    sink = start_sink(sink_factory, out)
    base = f"http://{sink.address}"
    r = requests.post(base, json={"eventId": "a"}, timeout=30)
    assert r.status_code == 400 and "JSON array" in r.json()["error"]
    r = requests.post(base, data=b"[{not json", headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    assert read_jsonl(out) == []
    assert sink.stop()["rejected"] == 2


def test_fail_first_then_accepts(sink_factory: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    sink = start_sink(sink_factory, out, "--fail-first", "2", "--fail-status", "503")
    base = f"http://{sink.address}/events"
    codes = [requests.post(base, json=[{"i": i}], timeout=30).status_code for i in range(3)]
    assert codes == [503, 503, 200]
    assert read_jsonl(out) == [{"i": 2}]
    assert sink.stop(sig=signal.SIGINT)["failed_on_purpose"] == 2


def test_appends_to_an_existing_file(sink_factory: list[CliServer], tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    out.write_text(json.dumps({"old": True}) + "\n")
    sink = start_sink(sink_factory, out)
    requests.post(f"http://{sink.address}/", json=[{"new": True}], timeout=30)
    sink.stop()
    assert read_jsonl(out) == [{"old": True}, {"new": True}]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--fail-status", "200"], "fail_status"),
        (["--fail-first", "-1"], "fail_first"),
        (["--port", "70000"], "port"),
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    assert needle in refused_by_cli("sink", "--out", str(tmp_path / "x.jsonl"), *args).stderr
