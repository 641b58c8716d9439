"""A POST of RayEvents as `serve` keeps it between its answer and its fold.

Where the compiled fold is built (native/_post_fold.c, with the row writer), `serve` reads a POST once
on its event loop, from its text and without the GIL (`scan`), only to answer it: the items
`prepare` would not take as they are are read with orjson and `prepare` (so the answer names what
is wrong with an item exactly as before), and what is kept is the body itself (`PostedBody`), which
the store folds later from its text (`EventStore.ingest_posted`); no Python object is made per
event. Elsewhere a POST's events are kept as the Python path reads them: a list of Prepared. Folded,
both give the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from ray_otel_events import native
from ray_otel_events.encoding.ray_json_posts import read_posted_array
from ray_otel_events.store.state_merge import Prepared, prepare

try:  # setup.py builds it where a C compiler and SQLite's headers are present
    from ray_otel_events.native import _post_fold
except ImportError:
    _post_fold = None  # type: ignore[assignment]
_compiled = _post_fold is not None and native.ENABLED


@dataclass(slots=True)
class PostedBody:
    """A POST's JSON text (an array) and what reading it found: `events` accepted, the Prepared
    of each item read in Python by its index (None where it was rejected), and the compiled
    reader's index of the items (what the fold reads of each)."""

    body: bytes
    events: int
    odd: dict[int, Prepared | None]
    index: bytes

    def __len__(self) -> int:
        return self.events

    def prepared(self) -> list[Prepared]:
        """Its accepted events read as the Python path reads them."""
        found: list[Prepared] = []
        for index, item in enumerate(orjson.loads(self.body)):
            if index not in self.odd:
                found.append(prepare(item))
            elif (odd := self.odd[index]) is not None:
                found.append(odd)
        return found


Accepted = PostedBody | list[Prepared]
"""A POST's accepted events, as they wait for their fold."""


def scan(body: bytes) -> tuple[int, list[tuple[int, int, int]], bytes] | None:
    """The compiled reading of a POST's text: its items, the place (index, start, end) of each one
    to read in Python, and the index the fold reads; None for a body to read whole in Python (where
    orjson would read it otherwise, or refuse it), or where there is no compiled fold."""
    if not _compiled:
        return None
    return _post_fold.scan(body)


def read_posted(body: bytes) -> tuple[Accepted, list[str]]:
    """A POSTed body's accepted events and an error naming each item that cannot be read, as
    `read_posted_array(body, prepare)` reads them; NotAnArrayError (400) when it is not a JSON array.
    Where the compiled fold is built, the events are kept as the body (`PostedBody`): only the
    items its reader leaves to Python are read here, with orjson and `prepare`. `serve` reads a
    POST so, and `rebuild` a kept one."""
    scanned = scan(body)
    errors: list[str]
    if scanned is None:  # no compiled reader, or a body it leaves to orjson (which may refuse it)
        _, events, errors = read_posted_array(body, prepare)
        return events, errors
    items, places, read = scanned
    odd: dict[int, Prepared | None] = {}
    errors = []
    for index, start, end in places:
        try:
            odd[index] = prepare(orjson.loads(body[start:end]))
        except ValueError as exc:
            odd[index] = None
            errors.append(f"[{index}]: {exc}")
    return PostedBody(body, items - len(errors), odd, read), errors


def item_prepared(posted: PostedBody, start: int, end: int) -> Prepared:
    """The item of `posted` at [start, end) of its text, read as the Python path reads it."""
    return prepare(orjson.loads(posted.body[start:end]))


def accepted_events(accepted: Accepted) -> list[Prepared]:
    """The Prepared of a POST's accepted events, whichever way it was kept."""
    return accepted.prepared() if isinstance(accepted, PostedBody) else accepted
