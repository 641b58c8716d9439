"""The RayEvent JSON object reader (native/_ray_json_wire.c `event_wire`) against its Python twin
(encoding/ray_json_decode's fast path): every JSON object in the input (the input itself, or the
items of an array) read to the same RayEvent, or handed over to json_format by both."""

from __future__ import annotations

import engine
import orjson
import seeds

from tests.test_compiled_helpers import _same


def check(data: bytes) -> None:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return  # not JSON: the reader is given parsed objects only
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict):
            _same(item)


def _seeds() -> list[bytes]:
    return [orjson.dumps(item) for item in seeds.event_dicts()]


if __name__ == "__main__":
    engine.main(check, _seeds)
