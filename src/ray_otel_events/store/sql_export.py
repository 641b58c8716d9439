"""Ray's Export API entities (datasets, Train runs and attempts, submitted jobs) in the store, the
same SQL on both backends.

One row per entity and session (`export_entities`), the newest snapshot of it
(`ray_export_events.ExportEntity.order`), folded as it is written: a POST is stored in one
transaction before it is answered, and a duplicate or an older snapshot arriving late changes
nothing (the collector delivers at least once). The rows are not state rows: `rebuild` (which
refolds state rows from raw RayEvents) leaves them, and retention drops them with their session.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import orjson

from ray_otel_events.encoding.ray_export_events import ExportPost, merged
from ray_otel_events.store.sql_reads import SqlReads

EXPORT_TABLE = (
    "CREATE TABLE IF NOT EXISTS export_entities (session TEXT NOT NULL, kind TEXT NOT NULL,"
    " entity_id TEXT NOT NULL, updated {real} NOT NULL, progress INTEGER NOT NULL, received {real} NOT NULL,"
    " data TEXT NOT NULL, PRIMARY KEY (session, kind, entity_id))"
)


class SqlExportRows(SqlReads):
    """`add_export_events` and `export_entities` over the backend's `_transaction`."""

    @abstractmethod
    def _transaction(self) -> Any:
        """One write transaction (a context manager yielding the connection)."""

    @abstractmethod
    def _see_session(self, db: Any, name: str, received: float) -> None:
        """Records that `name` was seen at `received` (the sessions table, in the backend's SQL)."""

    def add_export_events(self, post: ExportPost, received: float) -> int:
        """Folds a POST's entities into their rows in one transaction; returns how many it read."""
        if not post.entities:
            return 0
        d = self.dialect
        m = d.mark
        session = d.enc(post.session)
        select = (
            f"SELECT updated, progress, data FROM export_entities"
            f" WHERE session = {m} AND kind = {m} AND entity_id = {m}"
        )
        upsert = (
            "INSERT INTO export_entities(session, kind, entity_id, updated, progress, received, data)"
            f" VALUES ({m}, {m}, {m}, {m}, {m}, {m}, {m}) ON CONFLICT (session, kind, entity_id) DO UPDATE"
            " SET updated = excluded.updated, progress = excluded.progress, received = excluded.received,"
            " data = excluded.data"
        )
        with self._transaction() as db:
            self._see_session(db, post.session, received)
            for entity in post.entities:
                key = (session, entity.kind, d.enc(entity.entity_id))
                found = db.execute(select, key).fetchone()
                new = {**entity.event, "node_id": entity.node_id, "hostname": entity.hostname}
                order = entity.order
                if found is not None:
                    old = orjson.loads(found[2])
                    if order >= (float(found[0]), int(found[1])):
                        new["event_data"] = merged(old["event_data"], entity.data)
                    else:  # an older snapshot, late: what it adds to the newer one only
                        order = (float(found[0]), int(found[1]))
                        new = {**old, "event_data": merged(entity.data, old["event_data"])}
                db.execute(upsert, (*key, order[0], order[1], received, orjson.dumps(new).decode()))
        return len(post.entities)

    def export_entities(self, kind: str, session: str | None) -> list[dict[str, Any]]:
        """The entities of `kind` stored for `session` (every session's when None), each the event
        as posted (newest snapshot) with `node_id` and `hostname`, oldest first."""
        d = self.dialect
        where, params = f"kind = {d.mark}", [kind]
        if session is not None:
            where += f" AND session = {d.mark}"
            params.append(d.enc(session))
        rows = self._query(
            f"SELECT session, data FROM export_entities WHERE {where} ORDER BY updated, entity_id", params
        )
        return [{**orjson.loads(data), "session": d.dec(name)} for name, data in rows]

    def _drop_export_rows(self, db: Any, names: Sequence[str]) -> None:
        for name in names:
            db.execute(
                f"DELETE FROM export_entities WHERE session = {self.dialect.mark}", (self.dialect.enc(name),)
            )
