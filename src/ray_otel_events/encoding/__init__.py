"""Encodings of RayEvents: the JSON Ray's aggregator posts."""
