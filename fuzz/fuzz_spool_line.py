"""The spool line writer (native/_spool_line.c `span_line`: a DirectSpan as the OTLP hook's spool
line) against its Python twin (tracing/spool.py `span_line`: orjson of the 23-field list), on spans
whose shape and values the input decides: the input drives the generator the tests use
(tests/test_spool_line.py `generated_span`) in place of its random numbers, and its bytes are also
set whole as attribute texts (any code point, lone surrogates included). Each kind of line is the
twin's bytes, or left to Python (None); where the twin refuses the span the writer must leave it.
The span's values come from the traced program, not from outside; fuzzed all the same, as every
compiled path is."""

from __future__ import annotations

import random

import engine

from ray_otel_events.tracing import spool
from ray_otel_events.tracing.spool import ENDED, STARTED, STARTED_REF
from tests.test_spool_line import _tracer as make_tracer
from tests.test_spool_line import both, generated_span

assert spool.compiled_span_line is not spool._python_writes, "the compiled writer is not bound"

TRACER, COLLECTOR = make_tracer()


class InputRandom(random.Random):
    """random.Random whose bits are read from the input (zeros once it is used up), so that the
    fuzzer's mutations steer the generator's choices."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0
        super().__init__(0)

    def getrandbits(self, k: int) -> int:
        size = (k + 7) // 8
        chunk = self._data[self._at : self._at + size]
        self._at += size
        return int.from_bytes(chunk.ljust(size, b"\0"), "little") & ((1 << k) - 1)

    def random(self) -> float:
        return self.getrandbits(53) / (1 << 53)


def _texts(data: bytes) -> list[str]:
    """The input as text three ways: every byte a code point, UTF-8 where it is, and UTF-16 with
    lone surrogates kept."""
    even = data[: len(data) // 2 * 2]
    return [
        data.decode("latin-1"),
        data.decode("utf-8", "replace"),
        even.decode("utf-16-le", "surrogatepass"),
    ]


def check(data: bytes) -> None:
    if not data:
        return
    span = generated_span(InputRandom(data), TRACER, COLLECTOR)
    COLLECTOR.ended.clear()
    if data[0] & 1:
        for number, text in enumerate(_texts(data)):
            span._attributes[text if number == data[0] % 3 else f"raw{number}"] = text
        span._name = _texts(data)[data[0] % 3]
    for kind in (STARTED, ENDED, STARTED_REF):
        made, expected = both(span, kind)
        if made is None:
            continue
        assert not isinstance(expected, BaseException), (kind, made, expected)
        assert made == expected, (kind, made, expected)


def _seeds() -> list[bytes]:
    made = [random.Random(number).randbytes(size) for number in range(40) for size in (16, 200, 1000)]
    return [*made, "ünï \u2028 \ud800 😀".encode("utf-16-le", "surrogatepass"), b"\x01" + b"\xff" * 64]


if __name__ == "__main__":
    engine.main(check, _seeds)
