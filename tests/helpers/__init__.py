"""Shared test helpers: real subprocesses and small producer scripts."""
