"""Many sessions in one store, retention by session, and the raw events kept beside the rows.

Two sessions' worth of a real Ray 2.60 capture are POSTed to `serve` (the second with its session
renamed, its event ids new and its task, function and class names prefixed `b_`, while its task
ids stay the same: the hardest case to keep apart). Every reader (Ray's state API and Ray's CLI,
our page's API, our CLI over HTTP and over the file, the page in Chromium) answers for the newest
session by default and for the other when asked. The store is then rebuilt from its raw events
and answers the same; a field a later Ray adds shows in `get`.
"""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from helpers.agg_procs import FIXTURE, CliServer, cli_in_process, start
from helpers.postgres import serve_store_args
from helpers.stored_rows import AS_SCHEMA_5_KEYS
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import MultiDict
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select
from test_web_page import SCREENSHOTS, _console_errors, _wait, browser  # noqa: F401 (a fixture)

from ray_otel_events.store import raw_events, sql_upkeep
from ray_otel_events.store.backend import Retention, StoreError
from ray_otel_events.store.location import open_store
from ray_otel_events.store.sqlite_store import EventStore
from ray_otel_events.store.views import StoreViews

EVENTS: list[dict[str, Any]] = json.loads(Path(FIXTURE).read_text())
FIRST = EVENTS[0]["sessionName"]
SECOND = "session_2026-11-27_10-00-00_000000_4242"
FLAKY = "e0dc174c83599034ffffffffffffffffffffffff01000000"  # a task id both sessions have
RAY = str(Path(sys.executable).with_name("ray"))
RESOURCES = ("tasks", "actors", "jobs", "nodes", "workers")


def _renamed(events: list[dict[str, Any]], session: str, prefix: str) -> list[dict[str, Any]]:
    """The capture as another session: new event ids, names prefixed, the same entity ids."""
    out = copy.deepcopy(events)
    for event in out:
        event["sessionName"] = session
        event["eventId"] = prefix + event["eventId"]
        for key in ("taskDefinitionEvent", "actorTaskDefinitionEvent"):
            body = event.get(key)
            if body is None:
                continue
            for name in ("taskName", "actorTaskName"):
                if body.get(name):
                    body[name] = prefix + body[name]
            for func in (body.get("taskFunc"), body.get("actorFunc")):
                descriptor = (func or {}).get("pythonFunctionDescriptor")
                if descriptor:
                    descriptor["functionName"] = prefix + descriptor["functionName"]
                    if descriptor.get("className"):
                        descriptor["className"] = prefix + descriptor["className"]
        if "actorDefinitionEvent" in event:
            event["actorDefinitionEvent"]["className"] = prefix + event["actorDefinitionEvent"]["className"]
    return out


SECOND_EVENTS = _renamed(EVENTS, SECOND, "b_")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ray_otel_events", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _post(server: CliServer, events: list[Any]) -> None:
    answer = requests.post(f"http://{server.address}/v1/ray-events", json=events, timeout=30)
    assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text


def _get(server: CliServer, path: str, **kwargs: Any) -> Any:
    answer = requests.get(f"http://{server.address}{path}", timeout=30, **kwargs)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _names(rows: list[dict[str, Any]], key: str = "name") -> set[str]:
    return {row[key] for row in rows if row.get(key)}


def _of_second(names: set[str]) -> bool:
    """Every name is the second session's (and there is one); a driver's (none) is anyone's."""
    names = names - {"", "task"}
    return bool(names) and all("b_" in name for name in names)


def _of_first(names: set[str]) -> bool:
    names = names - {"", "task"}
    return bool(names) and not any("b_" in name for name in names)


@pytest.fixture
def two_sessions(servers: list[CliServer], tmp_path: Path, store_location: str | Path) -> CliServer:
    server = start(servers, "serve", *serve_store_args(store_location, tmp_path))
    _post(server, EVENTS)
    _get(server, "/api/sessions")  # a read waits until they are folded: the second session's are later
    _post(server, SECOND_EVENTS)
    return server


def test_every_reader_answers_for_one_session(
    two_sessions: CliServer, tmp_path: Path, store_location: str | Path
) -> None:
    server = two_sessions
    listed = _get(server, "/api/sessions")
    assert listed["current"] == SECOND
    assert [s["name"] for s in listed["sessions"]] == [SECOND, FIRST]
    first, second = listed["sessions"][1], listed["sessions"][0]
    assert second["last_seen"] >= first["last_seen"] and first["first_seen"] <= first["last_seen"]
    for counted in ("jobs", "tasks", "actors", "nodes"):
        assert first[counted] == second[counted] > 0, counted

    def tasks(**kwargs: Any) -> list[dict[str, Any]]:
        body = _get(server, "/api/v0/tasks", **kwargs)
        return list(body["data"]["result"]["result"])

    newest = tasks()
    assert _of_second(_names(newest))
    assert _of_first(_names(tasks(params={"session": FIRST})))
    assert _of_first(_names(tasks(cookies={"ray_otel_events_session": FIRST})))
    assert _of_second(_names(tasks(params={"session": SECOND}, cookies={"ray_otel_events_session": FIRST})))
    assert len(tasks(params={"session": FIRST})) == len(newest)  # each session's own, not both
    stale = tasks(cookies={"ray_otel_events_session": "session_gone"})  # a pruned session's cookie
    assert _of_second(_names(stale))
    unknown = requests.get(f"http://{server.address}/api/v0/tasks", params={"session": "nope"}, timeout=10)
    assert unknown.status_code == 404 and "no session 'nope'" in unknown.json()["msg"]
    assert _get(server, "/api/version")["session_name"] == SECOND
    assert _get(server, "/api/version", params={"session": FIRST})["session_name"] == FIRST

    actors = _get(server, "/api/v0/actors", params={"session": FIRST})["data"]["result"]["result"]
    assert _of_first(_names(actors, "class_name"))
    summary = _get(server, "/api/v0/tasks/summarize")["data"]["result"]["result"]
    assert _of_second(set(summary["node_id_to_summary"]["cluster"]["summary"]))
    summarized = _get(server, "/api/v0/tasks/summarize", params={"session": FIRST})["data"]["result"]
    assert _of_first(set(summarized["result"]["node_id_to_summary"]["cluster"]["summary"]))
    # Ray's summary leaves the driver out, as its lists do by default
    assert summarized["total"] == len(tasks(params={"session": FIRST}))

    # our page's API
    overview = _get(server, "/api/ui/overview", params={"session": FIRST})
    assert overview["session"] == FIRST and len(overview["jobs"]) == 1
    assert sum(overview["task_counts"].values()) == len(
        tasks(params={"session": FIRST, "exclude_driver": "false"})
    )
    assert _of_second(_names(_get(server, "/api/ui/tasks")["rows"]))
    assert _of_first(_names(_get(server, "/api/ui/tasks", params={"session": FIRST})["rows"]))
    slices = [
        e for e in _get(server, "/api/ui/timeline", params={"session": FIRST}) if e.get("cat") == "task"
    ]
    started = [
        t
        for t in tasks(params={"session": FIRST, "exclude_driver": "false", "detail": "true"})
        if t["start_time_ms"] is not None
    ]
    assert len(slices) == len(started) > 0  # one session's attempts, not both sessions'
    assert {e["args"]["task_id"] for e in slices} == {t["task_id"] for t in started}
    assert _get(server, "/api/ui/tasks/" + FLAKY)["attempts"][0]["name"] == "b_flaky"
    assert _get(server, "/api/ui/tasks/" + FLAKY, params={"session": FIRST})["attempts"][0]["name"] == "flaky"

    # Ray's own CLI cannot name a session: it answers for the newest
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    ray = subprocess.run(
        [RAY, "list", "tasks", "--address", f"http://{server.address}", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd="/tmp",
    )
    assert ray.returncode == 0, ray.stderr
    assert _of_second(_names(json.loads(ray.stdout)))

    # our CLI, asking the server and reading the file: the same answers (read in this process:
    # sixteen interpreter starts made this test the slowest of its module; the refusal below is a
    # real process)
    store = str(store_location)
    for source in (["--address", server.address], ["--store", store]):
        shown = cli_in_process("sessions", *source)
        assert shown.returncode == 0, shown.stderr
        assert f"{SECOND} (newest)" in shown.stdout and FIRST in shown.stdout
        assert shown.stdout.index(SECOND) < shown.stdout.index(FIRST)
        default = cli_in_process("list", "tasks", "--format", "json", *source)
        assert default.returncode == 0 and _of_second(_names(json.loads(default.stdout))), default.stderr
        chosen = cli_in_process("list", "tasks", "--format", "json", "--session", FIRST, *source)
        assert chosen.returncode == 0 and _of_first(_names(json.loads(chosen.stdout))), chosen.stderr
        summary_cli = cli_in_process("summary", "tasks", "--session", FIRST, *source)
        assert (
            summary_cli.returncode == 0
            and "\nflaky " in summary_cli.stdout
            and "b_" not in summary_cli.stdout
        )
        got = cli_in_process("get", "tasks", FLAKY, "--session", FIRST, *source)
        assert got.returncode == 0, got.stderr
        # both attempts, this session's (the second has had no definition event)
        assert [(row["attempt_number"], row["name"]) for row in json.loads(got.stdout)] == [
            (0, "flaky"),
            (1, ""),
        ]
        assert json.loads(cli_in_process("get", "tasks", FLAKY, *source).stdout)[0]["name"] == "b_flaky"
        out = tmp_path / "timeline.json"
        timeline = cli_in_process("timeline", "--out", str(out), "--session", FIRST, *source)
        assert timeline.returncode == 0, timeline.stderr
        assert len([e for e in json.loads(out.read_text()) if e.get("cat") == "task"]) == len(started)
        logs = cli_in_process("logs", FLAKY, "--session", FIRST, *source)
        assert logs.returncode == 0, logs.stderr
        missing = _cli("list", "tasks", "--session", "nope", *source)
        assert missing.returncode == 1 and "no session 'nope'" in missing.stderr


def test_spans_and_log_lines_of_a_task_id_two_sessions_share(store_location: str | Path) -> None:
    """Lines and spans carry no session: a task id both sessions have gets those received in its
    session's time."""
    path = store_location
    store = open_store(path)
    store.ingest(EVENTS, now=1000.0)
    store.ingest(SECOND_EVENTS, now=5000.0)
    store.add_log_lines([{"ts_ns": 1, "task_id": FLAKY, "body": "first run"}], now=1001.0)
    store.add_log_lines([{"ts_ns": 2, "task_id": FLAKY, "body": "second run"}], now=5001.0)
    span = {"trace_id": "a" * 32, "span_id": "b" * 16, "name": "flaky", "start_ns": 1, "end_ns": 2}
    store.add_spans([dict(span, task_id=FLAKY)], now=1001.0)
    store.add_spans([dict(span, trace_id="c" * 32, task_id=FLAKY)], now=5001.0)
    views = StoreViews(store)
    for session, body, trace in ((FIRST, "first run", "a" * 32), (SECOND, "second run", "c" * 32)):
        status, task = views.answer(f"/api/ui/tasks/{FLAKY}", MultiDict(), session)
        assert status == 200
        assert [line["body"] for line in task["logs"]] == [body]
        assert [s["trace_id"] for s in task["spans"]] == [trace]
        status, traces = views.answer("/api/ui/traces", MultiDict(), session)
        assert [t["trace_id"] for t in traces["traces"]] == [trace]
    store.close()
    logs = _cli("logs", FLAKY, "--store", str(path), "--session", FIRST)
    assert logs.returncode == 0 and "first run" in logs.stdout and "second run" not in logs.stdout


def test_a_session_without_rows_never_hides_one_that_has_them(store_location: str | Path) -> None:
    """Events of a session that make no row (here a type with no state, under the empty name a
    hook without Ray's session sent) arrive last: every reader still answers for the session with
    rows, until the rowless one has rows of its own."""
    store = open_store(store_location)
    store.ingest(EVENTS, now=1000.0)
    rowless = {"eventId": "cm93bGVzcw==", "eventType": "PLATFORM_EVENT", "sessionName": ""}
    store.ingest([rowless], now=2000.0)
    assert store.sessions() == [FIRST, ""]  # the empty one stored last
    views = StoreViews(store)
    for _ in range(2):  # the second read from what the first remembered
        assert store.newest_session() == FIRST
        status, listed = views.answer("/api/sessions", MultiDict())
        assert status == 200 and listed["current"] == listed["newest"] == FIRST
        status, tasks = views.answer("/api/v0/tasks", MultiDict())
        assert status == 200 and _of_first(_names(tasks["data"]["result"]["result"]))
    store.close()
    shown = _cli("sessions", "--store", str(store_location))
    assert shown.returncode == 0 and f"{FIRST} (newest)" in shown.stdout, shown.stdout
    store = open_store(store_location)
    store.ingest(_renamed(EVENTS, "", "c_"), now=3000.0)  # now it has rows, and is the newest
    assert store.newest_session() == ""
    store.close()


def _padded(events: list[dict[str, Any]], session: str, prefix: str) -> list[dict[str, Any]]:
    """A session with incompressible padding in a field this version does not read (kept raw)."""
    out = _renamed(events, session, prefix)
    for event in out:
        event["message"] = os.urandom(2000).hex()
    return out


def test_retention_drops_whole_sessions_oldest_first(
    store_location: str | Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_upkeep, "DROP_CHUNK", 3)  # a session's rows go in several transactions
    store = open_store(store_location)
    names = ["session_a", "session_b", "session_c", "session_d"]
    for i, name in enumerate(names):
        store.ingest(_padded(EVENTS, name, f"{i}_"), now=1000.0 * (i + 1))
    per_session = store.size()["state_rows"] // 4
    assert store.sessions() == names
    # by age: a session whose last event is older than the bound goes, whole
    assert store.prune(Retention(max_age_s=1500), now=2600.0) == per_session
    assert store.sessions() == names[1:]
    # by rows: the oldest sessions go until the store is under the bound
    assert store.prune(Retention(max_rows=2 * per_session), now=4100.0) == per_session
    assert store.sessions() == names[2:]
    # by bytes in use: the oldest session goes; the newest is kept whole while dropping others helps
    used = store.used_bytes()
    assert store.prune(Retention(max_bytes=used - 1), now=4100.0) == per_session
    assert store.sessions() == ["session_d"] and store.size()["state_rows"] == per_session
    assert store.used_bytes() < used
    # the newest session alone over the bound: its oldest raw events go first, then its rows
    kept_rows = store.size()["state_rows"]
    assert store.raw_size()["blocks"] == 1
    store.prune(Retention(max_bytes=store.used_bytes() - 1), now=4100.0)
    assert store.raw_size()["blocks"] == 0 and store.sessions() == ["session_d"]
    assert store.size()["state_rows"] <= kept_rows
    # its rows can no longer be rebuilt from raw events: a rebuild says so instead of losing them
    with pytest.raises(StoreError, match="retention dropped raw events"):
        store.rebuild()
    assert store.size()["state_rows"] > 0
    store.close()


def test_a_store_from_before_raw_events_opens_and_refuses_a_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    store = EventStore(path)
    store.ingest(EVENTS, now=1000.0)
    store.close()
    with sqlite3.connect(path) as db:  # as a version before sessions were kept left it (schema 5's keys)
        db.executescript(
            f"{AS_SCHEMA_5_KEYS}; DROP TABLE sessions; DROP TABLE raw_events; DROP TABLE store_notes;"
            " PRAGMA user_version=5;"
        )
    reader = EventStore(path, read_only=True)
    assert reader.sessions() == [FIRST]
    status, got = StoreViews(reader).answer(f"/api/ui/get/tasks/{FLAKY}", MultiDict())
    assert status == 200 and got["rows"][0]["name"] == "flaky"
    reader.close()
    store = EventStore(path)
    assert [s["name"] for s in store.session_list()] == [FIRST]
    with pytest.raises(StoreError, match="before raw events were kept"):
        store.rebuild()
    store.close()
    refused = _cli("store", "rebuild", "--store", str(path))
    assert refused.returncode == 1 and "--force" in refused.stderr
    forced = _cli("store", "rebuild", "--store", str(path), "--force")
    assert forced.returncode == 0 and "rebuilt" in forced.stdout and " 0 state rows" in forced.stdout


def _cli_here(*args: str) -> Any:
    """Our CLI's JSON answer, run in this process (`cli_in_process`): these commands only read the
    store file, and a process per answer (nine a session, three times over) was slow."""
    answer = cli_in_process(*args)
    assert answer.returncode == 0, (args, answer.returncode, answer.stderr)
    return json.loads(answer.stdout)


def _answers(store: str, session: str) -> dict[str, Any]:
    """What our CLI lists and gets from a store file, for one session."""
    found: dict[str, Any] = {}
    for resource in RESOURCES:
        listed = _cli_here(
            "list", resource, "--detail", "--format", "json", "--store", store, "--session", session
        )
        found[resource] = sorted(listed, key=lambda row: json.dumps(row, sort_keys=True))
    found["get"] = _cli_here("get", "tasks", FLAKY, "--store", store, "--session", session)
    return found


def test_rebuild_from_raw_events_gives_the_same_answers(
    servers: list[CliServer], tmp_path: Path, store_location: str | Path
) -> None:
    path = store_location
    server = start(servers, "serve", *serve_store_args(path, tmp_path))
    for i in range(0, len(EVENTS), 5):  # one task's pieces in several POSTs, out of order
        _post(server, EVENTS[::-1][i : i + 5])
    _post(server, EVENTS[:7])  # a retried batch: kept raw twice, folded once
    _post(server, SECOND_EVENTS)
    _post(server, [dict(EVENTS[0], sessionName=SECOND, eventId="bWl4ZWQ="), EVENTS[1]])  # sessions mixed
    assert server.stop()["events_stored"] == 2 * len(EVENTS) + 1
    before = {session: _answers(str(path), session) for session in (FIRST, SECOND)}
    assert before[FIRST]["tasks"] and before[SECOND]["actors"]
    # the compiled fold, then the Python one: both refold the same rows from the raw events
    for env in ({}, {"RAY_OTEL_EVENTS_PURE_PYTHON": "1"}):
        rebuilt = _cli("store", "rebuild", "--store", str(path), env=env)
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert "rebuilt" in rebuilt.stdout and "duplicates skipped" in rebuilt.stdout
        after = {session: _answers(str(path), session) for session in (FIRST, SECOND)}
        assert after == before
    missing = _cli("store", "rebuild", "--store", str(tmp_path / "none.sqlite3"))
    assert missing.returncode == 1 and "no store at" in missing.stderr


def test_a_field_a_later_ray_adds_shows_in_get(two_sessions: CliServer) -> None:
    definition = next(e for e in EVENTS if e["eventType"] == "TASK_DEFINITION_EVENT")
    task_id = "0123456789abcdefffffffffffffffffffffffff01000000"
    later = copy.deepcopy(definition)
    later["eventId"] = "bGF0ZXItcmF5"
    later["sessionName"] = SECOND
    later["taskDefinitionEvent"]["taskId"] = "ASNFZ4mrze////////////////8BAAAA"
    later["taskDefinitionEvent"]["newFieldInRay299"] = {"accelerator": "tpu-v9", "count": 4}
    later["futureTopLevel"] = "not a payload field"
    _post(two_sessions, [later])
    detail = _get(two_sessions, f"/api/ui/tasks/{task_id}")
    assert detail["attempts"][0]["new_field_in_ray299"] == {"accelerator": "tpu-v9", "count": 4}
    got = _cli("get", "tasks", task_id, "--address", two_sessions.address)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["new_field_in_ray299"] == {"accelerator": "tpu-v9", "count": 4}
    table = _cli("get", "tasks", task_id, "--address", two_sessions.address, "--format", "table")
    assert "new_field_in_ray299" in table.stdout and "tpu-v9" in table.stdout
    # Ray's state API keeps Ray's columns only: Ray's client builds its dataclasses from them
    listed = _get(
        two_sessions,
        "/api/v0/tasks",
        params={
            "detail": "true",
            "filter_keys": "task_id",
            "filter_predicates": "=",
            "filter_values": task_id,
        },
    )["data"]["result"]["result"]
    assert len(listed) == 1 and "new_field_in_ray299" not in listed[0]


def test_the_page_picks_a_session(two_sessions: CliServer, browser: WebDriver) -> None:  # noqa: F811
    base = f"http://{two_sessions.address}"
    browser.get("about:blank")  # an earlier test's page, polling its stopped server, is left:
    _console_errors(browser)  # its errors are read (and so dropped) before this page's
    browser.delete_all_cookies()
    browser.get(base + "/")

    def shown_names() -> set[str]:
        return {
            row.find_elements(By.CSS_SELECTOR, "td")[2].text
            for row in browser.find_elements(By.CSS_SELECTOR, "#tasks-table tbody tr")
        }

    _wait(lambda: _of_second(shown_names() - {""}), what="the newest session's tasks")
    picker = Select(browser.find_element(By.ID, "session-picker"))
    assert [o.get_attribute("value") for o in picker.options] == ["", SECOND, FIRST]
    assert picker.first_selected_option.get_attribute("value") == ""
    assert SECOND in picker.options[0].text
    picker.select_by_value(FIRST)  # sets the cookie and reloads
    _wait(lambda: _of_first(shown_names() - {""}), what="the chosen session's tasks")
    assert browser.get_cookie("ray_otel_events_session")["value"] == FIRST
    picker = Select(browser.find_element(By.ID, "session-picker"))
    assert picker.first_selected_option.get_attribute("value") == FIRST
    browser.save_screenshot(str(SCREENSHOTS / "6-session-picker.png"))
    assert _console_errors(browser) == []
    picker.select_by_value("")  # back to the newest: the cookie goes
    _wait(lambda: _of_second(shown_names() - {""}), what="the newest session again")
    assert browser.get_cookie("ray_otel_events_session") is None


@pytest.mark.skipif(raw_events._raw_deflate is None, reason="the compiled compression is not built here")
@given(
    st.lists(
        st.one_of(
            st.lists(
                st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(), st.dictionaries(st.text(), st.text()))
            ).map(orjson.dumps),
            st.sampled_from([b"[]", b" [ \n ] ", b"[1]\n", b"\t[ 2 , 3 ]  "]),
        ),
        max_size=6,
    )
)
@settings(max_examples=200, deadline=None)
def test_the_compiled_compression_matches_its_twin(bodies: list[bytes]) -> None:
    compiled = raw_events.compress(bodies)
    assert compiled == raw_events.compress_python(bodies)  # the same zlib, the same stream
    assert orjson.loads(raw_events.decompress(compiled)) == [
        item for body in bodies for item in orjson.loads(body)
    ]


@pytest.mark.skipif(raw_events._raw_deflate is None, reason="the compiled compression is not built here")
def test_texts_that_are_not_arrays_are_skipped_alike() -> None:
    """Found by fuzzing: a body with no closing bracket, or only white space inside, is left out by
    both twins (the Python one once kept `x.` of `[x.\\x7f`)."""
    for bodies in (
        [b"[x.\x7f"],
        [b"x]"],
        [b"][1"],
        [b"[ \t\r\n ]", b"[1]"],
        [b"[\x0b]"],
        [b"[" + b" " * 100 + b"]"],
    ):
        assert raw_events._raw_deflate.compress(
            bodies, raw_events.RAW_DICTIONARY
        ) == raw_events.compress_python(bodies), bodies


def test_rays_dashboard_answers_for_the_session_its_page_chose(
    servers: list[CliServer], tmp_path: Path
) -> None:
    """Ray's page makes its own requests, with no session in them: `/?session=NAME` sets the cookie
    they then carry (as the History Server does), `/?session=` goes back to the newest."""
    pytest.importorskip("ray")
    server = start(servers, "serve", "--store", str(tmp_path / "s.sqlite3"), "--ray-dashboard-port", "0")
    dashboard = "http://" + server.read_line(30).split("=", 1)[1]
    _post(server, EVENTS)
    _get(server, "/api/sessions")  # a read waits until they are folded: the second session's are later
    _post(server, SECOND_EVENTS)
    _get(server, "/api/sessions")  # (waits until both are folded)

    def actor_classes(client: requests.Session) -> set[str]:
        answer = client.get(dashboard + "/logical/actors", timeout=30)
        assert answer.status_code == 200, answer.text
        return {actor["actorClass"] for actor in answer.json()["data"]["actors"].values()}

    client = requests.Session()
    assert _of_second(actor_classes(client))  # the newest, by default
    assert client.get(dashboard + "/api/version", timeout=30).json()["session_name"] == SECOND
    page = client.get(dashboard + "/", params={"session": FIRST}, timeout=30)
    assert page.status_code == 200 and client.cookies["ray_otel_events_session"] == FIRST
    assert _of_first(actor_classes(client))
    assert client.get(dashboard + "/api/version", timeout=30).json()["session_name"] == FIRST
    jobs = client.get(dashboard + "/api/jobs/", timeout=30).json()
    assert jobs and all(job.get("job_id") for job in jobs)
    client.get(dashboard + "/", params={"session": ""}, timeout=30)
    assert "ray_otel_events_session" not in client.cookies and _of_second(actor_classes(client))
    unknown = client.get(dashboard + "/logical/actors", params={"session": "nope"}, timeout=30)
    assert unknown.status_code == 404 and "no session 'nope'" in unknown.text
