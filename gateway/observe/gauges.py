"""Gauges read at scrape time: a prometheus collector over a snapshot the runner keeps.

The runner publishes a new `GaugeSnapshot` (an immutable value, replaced whole)
when what it shows changes; a scrape, perhaps rendered in another thread, reads
whichever snapshot is current and never touches the pairs themselves.

Nothing is labelled by partition, nor by topic name: lag is kept per agent and
topic role (`events` or `requests`, the role naming the topic together with the
agent), summed over the agent's partitions held here, with the worst partition
of each on a gauge of its own. What reaches /metrics follows `AgentDetail`:

- `full`: both lag gauges per agent and role, as kept.
- `dashboard`: one series an agent for each gauge of pair state, so that an
  instance holding a thousand agents stays under 200 KB even with every agent
  busy: `threads` and `interrupts_open` per agent; `consumer_lag` per agent,
  summed over both roles, and only while the agent is behind (a caught-up agent
  has no series: absent is zero); `consumer_lag_partition_max` per role over
  all the agents held, always present, so that "how far behind is the worst
  partition" has an answer (zero) when nothing lags.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.observe.detail import AgentDetail

PREFIX = "agui_gateway_"
ROLES = ("events", "requests")  # the `topic` label of the lag gauges
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
    held: int = 0  # pairs assigned to this instance
    assigned_at: float = 0.0  # Unix time of the latest assignment (0: none yet)
    refused: tuple[str, ...] = ()  # agents refused
    denied: tuple[tuple[str, str, str], ...] = ()  # (agent, operation, resource)
    lag: Mapping[tuple[str, str], int] = field(
        default_factory=lambda: _EMPTY
    )  # (agent, role) -> lag summed over the agent's partitions of that role
    lag_max: Mapping[tuple[str, str], int] = field(
        default_factory=lambda: _EMPTY
    )  # (agent, role) -> the worst of those partitions' lag
    standby_held: int = 0  # standby replicas (changelog partitions) kept warm here
    standby_lag: int = 0  # their records behind the changelogs' ends, summed
    standby_lag_max: int = 0  # the worst replica's
    standby_lag_seconds: float = 0.0  # how long the worst replica has been behind
    standby_threads: int = 0  # threads held in them


# name -> help, labels: what the collector describes (also with no sample yet), under `full`
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "threads": ("Threads held in state.", ("agent",)),
    "interrupts_open": ("Open interrupts held.", ("agent",)),
    "pairs_restoring": ("Assigned partition pairs not yet restored and consuming.", ()),
    "pairs_held": ("Partition pairs assigned to this instance (restoring or deciding).", ()),
    "last_assignment_timestamp_seconds": (
        "When this instance last took an assignment (a rebalance), Unix time; time() minus "
        "it is the time since. No sample before the first.",
        (),
    ),
    "standby_pairs_held": (
        "Warm standby replicas kept here: other instances' pairs whose changelog this "
        "instance reads, to take them over with only the changelog's tail to restore.",
        (),
    ),
    "standby_lag_records": (
        "Records the standby replicas are behind their changelogs' stable ends, summed "
        "(a transaction's commit marker counts until read).",
        (),
    ),
    "standby_lag_partition_max": (
        "Records behind its changelog's stable end of the worst standby replica.",
        (),
    ),
    "standby_lag_seconds": (
        "Seconds the worst standby replica has been behind its changelog's stable end: 0 "
        "when the latest check of its position (made as it reads, and at least once a "
        "second) found it at the end, else the time since a check last did (since it was "
        "placed, for a replica that never reached the end yet). While the reader fails, "
        "every replica counts as behind since its last check at the end.",
        (),
    ),
    "standby_threads": ("Threads held in standby replicas.", ()),
    "agent_refused": (
        "1 for an agent refused (mismatched partitions, changelog, missing audit topic).",
        ("agent",),
    ),
    "permission_denied": (
        "1 while Kafka refuses the gateway an operation on a resource (a missing ACL); "
        "the pairs concerned wait and retry.",
        ("agent", "operation", "resource"),
    ),
    "consumer_lag": (
        "Records behind the end, summed over the agent's assigned partitions of a topic "
        "(topic: its role, events or requests).",
        ("agent", "topic"),
    ),
    "consumer_lag_partition_max": (
        "Records behind the end of the agent's worst assigned partition of a topic "
        "(topic: its role, events or requests).",
        ("agent", "topic"),
    ),
}
# under `dashboard`, the families whose labels (and meaning) differ
DASHBOARD_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "consumer_lag": (
        "Records behind the end, summed over the agent's assigned partitions of both "
        "topics; only while the agent is behind (no series: caught up).",
        ("agent",),
    ),
    "consumer_lag_partition_max": (
        "Records behind the end of the worst assigned partition of a topic role (events "
        "or requests), over all the agents held.",
        ("topic",),
    ),
}

Values = list[tuple[tuple[str, ...], float]]


def families(detail: AgentDetail) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Help and labels of each family under `detail`."""
    if detail is AgentDetail.FULL:
        return FAMILIES
    return {**FAMILIES, **DASHBOARD_FAMILIES}


def lag_values(s: GaugeSnapshot, detail: AgentDetail) -> tuple[Values, Values]:
    """The series of `consumer_lag` and `consumer_lag_partition_max` under `detail`."""
    if detail is AgentDetail.FULL:
        return [(k, v) for k, v in s.lag.items()], [(k, v) for k, v in s.lag_max.items()]
    behind: dict[str, int] = {}
    for (agent, _), value in s.lag.items():
        if value > 0:
            behind[agent] = behind.get(agent, 0) + value
    worst = dict.fromkeys(ROLES, 0)
    for (_, role), value in s.lag_max.items():
        worst[role] = max(worst.get(role, 0), value)
    return [((a,), v) for a, v in behind.items()], [((r,), v) for r, v in worst.items()]


class GaugeCollector(Collector):
    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        detail: AgentDetail = AgentDetail.FULL,
    ) -> None:
        self.snapshot = GaugeSnapshot()
        self.families = families(detail)
        self.detail = detail
        if registry is not None:
            registry.register(self)

    def publish(self, snapshot: GaugeSnapshot) -> None:
        self.snapshot = snapshot  # one reference replaced: a scrape sees old or new, whole

    def describe(self) -> Iterator[Metric]:
        for name, (doc, labels) in self.families.items():
            yield GaugeMetricFamily(PREFIX + name, doc, labels=list(labels))

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        lag, lag_max = lag_values(s, self.detail)
        values: dict[str, Values] = {
            "threads": [((a,), v) for a, v in s.threads.items()],
            "interrupts_open": [((a,), v) for a, v in s.open_interrupts.items()],
            "pairs_restoring": [((), s.restoring)],
            "pairs_held": [((), s.held)],
            "last_assignment_timestamp_seconds": [((), s.assigned_at)] if s.assigned_at else [],
            "standby_pairs_held": [((), s.standby_held)],
            "standby_lag_records": [((), s.standby_lag)],
            "standby_lag_partition_max": [((), s.standby_lag_max)],
            "standby_lag_seconds": [((), s.standby_lag_seconds)],
            "standby_threads": [((), s.standby_threads)],
            "agent_refused": [((a,), 1) for a in s.refused],
            "permission_denied": [(labels, 1) for labels in s.denied],
            "consumer_lag": lag,
            "consumer_lag_partition_max": lag_max,
        }
        for name, (doc, labels) in self.families.items():
            family = GaugeMetricFamily(PREFIX + name, doc, labels=list(labels))
            for label_values, value in values[name]:
                family.add_metric(list(label_values), float(value))
            yield family
