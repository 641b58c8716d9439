"""The event store: RayEvents folded into Ray's state rows and history (SQLite)."""
