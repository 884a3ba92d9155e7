"""Holding back a backlog: what rounds pending commit hold is bounded, over all pairs.

A pair commits one round at a time; while that commit is under way its open round
takes whatever the fetches bring. Reading a backlog (a restart's catch-up, a burst
after an outage) the fetches outrun the commits, and without a bound the pending
rounds grow with the backlog: every thread's changelog value, its interrupts topic
records and the producer's batches of them at once.

`HoldBack` bounds it. When the open rounds of the pairs hold `max_bytes` or more
(`Round.held_bytes`), every open round is due at once (`over`), and a pair whose
commit is still under way stops fetching (its partitions paused, `hold`): its open
round grows no more. When that commit ends, the pair's open round is committed at
once and its partitions resume. Records it had fetched and not yet handed out are
fetched again from its position: nothing is lost, nothing read twice.

What is pending is then at most about twice `max_bytes` (the open rounds, and the
rounds being committed, sealed from open rounds the bound held) plus one fetch.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import Counter

from gateway.kafka.exactly_once.committer import Committer
from gateway.kafka.pairs.slot import PairKey, PairSlot


class HoldBack:
    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        committer: Committer,
        holds: Callable[[PairSlot], bool],
        max_bytes: int,
        held: Counter,
    ) -> None:
        self.consumer = consumer
        self.committer = committer
        self.holds = holds  # whether a slot is still its holder's current one
        self.max_bytes = max_bytes
        self.held_count = held  # times a pair was held back
        self._held: dict[PairKey, PairSlot] = {}  # pairs paused until their commit ends

    def over(self, slots: list[PairSlot]) -> bool:
        """Whether the open rounds of `slots` hold `max_bytes` or more."""
        total = 0
        for slot in slots:
            total += slot.pair.round.held_bytes()
            if total >= self.max_bytes:
                return True
        return False

    def held(self, slot: PairSlot) -> bool:
        return slot.key in self._held

    def hold(self, slots: list[PairSlot]) -> None:
        """Pause each pair of `slots` whose commit is under way and whose open round holds
        anything, until that commit ends."""
        for slot in slots:
            task = self.committer.under_way(slot.key)
            if task is None or slot.key in self._held or slot.pair.round.empty():
                continue
            live = self._live(slot)
            if not live:
                continue
            self.consumer.pause(*live)
            self._held[slot.key] = slot
            self.held_count.inc()
            task.add_done_callback(functools.partial(self._release, slot))

    def _release(self, slot: PairSlot, _: asyncio.Task[None]) -> None:
        """The pair's commit ended: commit its open round (held to the bound) at once,
        and let it fetch again, unless it is no longer the holder's or no longer ready
        (a failed commit paused it; its prepare resumes it)."""
        if self._held.get(slot.key) is not slot:
            return
        del self._held[slot.key]
        if slot.discarded or not slot.ready or not self.holds(slot):
            return
        self.committer.launch([slot])
        live = self._live(slot)
        if live:
            self.consumer.resume(*live)

    def _live(self, slot: PairSlot) -> list[TopicPartition]:
        assignment = self.consumer.assignment()
        return [tp for tp in slot.tps() if tp in assignment]
