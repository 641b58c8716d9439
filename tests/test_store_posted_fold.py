"""`serve`'s compiled intake (native/_post_fold.c: a POST read and its task rows folded from its text)
against the Python path it stands for (orjson, `prepare`, `ingest_prepared`): the same answers, the
same counts and the same rows, column for column, on every captured event, mutated events, bodies
written every way JSON may be written, and text orjson refuses. With the compiled helpers off, the
intake keeps Prepared lists and folds them in Python: the same rows again."""

from __future__ import annotations

import base64
import copy
import gzip
import json
import random
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ray_otel_events import native
from ray_otel_events.encoding.ray_json_posts import NotAnArrayError, read_posted_array
from ray_otel_events.store.backend import ColumnFilter, IngestResult
from ray_otel_events.store.kept_ids import sqlite_hashes
from ray_otel_events.store.posted_body import Accepted, PostedBody, read_posted
from ray_otel_events.store.row_packing import (
    PACKED_V1,
    PACKED_V2,
    id_value,
    pack_row,
    row_ids_text,
    row_json,
)
from ray_otel_events.store.sqlite_store import ROW_IDS, SCHEMA_VERSION, EventStore
from ray_otel_events.store.state_merge import TASKS, WORKERS, Prepared, prepare
from tests.helpers.examples import examples
from tests.helpers.pure_python import needs_compiled, run_pure_python
from tests.helpers.stored_rows import AS_SCHEMA_5_KEYS, ROW_ID_PLACES, SELECT_ROWS, row_ids, unpacked
from tests.test_compiled_helpers import _mutated
from tests.test_otlp_wire import _fixture_dicts

try:
    from ray_otel_events.native import _post_fold
except ImportError:
    _post_fold = None  # type: ignore[assignment]

needs_post_fold = needs_compiled(_post_fold is not None, "serve's compiled intake (native/_post_fold.c)")

DICTS = _fixture_dicts()
TASK_DICTS = [
    d for d in DICTS if str(d.get("eventType")) in ("TASK_DEFINITION_EVENT", "TASK_LIFECYCLE_EVENT")
]


def _orjson(value: Any) -> bytes:
    """orjson's text, or Python's for what orjson will not write (big integers, lone surrogates)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value).encode()


# Every way a client may write the same JSON: compact, Python's default spacing, indented with
# non-ASCII escaped, and orjson's.
WRITERS: list[Callable[[Any], bytes]] = [
    lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    ),
    lambda value: json.dumps(value).encode(),
    lambda value: json.dumps(value, indent=1).encode(),
    _orjson,
]


class CountingFolder:
    """The store's compiled fold, counting the events it hands back to Python."""

    def __init__(self, folder: Any) -> None:
        self.folder = folder
        self.handed_back = 0
        self.events = 0

    def fold(self, posts: list[Any], received: float) -> Any:
        out = self.folder.fold(posts, received)
        self.handed_back += len(out[3])
        self.events += sum(len(post) for post in posts)
        return out

    def close(self) -> None:
        self.folder.close()


def _read_python(body: bytes) -> tuple[list[Prepared], list[str]] | str:
    """The branch point's reading: orjson, then `prepare` for each item."""
    try:
        _, events, errors = read_posted_array(body, prepare)
    except NotAnArrayError as exc:
        return f"refused: {exc}"
    return events, errors


def _read_compiled(body: bytes) -> tuple[Accepted, list[str]] | str:
    try:
        return read_posted(body)
    except NotAnArrayError as exc:
        return f"refused: {exc}"


def _outcome(ingest: Callable[..., IngestResult], *args: Any, now: float) -> Any:
    """What an ingest gives, or the error it raises (the same from both paths)."""
    try:
        return _result(ingest(*args, now=now))
    except Exception as exc:
        return type(exc), str(exc)


def _rows(store: EventStore) -> list[tuple[Any, ...]]:
    return unpacked(store._query(SELECT_ROWS))


def _result(result: IngestResult) -> tuple[Any, ...]:
    return (result.duplicates, result.ignored, result.refused, result.by_type, result.invalid)


def _ingest_both(directory: Path, batches: list[list[bytes]]) -> tuple[CountingFolder, int]:
    """Every batch of POST bodies read and folded by the compiled intake and by the Python path, each
    into a store of its own: the same answers, results and rows. Returns the compiled fold's counts
    and the rows stored."""
    compiled, python = EventStore(directory / "compiled.sqlite3"), EventStore(directory / "python.sqlite3")
    assert compiled._post_folder is not None
    counting = CountingFolder(compiled._post_folder)
    compiled._post_folder = counting  # type: ignore[assignment]
    try:
        for number, batch in enumerate(batches):
            posts: list[Accepted] = []
            events: list[Prepared] = []
            for body in batch:
                read, expected = _read_compiled(body), _read_python(body)
                if isinstance(expected, str):
                    assert read == expected, body  # refused alike, with orjson's message
                    continue
                assert not isinstance(read, str)
                assert (len(read[0]), read[1]) == (len(expected[0]), expected[1]), body
                posts.append(read[0])
                events += expected[0]
            now = 1000.0 + number
            got = _outcome(compiled.ingest_posted, posts, now=now)
            assert got == _outcome(python.ingest_prepared, events, now=now)
        rows = _rows(compiled)
        assert rows == _rows(python)
        return counting, len(rows)
    finally:
        compiled.close()
        python.close()


def _posts(rnd: random.Random, events: list[Any], write: Callable[[Any], bytes]) -> list[bytes]:
    """The events in POSTs of 1 to 12, written by `write`."""
    bodies = []
    start = 0
    while start < len(events):
        size = rnd.randint(1, 12)
        bodies.append(write(events[start : start + size]))
        start += size
    return bodies


def _batches(rnd: random.Random, bodies: list[bytes]) -> list[list[bytes]]:
    """The bodies in fold batches of 1 to 4 POSTs, some POSTs sent twice (retries)."""
    bodies = bodies + [body for body in bodies if rnd.random() < 0.2]
    batches = []
    while bodies:
        size = rnd.randint(1, 4)
        batches.append(bodies[:size])
        bodies = bodies[size:]
    return batches


@pytest.fixture
def directory() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="posted-fold-") as name:
        yield Path(name)


def test_serve_reads_posts_from_their_text_where_the_row_writer_is_built(directory: Path) -> None:
    """With the compiled helpers on (the suite builds them all), serve keeps a post's text and
    folds it in C; with them off, it reads the post into Prepared lists and folds them in Python."""
    store = EventStore(directory / "s.sqlite3")
    try:
        if native.ENABLED:
            assert store._writer is not None, store.writer_reason
            assert _post_fold is not None, "setup.py should have built native/_post_fold.c"
            assert store.folds_posted and isinstance(read_posted(orjson.dumps(TASK_DICTS))[0], PostedBody)
        else:
            assert store._writer is None and not store.folds_posted
            assert isinstance(read_posted(orjson.dumps(TASK_DICTS))[0], list)
    finally:
        store.close()


@needs_post_fold
@pytest.mark.parametrize("write", WRITERS)
def test_every_captured_event_is_answered_and_folded_as_python_does(
    directory: Path, write: Callable[[Any], bytes]
) -> None:
    rnd = random.Random(7)
    for _ in range(3):  # pieces in any order and POST
        shuffled = DICTS[:]
        rnd.shuffle(shuffled)
        _ingest_both(directory, _batches(rnd, _posts(rnd, shuffled + shuffled[:40], write)))
        for path in directory.iterdir():
            path.unlink()
    counting, rows = _ingest_both(directory, [[write(TASK_DICTS)], [write(TASK_DICTS[::-1])]])
    assert rows > 10 and counting.handed_back == 0  # Ray's task shapes folded from their text


@needs_post_fold
def test_a_batch_of_many_attempts_folds_in_chunks_as_python_does(directory: Path) -> None:
    """Hundreds of rows a batch: several chunks of the fold (each its stored rows read at once), an
    attempt's pieces in different POSTs and batches, stored rows read back and folded again."""
    events = []
    for i in range(700):
        for source in TASK_DICTS[i % 3 :: 7]:
            event = copy.deepcopy(source)
            event["eventId"] = f"{i}-{event['eventId']}"
            event["sessionName"] = f"session_{i % 5}"
            payload = event["taskDefinitionEvent" if "taskDefinitionEvent" in event else "taskLifecycleEvent"]
            task = bytearray(base64.b64decode(payload["taskId"]))
            task[:4] = i.to_bytes(4, "big")
            payload["taskId"] = base64.b64encode(task).decode()
            events.append(event)
    random.Random(11).shuffle(events)
    bodies = [WRITERS[0](events[start : start + 300]) for start in range(0, len(events), 300)]
    batches = [bodies[start : start + 4] for start in range(0, len(bodies), 4)]
    counting, rows = _ingest_both(directory, batches + batches[:2])
    assert rows > 1000 and counting.handed_back == 0


@needs_post_fold
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32), st.sampled_from(range(len(WRITERS))))
def test_mutated_events_are_answered_and_folded_as_python_does(seed: int, writer: int) -> None:
    """Odd values anywhere in Ray's events (ids, times, numbers, types, shapes), keys renamed or
    removed, beside events as Ray writes them: each either folded here to Python's rows or handed
    back, never folded otherwise."""
    rnd = random.Random(seed)
    events: list[Any] = [copy.deepcopy(rnd.choice(DICTS)) for _ in range(rnd.randint(5, 25))]
    for _ in range(rnd.randint(1, 6)):
        source = rnd.choice(TASK_DICTS if rnd.random() < 0.7 else DICTS)
        keys = ["taskId", "timestamp", "state", "jobId", "eventId", "sessionName", "x"]
        events.insert(rnd.randrange(len(events) + 1), _mutated(rnd, source, 3, keys))
    with tempfile.TemporaryDirectory(prefix="posted-fold-") as name:
        _ingest_both(Path(name), _batches(rnd, _posts(rnd, events, WRITERS[writer])))


@needs_post_fold
@settings(max_examples=examples(300), deadline=None)
@given(
    st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(min_value=1e-6, max_value=1e17),
        st.builds(lambda m, e: m / 10**e, st.integers(-(10**7), 10**7), st.integers(0, 9)),  # short
        st.integers(min_value=-(2**70), max_value=2**70),
    ),
    st.sampled_from(["{!r}", "{:.17g}", "{:.16g}", "{:e}", "{:.3f}", "{}"]),
)
@example(0.1, "{:.17g}")  # 0.10000000000000001: orjson writes 0.1
@example(1e16, "{:.1f}")  # 10000000000000000.0: orjson writes 1e+16
@example(0.00001, "{:.5f}")  # orjson's fixed notation, not Python's
def test_numbers_are_written_as_orjson_writes_them(number: float | int, form: str) -> None:
    """A task's resources as any client prints numbers: its row's JSON is what orjson writes of
    what orjson reads (the compiled fold copies only numbers already in that form)."""
    text = form.format(number) if isinstance(number, float) else str(number)
    event = copy.deepcopy(next(d for d in TASK_DICTS if d["eventType"] == "TASK_DEFINITION_EVENT"))
    body = json.dumps([event]).replace('"CPU": 1.0', f'"CPU": {text}').encode()
    assert text in body.decode()
    with tempfile.TemporaryDirectory(prefix="posted-fold-") as name:
        _ingest_both(Path(name), [[body]])


@needs_post_fold
def test_the_intake_keeps_a_posts_text_and_prepares_only_the_odd_items() -> None:
    events = [*TASK_DICTS[:3], {"not": "an event"}, 5, dict(TASK_DICTS[4], sessionName=None)]
    accepted, errors = read_posted(orjson.dumps(events))
    assert isinstance(accepted, PostedBody) and len(accepted) == 4
    assert errors == ["[3]: an event without eventId", "[4]: an event without eventId"]
    assert accepted.odd == {3: None, 4: None, 5: prepare(events[5])}  # sessionName null: Python's "None"
    assert accepted.prepared() == [prepare(e) for e in [*events[:3], events[5]]]
    assert read_posted(b"[1, {}]")[1] == ["[0]: an event without eventId", "[1]: an event without eventId"]
    with pytest.raises(NotAnArrayError, match="not valid JSON"):
        read_posted(b'[{"a": 1}')


def test_an_attempt_number_the_store_cannot_hold_is_rejected_in_the_answer(directory: Path) -> None:
    """Before, it was accepted and its row's upsert failed at every try: the fold stopped for good
    (and every read waiting for it). Now it is named in the answer; the rest of its POST is stored."""
    event = copy.deepcopy(next(d for d in TASK_DICTS if d["eventType"] == "TASK_DEFINITION_EVENT"))
    event["taskDefinitionEvent"]["taskAttempt"] = 2**64 - 1
    accepted, errors = read_posted(json.dumps([event, *TASK_DICTS[1:3]]).encode())
    assert len(accepted) == 2
    assert errors == [
        "[0]: TASK_DEFINITION_EVENT: taskDefinitionEvent.taskAttempt 18446744073709551615"
        " does not fit in 64 bits"
    ]
    store = EventStore(directory / "s.sqlite3")
    assert store.ingest_posted([accepted]).stored == 2
    store.close()


@needs_post_fold
def test_a_body_whose_index_does_not_fit_it_is_refused_not_read(directory: Path) -> None:
    store = EventStore(directory / "s.sqlite3")
    accepted, _ = read_posted(orjson.dumps(TASK_DICTS[:2]))
    assert isinstance(accepted, PostedBody)
    cut = PostedBody(accepted.body[:40], accepted.events, accepted.odd, accepted.index)
    with pytest.raises(ValueError, match="index does not fit"):
        store.ingest_posted([cut])
    assert store.ingest_posted([accepted]).stored == 2  # the store is unharmed
    store.close()


_PURE_INTAKE = """
import json, sys
from pathlib import Path
from ray_otel_events.store.posted_body import read_posted
from ray_otel_events.store.sqlite_store import EventStore
store = EventStore(Path(sys.argv[1]))
assert store._post_folder is None and store._writer is None
for number, batch in enumerate(json.loads(Path(sys.argv[2]).read_text())):
    posts = [read_posted(body.encode())[0] for body in batch]
    assert all(isinstance(post, list) for post in posts)
    store.ingest_posted(posts, now=1000.0 + number)
from ray_otel_events.store.kept_ids import unpacked
from ray_otel_events.store.row_packing import row_json
rows = store._query(SELECT_ROWS_HERE)
ids_at = ROW_ID_PLACES_HERE
assert all(isinstance(row[5], bytes) and isinstance(row[6], bytes) for row in rows)
def shown(v):
    return ["bytes", v.hex()] if isinstance(v, bytes) else v
def read(row):
    return [
        *map(shown, row[:5]), json.loads(row_json(row[5], [row[at] for at in ids_at])), unpacked(row[6]),
        *map(shown, row[7:]),
    ]
print(json.dumps([read(row) for row in rows]))
store.close()
"""


def _json_values(row: tuple[Any, ...]) -> list[Any]:
    """A row as _PURE_INTAKE prints it: a blob (an id kept as its bytes) as ["bytes", its hex]."""
    return [["bytes", v.hex()] if isinstance(v, bytes) else v for v in row]


@needs_post_fold
def test_with_the_compiled_helpers_off_serve_stores_the_same_rows(directory: Path) -> None:
    rnd = random.Random(5)
    events = DICTS + [_mutated(rnd, rnd.choice(TASK_DICTS), 2, ["taskId", "x"]) for _ in range(30)]
    batches = _batches(rnd, _posts(rnd, events, WRITERS[1]))
    compiled = EventStore(directory / "compiled.sqlite3")
    for number, batch in enumerate(batches):
        posts = []
        for body in batch:
            try:
                posts.append(read_posted(body)[0])
            except NotAnArrayError:
                continue
        compiled.ingest_posted(posts, now=1000.0 + number)
    rows = json.loads(json.dumps([_json_values(row) for row in _rows(compiled)]))
    compiled.close()
    (directory / "batches.json").write_text(
        json.dumps([[body.decode() for body in batch] for batch in batches])
    )
    code = _PURE_INTAKE.replace("sys.argv[1]", repr(str(directory / "pure.sqlite3")))
    code = code.replace("sys.argv[2]", repr(str(directory / "batches.json")))
    code = code.replace("SELECT_ROWS_HERE", repr(SELECT_ROWS)).replace(
        "ROW_ID_PLACES_HERE", repr(ROW_ID_PLACES)
    )
    assert json.loads(run_pure_python(code)) == rows
    assert len(rows) > 20


def _old_store(
    directory: Path, half: int, as_before: Callable[[bytes, list[Any]], str | bytes]
) -> sqlite3.Connection:
    """old.sqlite3 holding the first `half` of TASK_DICTS, each row's data as an earlier version
    wrote it (`as_before(data, its ids)`), open for the test to age further."""
    store = EventStore(directory / "old.sqlite3")
    store.ingest_posted([read_posted(orjson.dumps(TASK_DICTS[:half]))[0]], now=1000.0)
    store.close()
    db = sqlite3.connect(directory / "old.sqlite3")
    with db:
        for rowid, data, *ids in db.execute(f"SELECT rowid, data, {ROW_IDS} FROM state_rows").fetchall():
            db.execute("UPDATE state_rows SET data = ? WHERE rowid = ?", (as_before(data, ids), rowid))
    return db


def test_a_schema_3_store_with_its_rows_as_text_is_read_and_folded_into(directory: Path) -> None:
    """A store written before rows were packed (schema 3: each row's JSON a text, its keys and ids
    text) opens, answers the same rows, and takes later pieces of those rows (the compiled fold
    reads text rows too); rows written again are packed."""
    half = len(TASK_DICTS) // 2
    db = _old_store(directory, half, lambda data, ids: row_json(data, ids).decode())
    with db:
        db.execute(AS_SCHEMA_5_KEYS)
        db.execute(
            "UPDATE state_rows SET "
            + ", ".join(
                f"{c} = CASE WHEN typeof({c}) = 'blob' THEN lower(hex({c})) ELSE {c} END"
                for c in ("node", "worker")
            )
        )
        db.execute("PRAGMA user_version=3")
    db.close()
    reference = EventStore(directory / "new.sqlite3")
    store = EventStore(directory / "old.sqlite3")
    try:
        for target in (store, reference):
            if target is reference:
                target.ingest_posted([read_posted(orjson.dumps(TASK_DICTS[:half]))[0]], now=1000.0)
            target.ingest_posted([read_posted(orjson.dumps(TASK_DICTS[half:]))[0]], now=1001.0)
        old, new = store._query(SELECT_ROWS), reference._query(SELECT_ROWS)
        assert [_read(row) for row in old] == [_read(row) for row in new] and len(old) > 10
        assert {type(row[5]) for row in old} == {str, bytes}  # untouched rows stay text, read as they are
        assert all(isinstance(row[5], bytes) for row in old if row[4] == 1001.0)  # written again: packed
        assert store._query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
    finally:
        store.close()
        reference.close()


def test_a_store_of_packed_v1_rows_is_read_and_folded_into(directory: Path) -> None:
    """A schema-6 store as the version before PACKED_V2 wrote it (each row's JSON deflated against
    ROW_DICTIONARY alone, PACKED_V1: pack_row without ids gives those very bytes) opens read-only
    as it is, and to write: marked schema 7, nothing rewritten; it answers the same rows and reads
    as a store written now, and takes later pieces of its rows (the compiled fold reads V1 rows
    too); rows written again are PACKED_V2, the others stay V1."""
    half = len(TASK_DICTS) // 2
    db = _old_store(directory, half, lambda data, ids: pack_row(row_json(data, ids)))
    with db:
        db.execute("PRAGMA user_version=6")
    assert {data[0] for (data,) in db.execute("SELECT data FROM state_rows")} == {PACKED_V1}
    db.close()
    reader = EventStore(directory / "old.sqlite3", read_only=True)
    try:  # read as it is, left schema 6
        read_only = reader.select(TASKS, limit=1000).rows
    finally:
        reader.close()
    assert sqlite3.connect(directory / "old.sqlite3").execute("PRAGMA user_version").fetchall() == [(6,)]
    reference = EventStore(directory / "new.sqlite3")
    store = EventStore(directory / "old.sqlite3")
    try:
        # marked as this schema, which a version reading PACKED_V1 alone refuses as newer
        assert store._query("PRAGMA user_version") == [(SCHEMA_VERSION,)] and SCHEMA_VERSION == 7
        reference.ingest_posted([read_posted(orjson.dumps(TASK_DICTS[:half]))[0]], now=1000.0)
        assert [_read(row) for row in store._query(SELECT_ROWS)] == [
            _read(r) for r in reference._query(SELECT_ROWS)
        ]
        assert store.select(TASKS, limit=1000).rows == reference.select(TASKS, limit=1000).rows == read_only
        assert len(read_only) > 5
        for target in (store, reference):
            target.ingest_posted([read_posted(orjson.dumps(TASK_DICTS[half:]))[0]], now=1001.0)
        old, new = store._query(SELECT_ROWS), reference._query(SELECT_ROWS)
        assert [_read(row) for row in old] == [_read(row) for row in new] and len(old) > 10
        assert {row[5][0] for row in old if row[4] == 1000.0} == {PACKED_V1}  # untouched: read as they are
        assert {row[5][0] for row in old if row[4] == 1001.0} == {PACKED_V2}  # written again
        assert {row[5][0] for row in new} == {PACKED_V2}
        for task in reference.select(TASKS, limit=1000).rows:
            assert store.entity_rows(TASKS, task["task_id"]) == reference.entity_rows(TASKS, task["task_id"])
    finally:
        store.close()
        reference.close()


# A store written by schema 4's code (main at 30fae60, Python's writer) from run E's first 9 POSTs
# (tests/fixtures/ray-2.60/raw/runE), VACUUMed and gzipped: its node and worker ids are hex text.
SCHEMA_4 = Path(__file__).parent / "fixtures" / "store" / "schema4.sqlite3.gz"
RUN_E = sorted((Path(__file__).parent / "fixtures" / "ray-2.60" / "raw" / "runE").glob("*.body"))
SCHEMA_4_POSTS = 9


def _fold_run_e(store: EventStore, bodies: list[Path], first: int) -> None:
    for number, path in enumerate(bodies, start=first):
        body = path.read_bytes()
        store.ingest_posted([read_posted(body)[0]], now=1000.0 + number, bodies=[body])


def _answers(store: EventStore) -> list[Any]:
    """What the reads of the id columns answer: filters by each node and worker, sorts and counts."""
    tasks = store.select(TASKS, limit=1000).rows
    nodes = sorted({row["node_id"] for row in tasks if row.get("node_id")})
    workers = sorted({row["worker_id"] for row in tasks if row.get("worker_id")})
    assert nodes and len(workers) > 1
    out: list[Any] = [store.counts(WORKERS, "node", "worker")]
    for column, values in (("node", nodes), ("worker", workers)):
        for value in values:
            for text in (value, value.upper()):
                for equal in (True, False):
                    found = store.select(TASKS, [ColumnFilter(column, equal, text)], order="start")
                    out.append(
                        (column, text.lower(), equal, found.matched, [r["task_id"] for r in found.rows])
                    )
    out.append([r.get("node_id") for r in store.select(TASKS, order="node", descending=False).rows])
    return out


def test_a_schema_4_store_with_its_ids_as_text_is_read_and_migrated(directory: Path) -> None:
    """A store written by schema 4 (node and worker ids as hex text) answers as one written now:
    opened read-only as it is, and opened to write after its ids are rewritten as bytes (schema 5);
    later events fold into its rows as into a new store's."""
    old = directory / "schema4.sqlite3"
    old.write_bytes(gzip.decompress(SCHEMA_4.read_bytes()))
    assert (
        sqlite3.connect(old)
        .execute("SELECT COUNT(*) FROM state_rows WHERE typeof(node) = 'text'")
        .fetchone()[0]
    )
    reference = EventStore(directory / "new.sqlite3")
    try:
        _fold_run_e(reference, RUN_E[:SCHEMA_4_POSTS], 0)
        expected = _answers(reference)
        read_only = EventStore(old, read_only=True)
        try:
            assert _answers(read_only) == expected
        finally:
            read_only.close()
        store = EventStore(old)
        try:
            assert store._query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
            assert store._query(
                "SELECT COUNT(*) FROM state_rows WHERE typeof(node) = 'text' OR typeof(worker) = 'text'"
            ) == [(0,)]
            assert _answers(store) == expected
            for target in (store, reference):
                _fold_run_e(target, RUN_E[SCHEMA_4_POSTS:], SCHEMA_4_POSTS)
            rows = [_read(row) for row in store._query(SELECT_ROWS)]
            wanted = [_read(row) for row in reference._query(SELECT_ROWS)]
            assert len(rows) == len(wanted) > 30
            # A row schema 4's code folded keeps what that fold read: a dead worker's exit (Ray
            # 2.60's deathInfo, read since) shows once `store rebuild` folds the raw events again.
            differ = [row[:2] for row, want in zip(rows, wanted, strict=True) if row != want]
            assert differ and {kind for kind, _ in differ} == {"workers"}, differ
            store.rebuild()
            assert [_read(row) for row in store._query(SELECT_ROWS)] == wanted
            assert _answers(store) == _answers(reference)
        finally:
            store.close()
    finally:
        reference.close()


def _read(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row as stored now or before: its JSON packed or not, its event ids as hashes or text."""
    return (*row[:5], orjson.loads(row_json(row[5], row_ids(row))), sqlite_hashes(row[6]), *row[7:])


# A store written by schema 5's code (main at cf1b76c, the compiled writer) from run E's first 9
# POSTs, as SCHEMA_4 was: its rows' sessions are their names and their entity ids hex text.
SCHEMA_5 = Path(__file__).parent / "fixtures" / "store" / "schema5.sqlite3.gz"


def _key_answers(store: EventStore) -> list[Any]:
    """What the reads by entity id and session answer: each entity's rows by its id (as given and
    upper-case), filters and searches by id, a session's rows, lists and counts."""
    sessions = store.sessions()
    assert len(sessions) == 1
    out: list[Any] = [sessions, store.session_list(), store.session_evidence(1004.0)]
    for resource in ("tasks", "actors", "jobs", "nodes", "workers"):
        rows = store.select(resource, limit=1000, order="start").rows
        assert rows, resource
        out.append([store.total(resource), store.total(resource, sessions[0])])
        for row in rows:
            entity = str(
                row.get({"tasks": "task_id", "actors": "actor_id", "jobs": "job_id"}.get(resource, "")) or ""
            )
            if not entity:
                entity = str(row.get("node_id") if resource == "nodes" else row.get("worker_id"))
            for text in (entity, entity.upper()):
                found = store.entity_rows(resource, text)
                out.append([(attempt, session, found_row) for attempt, session, found_row in found])
                assert found, (resource, text)
                out.append(store.entity_rows(resource, text, sessions[0]))
                for equal in (True, False):
                    selected = store.select(resource, [ColumnFilter("entity_id", equal, text)], order="start")
                    out.append((text.lower(), equal, selected.matched, selected.rows))
                out.append(store.select(resource, search=text[4:14].upper(), order="start").matched)
            out.append(store.new_fields(resource, entity, 0, sessions[0]))
        out.append(store.select(resource, [ColumnFilter("session", True, sessions[0])], order="start").rows)
        out.append(store.select(resource, session=sessions[0], order="start").matched)
    return out


def test_a_schema_5_store_with_sessions_and_entity_ids_as_text_is_read_and_migrated(directory: Path) -> None:
    """A store written by schema 5 (each row's session its name, its entity id hex text) answers as
    one written now: opened read-only as it is, and opened to write after it is rewritten as schema
    6 (sessions as numbers, hex entity ids as bytes); later events fold into its rows exactly as
    into a new store's (schema 5's code folded as this one does)."""
    old = directory / "schema5.sqlite3"
    old.write_bytes(gzip.decompress(SCHEMA_5.read_bytes()))
    written = sqlite3.connect(old)
    assert written.execute("PRAGMA user_version").fetchone() == (5,)
    assert (
        written.execute(
            "SELECT COUNT(*) FROM state_rows WHERE typeof(session) = 'text' AND typeof(entity_id) = 'text'"
        ).fetchone()[0]
        == written.execute("SELECT COUNT(*) FROM state_rows").fetchone()[0]
    )
    written.close()
    reference = EventStore(directory / "new.sqlite3")
    try:
        _fold_run_e(reference, RUN_E[:SCHEMA_4_POSTS], 0)
        expected = _key_answers(reference), _answers(reference)
        read_only = EventStore(old, read_only=True)
        try:
            assert (_key_answers(read_only), _answers(read_only)) == expected
        finally:
            read_only.close()
        store = EventStore(old)
        try:
            assert store._query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
            assert store._query(
                "SELECT typeof(session), typeof(entity_id), COUNT(*) FROM state_rows GROUP BY 1, 2"
            ) == [("integer", "blob", 33)]
            assert store._query("SELECT id, name FROM sessions") == reference._query(
                "SELECT id, name FROM sessions"
            )
            assert [_read(row) for row in store._query(SELECT_ROWS)] == [
                _read(row) for row in reference._query(SELECT_ROWS)
            ]
            assert (_key_answers(store), _answers(store)) == expected
            for target in (store, reference):
                _fold_run_e(target, RUN_E[SCHEMA_4_POSTS:], SCHEMA_4_POSTS)
            rows = [_read(row) for row in store._query(SELECT_ROWS)]
            assert rows == [_read(row) for row in reference._query(SELECT_ROWS)] and len(rows) > 30
            assert (_key_answers(store), _answers(store)) == (_key_answers(reference), _answers(reference))
        finally:
            store.close()
        assert EventStore(old, read_only=True).select(TASKS).matched == reference.select(TASKS).matched
    finally:
        reference.close()


def test_a_damaged_packed_row_is_an_error_not_a_row() -> None:
    ids = [bytes.fromhex("ab" * 24), None, bytes.fromhex("cd" * 28)]
    for packed, read_with in (
        (pack_row(b'{"task_id":"ab"}'), ()),  # PACKED_V1: PostgreSQL's and older SQLite stores' rows
        (pack_row(b'{"task_id":"ab"}', ids), ids),  # PACKED_V2
    ):
        assert row_json(packed, read_with) == b'{"task_id":"ab"}'
        # cut short (by its last byte: its text whole, its deflate's end missing, which the compiled
        # fold's row_unpack refuses too), of a format not read, longer than its text
        cut, other, longer = packed[:-1], b"\x03" + packed[1:], packed[:1] + b"\xff\xff\xff\x0f" + packed[5:]
        for damaged in (cut, packed[:-3], other, longer):
            with pytest.raises(ValueError, match="stored row"):
                row_json(damaged, read_with)


def test_a_packed_row_refers_back_to_its_own_ids_as_its_columns_keep_them() -> None:
    """A PACKED_V2 row's dictionary ends with its key columns' bytes as its JSON holds them: its ids
    cost a reference each rather than their digits, and it is read only with those columns (others
    give another text or an error, never silently the same); a PACKED_V1 row ignores them."""
    rnd = random.Random(3)
    task, node, worker = (rnd.randbytes(n).hex() for n in (24, 28, 28))  # digits deflate cannot squeeze
    text = orjson.dumps(
        {"task_id": task, "node_id": node, "worker_id": worker, "parent_task_id": "ff" * 20 + "01000000"}
    )
    ids = [id_value(task), id_value(node), id_value(worker)]
    assert row_ids_text(ids) == f'"{task}""node_id":"{node}""worker_id":"{worker}"'.encode()
    # a hex text counts as its bytes, whatever its case (a NOCASE upsert keeps the first, schema 6
    # rewrote texts as bytes); NULLs, texts not hex, empty bytes and numbers add nothing
    assert (
        row_ids_text([task.upper(), node, b""])
        == row_ids_text(ids[:2])
        == row_ids_text([ids[0], node.upper()])
    )
    assert row_ids_text(["x", None, b""]) == row_ids_text([7]) == b""
    v1, v2 = pack_row(text), pack_row(text, ids)
    assert (v1[0], v2[0]) == (PACKED_V1, PACKED_V2)
    assert len(v2) < len(v1) - 60
    assert row_json(v2, ids) == row_json(v1, ()) == row_json(v1, ids) == text
    assert row_json(v2, [task.upper(), node, worker]) == text
    for wrong in ([ids[0], None, ids[2]], [], [ids[0], ids[2], ids[1]], [task, "x", worker]):
        try:
            assert row_json(v2, wrong) != text
        except ValueError as exc:
            assert "stored row" in str(exc)
    # the same row without a worker yet (a task before it runs): only what its columns hold
    assert row_json(pack_row(text, [*ids[:2], None]), [*ids[:2], None]) == text


def _read_or_error(data: bytes, ids: list[Any]) -> str | bytes:
    try:
        return row_json(data, ids)
    except ValueError as exc:
        return str(exc)


def _lifecycle(state: str, at_s: int, node: bytes = b"", worker: bytes = b"") -> dict[str, Any]:
    """A task's lifecycle event of one transition, as Ray's core worker sends it (of the fixture's
    first task), with its node and worker ids or without (a task not yet on a worker)."""
    event = copy.deepcopy(next(d for d in TASK_DICTS if d.get("eventType") == "TASK_LIFECYCLE_EVENT"))
    event["eventId"] = base64.b64encode(f"late-worker-{state}".encode()).decode()
    body = event["taskLifecycleEvent"]
    body["stateTransitions"] = [{"state": state, "timestamp": f"2026-11-22T01:37:{at_s:02}.5Z"}]
    body["nodeId"] = base64.b64encode(node).decode()
    body["workerId"] = base64.b64encode(worker).decode()
    if not worker:
        body.pop("workerPid", None)
        body.pop("taskLogInfo", None)
    return event


def test_a_row_whose_worker_comes_in_a_later_event_reads_with_the_ids_stored_beside_it(
    directory: Path,
) -> None:
    """A task row first stored without its node and worker (its dictionary: its own id alone), then
    given them by a later event (folded from the stored row, by the compiled fold where it is
    built, and packed again with them: the blob and its key columns are written by one upsert), then
    folded again: every read of its JSON (selects, entity rows, the fold's own, a read-only
    store's) reads it whole, against the ids its columns hold at that time."""
    rnd = random.Random(8)
    node, worker = rnd.randbytes(28), rnd.randbytes(28)
    path = directory / "late.sqlite3"
    store = EventStore(path)
    steps = [
        [_lifecycle("PENDING_NODE_ASSIGNMENT", 20)],
        [_lifecycle("SUBMITTED_TO_WORKER", 25, node, worker), _lifecycle("RUNNING", 26, node, worker)],
        [_lifecycle("FINISHED", 30, node, worker)],
    ]
    columns = f"SELECT data, {ROW_IDS} FROM state_rows WHERE resource = 1"
    try:
        for number, events in enumerate(steps):
            result = store.ingest_posted([read_posted(orjson.dumps(events))[0]], now=1000.0 + number)
            assert not result.refused and not result.invalid, result
            ((data, entity, node_column, worker_column),) = store._query(columns)
            assert data[0] == PACKED_V2 and isinstance(entity, bytes)
            assert (node_column, worker_column) == ((None, None) if number == 0 else (node, worker))
            (row,) = store.select(TASKS).rows
            assert orjson.loads(row_json(data, [entity, node_column, worker_column])) == row
            assert [state["state"] for state in row["events"]] == [
                e["taskLifecycleEvent"]["stateTransitions"][0]["state"]
                for step in steps[: number + 1]
                for e in step
            ]
            assert (row.get("node_id"), row.get("worker_id")) == (
                (None, None) if number == 0 else (node.hex(), worker.hex())
            )
            assert [found for _, _, found in store.entity_rows(TASKS, row["task_id"].upper())] == [row]
            key = (TASKS, row["task_id"], 0, row_session := store.sessions()[0])
            assert store._rows_for({key})[key].row == row, row_session
            if number:
                assert store.select(TASKS, [ColumnFilter("worker", True, worker.hex())]).rows == [row]
                # read with other ids, the blob is not this row: its dictionary is its columns'
                assert _read_or_error(data, [entity, node_column, None]) != row_json(
                    data, [entity, node_column, worker_column]
                )
    finally:
        store.close()
    reader = EventStore(path, read_only=True)
    try:
        (row,) = reader.select(TASKS).rows
        assert row["state"] == "FINISHED" and row["worker_id"] == worker.hex()
    finally:
        reader.close()
