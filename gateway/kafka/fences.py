"""Fences: how far each pair's events side must be read before its requests are judged.

A request is judged once the events partition has been read up to its end offset
as it stood after the request arrived (read_committed: the last stable offset).
That offset comes from the consumer's own fetch when the fetch is known to have
followed the requests, else from one end-offsets look-up per round for every
pair still waiting, on a client of its own.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from gateway.kafka import clients
from gateway.kafka.slot import PairKey, PairSlot

log = logging.getLogger("gateway.runner")

LOOKUP_TIMEOUT_S = 10.0


class Fences:
    def __init__(self, consumer: AIOKafkaConsumer, offsets: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.offsets = offsets  # end offsets for the fence, off the consumer's connection
        # when the fetch that delivered each pair's latest requests was processed (wall ms)
        self._taken_at: dict[PairKey, int] = {}

    def took_requests(self, key: PairKey, tp: TopicPartition) -> None:
        """A pair took requests from `tp`: note when the fetch that brought them came."""
        stamp = clients.fetched_at(self.consumer, tp)
        if stamp is None:
            self._taken_at.pop(key, None)  # unknown: the lookup decides
        else:
            self._taken_at[key] = stamp

    def forget(self, key: PairKey) -> None:
        self._taken_at.pop(key, None)

    async def set(self, ready: list[PairSlot]) -> None:
        """Give each pair whose waiting requests need one a fence: from the fetch when
        it shows it, else looked up once for all."""
        lookup: list[PairSlot] = []
        for slot in (s for s in ready if s.pair.needs_fence()):
            if slot.events_tp is None:
                slot.pair.set_fence(0)  # no events topic: nothing to wait for
            elif (end := self.fetched(slot)) is not None:
                slot.pair.set_fence(end)
            else:
                lookup.append(slot)
        tps = [s.events_tp for s in lookup if s.events_tp is not None]
        if not tps:
            return
        try:
            ends = await asyncio.wait_for(self.offsets.end_offsets(tps), LOOKUP_TIMEOUT_S)
        except (KafkaError, TimeoutError) as exc:
            log.warning("end offsets lookup failed; requests wait", extra={"error": repr(exc)})
            return
        for slot in lookup:
            if slot.events_tp is not None and slot.events_tp in ends:
                slot.pair.set_fence(ends[slot.events_tp])

    def fetched(self, slot: PairSlot) -> int | None:
        """The events partition's last stable offset from the consumer's own fetch, when
        that fetch is known to come after the pending requests were appended; else None.

        Both partitions have one leader, so their fetch responses come in order on one
        connection, built by the broker in that order. The requests were delivered by
        a response processed at or before `taken`; an events response processed after
        it was built after the requests were appended, so its last stable offset is a
        valid fence (read_committed: what the end-offsets lookup would answer, or
        later). A paused or buffered events partition is not fetched: its figure is
        stale, and the lookup decides.
        """
        taken = self._taken_at.get(slot.key)
        if taken is None or slot.events_tp is None or slot.requests_tp is None:
            return None
        found = clients.fetched_end(self.consumer, slot.events_tp, slot.requests_tp)
        if found is None or found[1] <= taken:
            return None
        return found[0]
