"""Counters for every stage, kept in-process and read as one snapshot.

Each stage owns a `Counters` object and increments labelled counters on it. `snapshot()` gives plain
data for the summary a server prints at exit, for the demo and for tests. A Prometheus exporter can
later read the same objects without the stages changing.
"""

from __future__ import annotations

import threading
from collections import defaultdict

Labels = tuple[tuple[str, str], ...]


class Counters:
    """Thread-safe named counters with optional labels (e.g. event_type, consumer, source)."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self._lock = threading.Lock()
        self._values: dict[str, defaultdict[Labels, int]] = defaultdict(lambda: defaultdict(int))

    def add(self, name: str, amount: int = 1, **labels: str) -> None:
        if amount == 0:
            return
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[name][key] += amount

    def get(self, name: str, **labels: str) -> int:
        """The sum over every label set that includes the given labels."""
        want = set(labels.items())
        with self._lock:
            series: dict[Labels, int] = self._values.get(name, {})
            return sum(v for k, v in series.items() if want <= set(k))

    def by_label(self, name: str, label: str) -> dict[str, int]:
        """Totals of one counter split by one label."""
        out: dict[str, int] = defaultdict(int)
        with self._lock:
            for key, value in self._values.get(name, {}).items():
                out[dict(key).get(label, "")] += value
        return dict(out)

    def snapshot(self) -> dict[str, list[dict[str, object]]]:
        """{counter: [{"labels": {...}, "value": n}, ...]} for printing or JSON."""
        with self._lock:
            return {
                name: [{"labels": dict(k), "value": v} for k, v in sorted(series.items())]
                for name, series in sorted(self._values.items())
            }
