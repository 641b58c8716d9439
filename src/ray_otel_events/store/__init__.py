"""The event store: RayEvents folded into Ray's state rows and history, in SQLite or PostgreSQL
(`location.open_store` picks by the location: a file, or a `postgresql://` URL)."""
