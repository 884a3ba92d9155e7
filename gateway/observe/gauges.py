"""Gauges read at scrape time: a prometheus collector over a snapshot the runner keeps.

The runner publishes a new `GaugeSnapshot` (an immutable value, replaced whole)
when what it shows changes; a scrape, perhaps rendered in another thread, reads
whichever snapshot is current and never touches the pairs themselves. Nothing
is labelled by partition: lag is summed per agent and topic, and the worst
partition of each has a gauge of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "agui_gateway_"
_EMPTY: Mapping = MappingProxyType({})


def frozen(mapping: Mapping) -> Mapping:
    """A read-only copy, for a snapshot."""
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class GaugeSnapshot:
    threads: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # agent -> threads held
    open_interrupts: Mapping[str, int] = field(
        default_factory=lambda: _EMPTY
    )  # agent -> open interrupts
    restoring: int = 0  # pairs assigned, not yet consuming
    refused: tuple[str, ...] = ()  # agents refused
    denied: tuple[tuple[str, str, str], ...] = ()  # (agent, operation, resource)
    lag: Mapping[tuple[str, str], int] = field(
        default_factory=lambda: _EMPTY
    )  # (agent, topic) -> summed lag
    lag_max: Mapping[tuple[str, str], int] = field(
        default_factory=lambda: _EMPTY
    )  # worst partition's lag


# name, help, labels: what the collector describes (also with no sample yet)
FAMILIES = {
    "threads": ("Threads held in state.", ("agent",)),
    "interrupts_open": ("Open interrupts held.", ("agent",)),
    "pairs_restoring": ("Assigned partition pairs not yet restored and consuming.", ()),
    "agent_refused": ("1 for an agent refused (mismatched partitions, changelog).", ("agent",)),
    "permission_denied": (
        "1 while Kafka refuses the gateway an operation on a resource (a missing ACL); "
        "the pairs concerned wait and retry.",
        ("agent", "operation", "resource"),
    ),
    "consumer_lag": (
        "Records behind the end, summed over the agent's assigned partitions of a topic.",
        ("agent", "topic"),
    ),
    "consumer_lag_partition_max": (
        "Records behind the end of the agent's worst assigned partition of a topic.",
        ("agent", "topic"),
    ),
}


class GaugeCollector(Collector):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.snapshot = GaugeSnapshot()
        if registry is not None:
            registry.register(self)

    def publish(self, snapshot: GaugeSnapshot) -> None:
        self.snapshot = snapshot  # one reference replaced: a scrape sees old or new, whole

    def describe(self) -> Iterator[Metric]:
        for name, (doc, labels) in FAMILIES.items():
            yield GaugeMetricFamily(PREFIX + name, doc, labels=list(labels))

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        values: dict[str, list[tuple[tuple[str, ...], float]]] = {
            "threads": [((a,), v) for a, v in s.threads.items()],
            "interrupts_open": [((a,), v) for a, v in s.open_interrupts.items()],
            "pairs_restoring": [((), s.restoring)],
            "agent_refused": [((a,), 1) for a in s.refused],
            "permission_denied": [(labels, 1) for labels in s.denied],
            "consumer_lag": [(k, v) for k, v in s.lag.items()],
            "consumer_lag_partition_max": [(k, v) for k, v in s.lag_max.items()],
        }
        for name, (doc, labels) in FAMILIES.items():
            family = GaugeMetricFamily(PREFIX + name, doc, labels=list(labels))
            for label_values, value in values[name]:
                family.add_metric(list(label_values), float(value))
            yield family
