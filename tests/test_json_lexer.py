"""The JSON lexer the two compiled readers of a POST's text share (json_lexer.h), through each of
them: the bridge's one pass (native/_posted_events.c) and serve's intake (native/_post_fold.c). Each
takes only text orjson reads and reads it alike: any text, valid or not, gives the body to the
Python path where orjson refuses it, and every item left to Python is orjson's item; every value
at every depth of an item is checked as orjson checks it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_otel_events.otel import posted_events
from ray_otel_events.otel.posted_events import read_posted_events, read_posted_events_python
from ray_otel_events.store import posted_body
from tests import test_posted_events, test_store_posted_fold
from tests.helpers.examples import examples

SCALARS = [
    "0", "-0", "1", "-12", "1.0", "1.50", "0.5", "-0.0", "0.0001", "0.00001", "1e5", "1E+5", "2.5e-3",
    "1e400", "-1E400", "1e-400", "1.7976931348623157e308", "1.8e308", "123456789012345678",
    "1.7976931348623158e308", "1.7976931348623159e308", "-17976931348623158.079e292", "1" * 130 + ".5",
    "9223372036854775807", "-9223372036854775808", "9223372036854775808", "18446744073709551616",
    "true", "false", "null", '"a"', '""', '"é"', '"\\u00e9"', '"\\u00E9"', '"\\/"', '"\\u0000"',
    '"\\u001f"', '"\\u001F"', '"\\n"', '"\\ud83d\\ude00"', '"\\ud800"', '"\\udc00"', '"\\x"', '"\t"',
    "01", "1.", ".5", "+1", "NaN", "Infinity", "-", '"\xff"', "tru", '"AQAAAA=="', '"EVENT"',
]  # fmt: skip
"""Values orjson reads or refuses. 1.7976931348623158e308 reads as DBL_MAX, ...159e308 as infinity
(orjson refuses it): both readers draw that line where orjson does."""

LEFT_TO_ORJSON = {"9223372036854775808", "18446744073709551616"}
"""What orjson reads that both readers leave to it: integers past int64 (a uint64 or a float)."""

KEYS = ['"eventId"', '"eventType"', '"sessionName"', '"taskLifecycleEvent"', '"taskId"', '"a"', '"a\\u0062"']
SPACE = st.sampled_from(["", "", " ", "\n  ", "\t", "\r\n"])


def _json_text() -> st.SearchStrategy[str]:
    scalars = st.sampled_from(SCALARS)
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.builds(
                lambda items, space: "[" + ("," + space).join(items) + "]",
                st.lists(inner, max_size=4),
                SPACE,
            ),
            st.builds(
                lambda members, space: (
                    "{" + ",".join(f"{space}{k}{space}:{space}{v}" for k, v in members) + "}"
                ),
                st.lists(st.tuples(st.sampled_from(KEYS), inner), max_size=5),
                SPACE,
            ),
        ),
        max_leaves=12,
    )


@dataclass(frozen=True)
class Reader:
    """A compiled reader: `places` gives a body's item count and the (index, start, end) of each
    item it leaves to Python, or None where it leaves the whole body; `answers_alike` says whether
    its answer to the body is the Python path's."""

    places: Callable[[bytes], tuple[int, list[tuple[int, int, int]]] | None]
    answers_alike: Callable[[bytes], bool]


def _bridge_places(body: bytes) -> tuple[int, list[tuple[int, int, int]]] | None:
    read = posted_events._read(body)  # type: ignore[misc]
    if read is None:
        return None
    items = read[0]
    return len(items), [(i, item.start, item.stop) for i, item in enumerate(items) if type(item) is slice]


def _serve_places(body: bytes) -> tuple[int, list[tuple[int, int, int]]] | None:
    scanned = posted_body.scan(body)
    return None if scanned is None else (scanned[0], scanned[1])


def _bridge_answers_alike(body: bytes) -> bool:
    outcome = test_posted_events._outcome
    return bool(outcome(body, read_posted_events) == outcome(body, read_posted_events_python))


def _serve_answers_alike(body: bytes) -> bool:
    compiled, python = test_store_posted_fold._read_compiled(body), test_store_posted_fold._read_python(body)
    if isinstance(compiled, str) or isinstance(python, str):  # refused: orjson's message
        return compiled == python
    return compiled[1] == python[1]  # the rejections named in the answer


BRIDGE = Reader(_bridge_places, _bridge_answers_alike)
SERVE = Reader(_serve_places, _serve_answers_alike)
READERS = [
    pytest.param(BRIDGE, marks=test_posted_events.needs_compiled, id="bridge"),
    pytest.param(SERVE, marks=test_store_posted_fold.needs_post_fold, id="serve"),
]


@pytest.mark.parametrize("reader", READERS)
@settings(max_examples=examples(500), deadline=None)
@given(st.lists(_json_text(), max_size=5), SPACE, st.sampled_from(["", "", " ", "x", ",", "]"]))
def test_a_reader_takes_only_text_orjson_reads_and_reads_it_alike(
    reader: Reader, items: list[str], space: str, tail: str
) -> None:
    """A body orjson refuses is left whole to Python (None); of one it reads, each item left to
    Python is orjson's, and the answer is the Python path's."""
    body = (space + "[" + space + ("," + space).join(items) + space + "]" + tail).encode(
        "utf-8", "surrogatepass"
    )
    places = reader.places(body)
    try:
        expected: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        assert places is None, body
        return
    if places is None:
        return
    count, odd = places
    assert isinstance(expected, list) and count == len(expected)
    for index, start, end in odd:
        assert orjson.loads(body[start:end]) == expected[index]
    assert reader.answers_alike(body)


@pytest.mark.parametrize("reader", READERS)
def test_text_deep_inside_an_item_is_checked_as_orjson_checks_it(reader: Reader) -> None:
    """An item left to Python, or the part of one a reader does not read (serve reads an item's
    members and its payload's), is only checked: every value, valid or not, at every depth, gives
    the answer orjson's reading gives."""
    for scalar in SCALARS:
        for shape in ("{}", '{{"a": {}}}', '{{"a": {{"b": [{}]}}}}', '{{"a": [{{"b": {{"c": {}}}}}]}}'):
            body = ("[" + shape.format(scalar) + "]").encode("utf-8", "surrogatepass")
            places = reader.places(body)
            try:
                orjson.loads(body)
            except orjson.JSONDecodeError:
                assert places is None, body
                continue
            assert places is not None or scalar in LEFT_TO_ORJSON, body
            assert reader.answers_alike(body)


@pytest.mark.parametrize("reader", READERS)
def test_floats_are_read_up_to_where_orjson_reads_them_as_infinity(reader: Reader) -> None:
    """Before the shared lexer, serve left every float from 1e308 up to Python and the bridge
    read them (and left floats of 128 characters or more): now both read a float exactly when
    orjson does, DBL_MAX's neighbours and long texts included."""
    for text, finite in [
        ("1.7976931348623157e308", True),
        ("1.7976931348623158e308", True),  # under 2^1024 - 2^970: rounds down to DBL_MAX
        ("1.797693134862315807937289714053e308", True),
        ("1.797693134862315807937289714054e308", False),  # past it: infinity
        ("1.7976931348623159e308", False),
        ("-179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017"
         "977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273"
         "854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704"
         "342711559699508093042880177904174497792.0", False),  # exactly half way: the even 2^1024
        ("0.000001e314", True),
        ("9" * 309 + ".5", False),
        ("1" * 130 + ".5", True),
        ("0." + "0" * 400 + "1e400", True),
    ]:  # fmt: skip
        event = '{"eventType":"TASK_DEFINITION_EVENT","taskDefinitionEvent":{"requiredResources":{"CPU":%s}}}'
        body = ("[" + text + ', {"a": [' + text + "]}, " + event % text + "]").encode()
        try:
            orjson.loads(body)
            assert finite, text
        except orjson.JSONDecodeError:
            assert not finite, text
        assert (reader.places(body) is not None) == finite, text
        assert reader.answers_alike(body)
