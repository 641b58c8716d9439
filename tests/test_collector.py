"""`ray-otel-events collect` as a subprocess, over a Ray session folder this test writes, shipping to
a real `serve` (port 0): log files through rotation, truncation, a restart on saved offsets and a
stop that flushes partial lines, shown by Ray's dashboard over the store as Ray's Logs page asks;
binary files and symlinks out of the folder never read. Export event lines go to a real HTTP server
answering as serve's `/v1/ray-export-events` does (helpers/collector_procs.py): each good line once,
in order, through retries, a refused batch, rotation and a restart; partial, huge, bad and non-object
lines counted, never stuck. The session and node are the recorded run's (its events POSTed first),
so the page knows the node the files are filed under.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import FIXTURE, CliServer, refused_by_cli, wait_until
from helpers.collector_procs import Collector, ExportEventsServer, export_events_server

from ray_otel_events.collector.offsets import Offsets

EVENTS: list[dict[str, Any]] = json.loads(Path(FIXTURE).read_text())
SESSION = EVENTS[0]["sessionName"]
NODE = "741b9b5e53c877d9ebfc65f7f9b82f458320c8c6743303c6d58649a1"  # the recorded run's node (hex)
WAIT_S = 60.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CliServer, str]]:
    """`serve` with Ray's dashboard over its store, holding the recorded run's events."""
    store = tmp_path_factory.mktemp("collector-store") / "events.sqlite3"
    serve = CliServer("serve", "--store", str(store), "--ray-dashboard-port", "0")
    dashboard = serve.read_line(30).split("=", 1)[1]
    try:
        posted = requests.post(f"http://{serve.address}/v1/ray-events", json=EVENTS, timeout=30)
        assert posted.status_code == 200 and posted.json()["rejected"] == 0, posted.text
        yield serve, f"http://{dashboard}"
    finally:
        serve.close()


def _session(temp_dir: Path, name: str = SESSION) -> Path:
    """A session folder as Ray lays it out, `session_latest` naming it; raylet.out names the node."""
    logs = temp_dir / name / "logs"
    (logs / "export_events").mkdir(parents=True)
    (logs / "raylet.out").write_text(
        f"[2026-11-22 01:37:26,1 I 1 1] (raylet) main.cc:711: Setting node ID node_id={NODE}\n"
    )
    link = temp_dir / "session_latest"
    link.unlink(missing_ok=True)
    link.symlink_to(temp_dir / name)
    return logs


def _stored(dashboard: str, name: str) -> str | None:
    """A file's text as Ray's page asks for it (`lines=-1`: all of it); None while not stored."""
    answer = requests.get(
        f"{dashboard}/api/v0/logs/file",
        params={"node_id": NODE, "filename": name, "lines": "-1"},
        timeout=30,
    )
    return answer.text if answer.status_code == 200 else None


def _listed(dashboard: str) -> dict[str, list[str]]:
    answer = requests.get(f"{dashboard}/api/v0/logs", params={"node_id": NODE}, timeout=30)
    assert answer.status_code == 200, answer.text
    listed: dict[str, list[str]] = answer.json()["data"]["result"]
    return listed


def _until_stored(dashboard: str, name: str, text: str) -> None:
    wait_until(lambda: _stored(dashboard, name) == text, f"{name} stored as {text!r}", WAIT_S)


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as out:
        out.write(data)


def test_log_files_through_rotation_truncation_restart_and_stop(
    served: tuple[CliServer, str], tmp_path: Path
) -> None:
    serve, dashboard = served
    url = f"http://{serve.address}"
    logs = _session(tmp_path / "ray")
    raylet = (logs / "raylet.out").read_text()
    worker = logs / "worker-0a1b-01000000-4242.out"
    worker.write_text("hello from a worker\n")
    (logs / "gcs_server.out").write_text("gcs line 1\n")
    (logs / "gcs_server.err").write_text("")  # empty: listed all the same, as Ray lists it
    (logs / "core.log").write_bytes(b"\x7fELF\0\0\0binary")  # not a text log: skipped
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET OUTSIDE THE SESSION\n")
    (logs / "stolen.log").symlink_to(secret)  # a link out of the folder: never followed
    (logs / "old").mkdir()
    (logs / "old" / "raylet.out").write_text("a sub-folder's file: not listed by Ray's page either\n")
    state = tmp_path / "state"

    collector = Collector(url, tmp_path / "ray", state)
    try:
        assert collector.read_line() == f"collecting session={SESSION} to={url}"
        _until_stored(dashboard, worker.name, "hello from a worker\n")
        _until_stored(dashboard, "raylet.out", raylet)
        # a last line waits for its newline
        _append(logs / "gcs_server.out", b"gcs partial")
        _append(logs / "gcs_server.out", b" line 2\n")
        _until_stored(dashboard, "gcs_server.out", "gcs line 1\ngcs partial line 2\n")
        # rotation by rename: the stored file goes on with the new generation, nothing twice
        os.rename(logs / "gcs_server.out", logs / "gcs_server.out.1")
        (logs / "gcs_server.out").write_text("gcs after rotation\n")
        _until_stored(dashboard, "gcs_server.out", "gcs line 1\ngcs partial line 2\ngcs after rotation\n")
        # truncation: read again from its start, after what was stored
        (logs / "raylet.out").write_text("raylet again\n")
        _until_stored(dashboard, "raylet.out", raylet + "raylet again\n")
        first = collector.stop()
    finally:
        collector.close()
    assert first["files_skipped_binary"] == 1
    assert first.get("files_truncated", 0) + first.get("files_replaced", 0) == 1, first
    assert first["log_bytes_shipped"] > 0 and first.get("post_failures", 0) == 0

    # written while it was stopped: shipped once after a restart on the saved offsets
    _append(worker, b"while stopped\n")
    collector = Collector(url, tmp_path / "ray", state)
    try:
        assert collector.read_line() == f"collecting session={SESSION} to={url}"
        _until_stored(dashboard, worker.name, "hello from a worker\nwhile stopped\n")
        _append(worker, b"no newline before the stop")  # shipped by the stop's last pass
        collector.stop()
    finally:
        collector.close()
    assert _stored(dashboard, worker.name) == "hello from a worker\nwhile stopped\nno newline before the stop"

    listed = _listed(dashboard)
    names = {name for files in listed.values() for name in files}
    assert {"raylet.out", "gcs_server.out", "gcs_server.err", worker.name} <= names, listed
    assert _stored(dashboard, "gcs_server.err") == ""
    assert "raylet.out" in listed["raylet"] and "gcs_server.out" in listed["gcs_server"], listed
    assert worker.name in listed["worker_out"], listed
    assert not {"core.log", "stolen.log", "old/raylet.out"} & names, listed
    for name in names:
        assert "SECRET" not in (_stored(dashboard, name) or ""), name


def _event(n: int | str, **more: Any) -> bytes:
    return json.dumps({"event_id": str(n), "source_type": "EXPORT_SUBMISSION_JOB", **more}).encode()


def test_export_event_lines_each_once_bad_ones_counted(served: tuple[CliServer, str], tmp_path: Path) -> None:
    serve, _ = served
    logs = _session(tmp_path / "ray")
    exports = logs / "export_events" / "event_EXPORT_SUBMISSION_JOB.log"

    exports.write_bytes(
        _event(1)
        + b"\nnot json\n[1, 2]\n"
        + b'{"x": "'
        + b"y" * 3000
        + b'"}\n'
        + _event(2)
        + b"\n"
        + _event("p")[:10]
    )
    # the core's export files carry what RayEvents carry: not shipped
    (logs / "export_events" / "event_EXPORT_TASK_123.log").write_bytes(_event("core") + b"\n")
    state = tmp_path / "state"
    with export_events_server(f"http://{serve.address}", fail_first=1) as server:
        collector = Collector(server.url, tmp_path / "ray", state, "--max-line-kb", "1")
        try:
            assert collector.read_line().startswith(f"collecting session={SESSION} ")

            def ids() -> list[str]:
                return [e["event_id"] for e in server.events()]

            wait_until(lambda: ids() == ["1", "2"], "the two whole good lines", WAIT_S)
            _append(exports, _event("p")[10:] + b"\n")  # the partial line completed
            wait_until(lambda: ids() == ["1", "2", "p"], "the completed line", WAIT_S)
            # rotation: the renamed file is read to its end, then the new one
            _append(exports, _event(3) + b"\n")
            os.rename(exports, exports.with_name(exports.name + ".1"))
            exports.write_bytes(_event(4) + b"\n")
            wait_until(lambda: ids()[-2:] == ["3", "4"], "lines across the rotation", WAIT_S)
            # a line over the limit with no newline yet: skipped as it grows, the next line goes
            _append(exports, b'{"huge": "' + b"z" * 2000)
            _append(exports, b"z" * 2000 + b'"}\n' + _event(5) + b"\n")
            wait_until(lambda: ids()[-1] == "5", "the line after a huge one", WAIT_S)
            # a batch serve refuses (400) is dropped, not retried for ever
            _append(exports, _event("r", refuse=True) + b"\n")
            wait_until(lambda: "batches_dropped" in _stats(state), "the refused batch dropped", WAIT_S)
            _append(exports, _event(6) + b"\n")
            wait_until(lambda: ids()[-1] == "6", "the line after a refused batch", WAIT_S)
            stats = collector.stop()
        finally:
            collector.close()
        assert ids() == ["1", "2", "p", "3", "4", "5", "6"]
        assert stats["lines_skipped_bad_json"] == 1 and stats["lines_skipped_not_object"] == 1
        assert stats["lines_skipped_too_long"] == 2 and stats["batches_dropped"] == 1
        assert stats["post_failures"] >= 1 and stats["export_events_shipped"] == 7
        body = server.bodies[0]
        assert (body["sessionName"], body["nodeId"], body["hostname"]) == (
            SESSION,
            NODE,
            socket.gethostname(),
        )
        assert server.events()[0] == json.loads(_event(1))  # exactly as read

        # a restart on the saved offsets sends nothing again
        _append(exports, _event(7) + b"\n")
        collector = Collector(server.url, tmp_path / "ray", state)
        try:
            collector.read_line()
            wait_until(lambda: ids()[-1] == "7", "the line written while stopped", WAIT_S)
            collector.stop()
        finally:
            collector.close()
        assert ids() == ["1", "2", "p", "3", "4", "5", "6", "7"]


def test_each_destination_has_its_own_offsets_one_down_holds_back_nothing(
    served: tuple[CliServer, str], tmp_path: Path
) -> None:
    """`--to` serve (through a recording server) and `--to-export-events` a bridge-like server: while
    one answers 503 the other gets every line; back up, it gets what it missed, once; a stop while
    one is down leaves its lines for the next start, on its own offsets."""
    serve, dashboard = served
    logs = _session(tmp_path / "ray")
    exports = logs / "export_events" / "event_EXPORT_SUBMISSION_JOB.log"
    exports.write_bytes(_event(1) + b"\n" + _event(2) + b"\n")
    worker = logs / "worker-feed-01000000-77.out"
    worker.write_text("to serve only\n")
    state = tmp_path / "state"
    with export_events_server(f"http://{serve.address}") as first, export_events_server() as bridge:

        def ids(server: ExportEventsServer) -> list[str]:
            return [e["event_id"] for e in server.events()]

        bridge.down = True
        collector = Collector(first.url, tmp_path / "ray", state, "--to-export-events", bridge.url)
        try:
            announced = {collector.read_line(), collector.read_line()}
            assert announced == {f"collecting session={SESSION} to={u}" for u in (first.url, bridge.url)}
            wait_until(lambda: ids(first) == ["1", "2"], "serve's lines while the bridge is down", WAIT_S)
            _until_stored(dashboard, worker.name, "to serve only\n")
            _append(exports, _event(3) + b"\n")
            wait_until(lambda: ids(first) == ["1", "2", "3"], "a line written while it is down", WAIT_S)
            assert ids(bridge) == [] and bridge.failed >= 1
            bridge.down = False
            wait_until(lambda: ids(bridge) == ["1", "2", "3"], "the bridge catching up", WAIT_S)
            first.down = True
            _append(exports, _event(4) + b"\n")
            wait_until(lambda: ids(bridge)[-1] == "4", "the bridge's line while serve is down", WAIT_S)
            stats = collector.stop()  # serve still down: its last line waits for the next start
        finally:
            collector.close()
        assert ids(first) == ["1", "2", "3"] and ids(bridge) == ["1", "2", "3", "4"]
        assert set(stats) == {first.url, bridge.url}
        assert stats[bridge.url]["export_events_shipped"] == 4 and bridge.log_posts == 0
        assert "log_bytes_shipped" not in stats[bridge.url]
        assert stats[first.url]["export_events_shipped"] == 3
        assert stats[first.url]["final_pass_files_unsent"] == 1 and stats[first.url]["log_bytes_shipped"] > 0

        first.down = False  # started again: each destination on its own offsets
        collector = Collector(first.url, tmp_path / "ray", state, "--to-export-events", bridge.url)
        try:
            assert {collector.read_line(), collector.read_line()} == announced
            wait_until(lambda: ids(first)[-1:] == ["4"], "serve's line left at the stop", WAIT_S)
            collector.stop()
        finally:
            collector.close()
        assert ids(first) == ["1", "2", "3", "4"] and ids(bridge) == ["1", "2", "3", "4"]
        assert _stored(dashboard, worker.name) == "to serve only\n"


def _stats(state: Path) -> dict[str, int]:
    try:
        found: dict[str, int] = json.loads((state / "stats.json").read_text())
    except (OSError, ValueError):
        return {}
    return found


def test_a_session_link_out_of_the_temp_folder_is_not_followed(tmp_path: Path) -> None:
    """`session_latest` pointing outside Ray's temp folder: the collector waits, reading nothing;
    then follows the real session once the link names it, and the next one when Ray starts again,
    after the old one's last lines."""
    elsewhere = tmp_path / "elsewhere"
    outside = _session(elsewhere)
    (outside / "export_events" / "event_EXPORT_SUBMISSION_JOB.log").write_text('{"event_id": "x"}\n')
    temp = tmp_path / "ray"
    temp.mkdir()
    (temp / "session_latest").symlink_to(elsewhere / SESSION)
    with export_events_server() as server:
        collector = Collector(server.url, temp, tmp_path / "state")
        try:
            wait_until(lambda: "waiting for a Ray session" in collector.logged(), "the waiting line", WAIT_S)
            # a session in the temp folder whose `logs` links out of it: not read either
            linked = temp / "session_2026-11-21_00-00-00_000000_1"
            linked.mkdir()
            (linked / "logs").symlink_to(outside)
            (temp / "session_latest").unlink()
            (temp / "session_latest").symlink_to(linked)
            said = f"session {linked.name}: waiting for logs/raylet.out"
            wait_until(lambda: said in collector.logged(), "the wait for a readable raylet.out", WAIT_S)
            logs = _session(temp)
            (logs / "export_events" / "event_EXPORT_SUBMISSION_JOB.log").write_text('{"event_id": "a"}\n')
            assert collector.read_line().startswith(f"collecting session={SESSION} ")
            wait_until(lambda: len(server.events()) == 1, "the real session's event", WAIT_S)
            # Ray starts again while serve is down: the old session's last lines are kept until
            # they are stored, the new session followed meanwhile
            server.down = True
            with (logs / "export_events" / "event_EXPORT_SUBMISSION_JOB.log").open("a") as out:
                out.write('{"event_id": "b"}\n')
            later = "session_2026-11-23_00-00-00_000000_1"
            (_session(temp, later) / "export_events" / "event_EXPORT_SUBMISSION_JOB.log").write_text(
                '{"event_id": "c"}\n'
            )
            assert collector.read_line().startswith(f"collecting session={later} ")
            wait_until(lambda: "post_failures" in _stats(tmp_path / "state"), "a refused POST", WAIT_S)
            server.down = False
            wait_until(lambda: len(server.events()) == 3, "the old session's last and the new one's", WAIT_S)
            assert {
                (body["sessionName"], e["event_id"]) for body in server.bodies for e in body["events"]
            } == {
                (SESSION, "a"),
                (SESSION, "b"),
                (later, "c"),
            }
            collector.stop()
        finally:
            collector.close()


def test_serve_refuses_a_bad_log_chunk_naming_why_and_keeps_a_resend_once(
    served: tuple[CliServer, str],
) -> None:
    serve, dashboard = served
    url = f"http://{serve.address}/v1/ray-log-files"
    good = {"session": SESSION, "node": NODE, "file": "resent.log", "offset": "0"}
    octets = {"Content-Type": "application/octet-stream"}
    for wrong, reason in (
        ({"session": "../etc"}, "is not a Ray session name"),
        ({"node": "NOT-HEX"}, "is not a hex node id"),
        ({"file": "../../etc/passwd"}, "is not a file name under the session's logs folder"),
        ({"file": "/etc/passwd"}, "is not a file name under the session's logs folder"),
        ({"offset": "-1"}, "is not a byte offset"),
    ):
        answer = requests.post(url, params={**good, **wrong}, data=b"x\n", headers=octets, timeout=30)
        assert answer.status_code == 400 and reason in answer.json()["error"], (wrong, answer.text)
    answer = requests.post(url, params=good, data=b"x\n", headers={"Content-Type": "text/plain"}, timeout=30)
    assert answer.status_code == 415, answer.text
    bomb = gzip.compress(b"\0" * (20 << 20))  # inflates past the 16 MiB a chunk may hold
    answer = requests.post(
        url, params=good, data=bomb, headers={**octets, "Content-Encoding": "gzip"}, timeout=30
    )
    assert answer.status_code == 413 and "exceeds the limit" in answer.json()["error"], answer.text
    # gzip as the other intakes take it; the same chunk twice, and a longer resend, stored once
    gzipped = {**octets, "Content-Encoding": "gzip"}
    for body, headers in ((gzip.compress(b"one\n"), gzipped), (b"one\n", octets), (b"one\ntwo\n", octets)):
        assert requests.post(url, params=good, data=body, headers=headers, timeout=30).status_code == 200
    assert requests.post(url, params={**good, "offset": "4"}, data=b"two\n", headers=octets, timeout=30).ok
    assert _stored(dashboard, "resent.log") == "one\ntwo\n"


@pytest.mark.parametrize(
    ("args", "offsets", "message"),
    [
        (["--to", "ftp://x"], None, "is not an http:// or https:// URL"),
        (["--to", "http://h:1", "--poll-interval", "0"], None, "must be positive"),
        (["--to", "http://h:1"], "{not json", "cannot be read"),
        (["--to", "http://h:1"], '{"version": 1, "sessions": {"s": {"files": [{}]}}}', "is damaged"),
        (["--to", "http://h:1"], '{"version": 7}', "is not offsets of this version"),
    ],
)
def test_collect_refuses_bad_arguments_and_state_naming_why(
    args: list[str], offsets: str | None, message: str, tmp_path: Path
) -> None:
    if offsets is not None:
        (tmp_path / "offsets.json").write_text(offsets)
    out = refused_by_cli("collect", *args, "--state-dir", str(tmp_path), "--ray-temp-dir", str(tmp_path))
    assert message in out.stderr, out.stderr


def test_one_collector_a_state_folder(tmp_path: Path) -> None:
    held = Offsets(tmp_path)  # as a running collector holds it
    try:
        out = refused_by_cli("collect", "--to", "http://h:1", "--state-dir", str(tmp_path))
        assert f"{tmp_path} is in use by another collector (pid {os.getpid()})" in out.stderr, out.stderr
    finally:
        held.close()
