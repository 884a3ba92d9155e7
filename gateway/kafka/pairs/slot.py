"""A pair as the instance holds it: the pair, its partitions, and how far it got."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka import TopicPartition

from gateway.kafka.pairs.pair import PartitionPair
from gateway.kafka.pairs.round import Round

PairKey = tuple[str, int]


@dataclass(eq=False)
class PairSlot:
    pair: PartitionPair
    events_tp: TopicPartition | None
    requests_tp: TopicPartition | None
    ready: bool = False
    committed: dict[TopicPartition, int] = field(default_factory=dict)  # as we know it
    discarded: bool = False  # given up: never committed or prepared again

    @property
    def key(self) -> PairKey:
        return (self.pair.agent, self.pair.partition)

    def tps(self) -> list[TopicPartition]:
        return [tp for tp in (self.events_tp, self.requests_tp) if tp is not None]

    def offsets_of(self, done: Round | None) -> dict[TopicPartition, int]:
        """The offsets a round consumed up to, by partition."""
        offsets: dict[TopicPartition, int] = {}
        for side, offset in (done.offsets if done is not None else {}).items():
            tp = self.events_tp if side == "events" else self.requests_tp
            if tp is not None:
                offsets[tp] = offset
        return offsets
