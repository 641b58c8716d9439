"""One exposition from several processes' (`bridge --workers N`): a scrape may land on any worker,
so the worker that takes it gathers every worker's metrics and labels each sample `worker="i"`.
Families are merged so that each appears once, with all its samples together, as the text format
requires."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def merge_expositions(texts: Mapping[str, bytes], label: str = "worker") -> bytes:
    """`texts`: {label value: a process's exposition}; returns one exposition."""
    families: dict[str, Metric] = {}
    for value, text in texts.items():
        for family in text_string_to_metric_families(text.decode()):
            merged = families.get(family.name)
            if merged is None:
                merged = Metric(family.name, family.documentation, family.type, family.unit)
                families[family.name] = merged
            for sample in family.samples:
                labels = {**sample.labels, label: value}
                merged.samples.append(
                    Sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar)
                )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(families.values())))
    return generate_latest(registry)
