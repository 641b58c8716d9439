"""One Prometheus registry per server, fed by the stages' own `Counters` at scrape time.

The stages keep counting in `metrics.Counters` (cheap, lock-protected ints, also read by the exit
summary and the tests); this module exposes them through prometheus-client's custom-collector API,
so a scrape costs the server nothing between scrapes and the hot path never touches a Prometheus
object. Names follow one scheme (docs/metrics.md):

    ray_otel_events_<subsystem>_<counter>_total{labels}    every Counters counter
    ray_otel_events_<name>{labels}                         gauges read from the live objects

A registry per server (not the global default) lets tests run many servers in one process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from ray_otel_events.metrics import Counters
from ray_otel_events.security.http_limits import ServerGuard

NAMESPACE = "ray_otel_events"

# Seconds a POST or gRPC export may take: from a loopback sink (ms) to a slow remote one (s).
PUBLISH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

GaugeValues = Mapping[tuple[str, ...], float]


@dataclass(frozen=True)
class _GaugeSpec:
    name: str
    doc: str
    labels: tuple[str, ...]
    read: Callable[[], GaugeValues]
    counter: bool = False  # a monotonic total kept elsewhere, exposed as a Prometheus counter


class _CountersCollector(Collector):
    def __init__(self) -> None:
        self.sources: list[tuple[str, Counters]] = []
        self.gauges: list[_GaugeSpec] = []

    def collect(self) -> Iterator[Metric]:
        families: dict[str, list[tuple[dict[str, str], int]]] = {}
        for subsystem, counters in self.sources:
            for counter, series in counters.snapshot().items():
                name = f"{NAMESPACE}_{subsystem}_{counter}"
                rows = families.setdefault(name, [])
                for entry in series:
                    labels = entry["labels"]
                    value = entry["value"]
                    assert isinstance(labels, dict) and isinstance(value, int)
                    rows.append(({str(k): str(v) for k, v in labels.items()}, value))
        for name, rows in sorted(families.items()):
            # One family has one label set: the union, missing labels empty.
            keys = sorted({k for labels, _ in rows for k in labels})
            totals = CounterMetricFamily(
                name, f"{name.removeprefix(NAMESPACE + '_')} (see docs/metrics.md)", labels=keys
            )
            summed: dict[tuple[str, ...], int] = {}
            for labels, value in rows:
                key = tuple(labels.get(k, "") for k in keys)
                summed[key] = summed.get(key, 0) + value
            for key, value in summed.items():
                totals.add_metric(list(key), value)
            yield totals
        for spec in self.gauges:
            family: CounterMetricFamily | GaugeMetricFamily
            if spec.counter:
                family = CounterMetricFamily(spec.name, spec.doc, labels=list(spec.labels))
            else:
                family = GaugeMetricFamily(spec.name, spec.doc, labels=list(spec.labels))
            for key, value in spec.read().items():
                family.add_metric(list(key), value)
            yield family


def _unlabelled(read: Callable[[], float]) -> Callable[[], GaugeValues]:
    return lambda: {(): read()}


class ServerMetrics:
    """The registry of one server and the few metrics that are not counters of a stage."""

    def __init__(self, component: str) -> None:
        self.component = component
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = _CountersCollector()
        self.registry.register(self._collector)
        ProcessCollector(namespace=NAMESPACE, registry=self.registry)  # CPU seconds, RSS, open fds
        self.in_flight = Gauge(
            f"{NAMESPACE}_requests_in_flight",
            "requests (HTTP or gRPC) being handled now",
            ["server"],
            registry=self.registry,
        )
        self.publish_seconds = Histogram(
            f"{NAMESPACE}_publish_duration_seconds",
            "time of one send attempt to a destination, failed attempts included",
            ["publisher"],
            buckets=PUBLISH_BUCKETS,
            registry=self.registry,
        )

    def add_counters(self, subsystem: str, counters: Counters) -> None:
        self._collector.sources.append((subsystem, counters))

    def add_guard(self, guard: ServerGuard) -> None:
        """The server's limits at work: clients' errors and refused connections (counters,
        `ray_otel_events_server_*_total`), bodies in flight and open connections (gauges)."""
        self.add_counters("server", guard.counters)
        for name, (doc, read) in guard.gauges().items():
            self.add_gauge(name, doc, _unlabelled(read))

    def add_gauge(
        self, name: str, doc: str, read: Callable[[], GaugeValues], labels: tuple[str, ...] = ()
    ) -> None:
        """A gauge computed at scrape time; `read` returns {label values: value}."""
        self._collector.gauges.append(_GaugeSpec(f"{NAMESPACE}_{name}", doc, labels, read))

    def add_total(
        self, name: str, doc: str, read: Callable[[], GaugeValues], labels: tuple[str, ...] = ()
    ) -> None:
        """A counter whose running total another object keeps (exposed as `<name>_total`)."""
        self._collector.gauges.append(_GaugeSpec(f"{NAMESPACE}_{name}", doc, labels, read, counter=True))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    content_type = CONTENT_TYPE_LATEST
