"""The store's fold of posted RayEvents (native/_state_fold.c: `prepare`, the task folds and
`row_columns`) against its Python twin (store/state_merge): each JSON object of the input prepared,
folded into its row and written as the row's columns alike, or refused with the same error."""

from __future__ import annotations

import engine
import orjson
import seeds

from tests.test_compiled_helpers import _fold_both


def check(data: bytes) -> None:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return  # the fold is given what orjson read
    _fold_both(value if isinstance(value, list) else [value])


if __name__ == "__main__":
    engine.main(check, seeds.posted_bodies)
