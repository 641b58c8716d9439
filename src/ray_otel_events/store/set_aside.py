"""A batch whose fold failed, folded again in halves until each event that fails alone is found:
those are set aside (kept whole in the store's `refused_events`, listed and refolded by the `store`
command), every other event is stored.

Why: a batch is one transaction. One event the store cannot take (a key longer than an index
entry holds on PostgreSQL, or any value a later bug trips on) failed its whole batch, which was
tried again for ever while every later POST was answered and never stored. Halving finds each
such event in about 2·log2(batch) transactions, and only once the batch has failed. A store that
is away or busy (StoreUnavailable, StoreBusy) is not the events' fault: that stops the search,
and the caller tries the batch again later.
"""

from __future__ import annotations

import json
import time
from typing import NamedTuple

import orjson

from ray_otel_events.store.backend import (
    IngestResult,
    SetAside,
    Store,
    StoreBusy,
    StoreUnavailable,
    first_line,
)
from ray_otel_events.store.row_fold import Refusal
from ray_otel_events.store.state_merge import Prepared, prepare


class Item(NamedTuple):
    """One accepted event of a batch: as the fold reads it, and its JSON text."""

    prepared: Prepared
    text: bytes


def accepted_items(bodies: list[bytes]) -> list[Item]:
    """The events of POST bodies their POSTs accepted (those `prepare` reads), in order, each with
    its text as it was sent."""
    items: list[Item] = []
    for body in bodies:
        for text in _item_texts(body):
            try:
                items.append(Item(prepare(orjson.loads(text)), text))
            except (ValueError, orjson.JSONDecodeError):  # answered as rejected when it was POSTed
                continue
    return items


_DECODER = json.JSONDecoder()
_SPACE = " \t\n\r"


def _item_texts(body: bytes) -> list[bytes]:
    """The text of each item of a JSON array, as sent (orjson reads whole values only: a number
    past 64 bits would come back as a float). Empty for a body that is not an array."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return []
    at = len(text) - len(text.lstrip(_SPACE))
    if not text.startswith("[", at):
        return []
    found: list[bytes] = []
    at += 1
    while True:
        while at < len(text) and text[at] in _SPACE:
            at += 1
        if at >= len(text) or text[at] == "]":
            return found
        try:
            _, end = _DECODER.raw_decode(text, at)
        except ValueError:
            return found
        found.append(text[at:end].encode())
        at = end
        while at < len(text) and text[at] in _SPACE:
            at += 1
        if text[at : at + 1] == ",":
            at += 1


def fold_apart(
    store: Store, bodies: list[bytes], *, now: float | None = None
) -> tuple[IngestResult, list[SetAside]]:
    """Folds the events of `bodies` in parts, halving each part that fails: what was stored, and
    the events that failed alone (not yet set aside: the caller keeps them). StoreUnavailable and
    StoreBusy are raised as they come."""
    received = time.time() if now is None else now
    total = IngestResult()
    failed: list[SetAside] = []
    parts = [accepted_items(bodies)]
    while parts:
        part = parts.pop()
        if not part:
            continue
        try:
            result = store.ingest_posted(
                [[item.prepared for item in part]],
                now=received,
                bodies=[b"[" + b",".join(item.text for item in part) + b"]"],
            )
        except (StoreUnavailable, StoreBusy):
            raise
        except Exception as exc:  # whatever failed the batch: found by halving
            if len(part) == 1:
                failed.append(SetAside(part[0].prepared.event_id, first_line(exc), part[0].text))
            else:
                middle = len(part) // 2
                parts += [part[middle:], part[:middle]]  # the first half next: the batch's order
            continue
        total.duplicates += result.duplicates
        total.ignored += result.ignored
        total.refused += result.refused
        for event_type, count in result.by_type.items():
            total.by_type[event_type] = total.by_type.get(event_type, 0) + count
    return total, failed


def refused_texts(refused: list[Refusal], bodies: list[bytes]) -> list[SetAside]:
    """The events the fold refused one by one (a value only it reads) as `set_aside` keeps them:
    each with its text, found in the batch's bodies by its event id."""
    if not refused:
        return []
    by_id: dict[str, bytes] = {}
    for item in accepted_items(bodies):
        by_id.setdefault(item.prepared.event_id, item.text)
    return [
        SetAside(refusal.event_id, refusal.reason, by_id[refusal.event_id])
        for refusal in refused
        if refusal.event_id in by_id
    ]
