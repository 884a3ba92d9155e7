"""Fences: how far each pair's events side must be read before its requests are judged.

A request is judged once the events partition has been read up to its end offset
as it stood after the request arrived (read_committed: the last stable offset).
That offset comes from the consumer's own fetch when the fetch is known to have
followed the requests, else from an end-offsets look-up on a client of its own.

A look-up never holds up a round: it runs in the background, one request for
every pair that needs one when it starts, and the pairs it covers wait for it
while every other pair is judged. When it lands, `landed` is set: the loop runs
a round at once (`Gateway.run`) and those pairs are judged. A look-up covers the
requests buffered when it started (they were in the log before it was sent);
requests taken meanwhile need a fence of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from gateway.kafka.pairs.slot import PairKey, PairSlot
from gateway.kafka.wire import clients, fetchsessions

log = logging.getLogger("gateway.runner")

LOOKUP_TIMEOUT_S = 10.0


class Fences:
    def __init__(self, consumer: AIOKafkaConsumer, offsets: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.offsets = offsets  # end offsets for the fence, off the consumer's connection
        # when the fetch that delivered each pair's latest requests was processed (wall ms)
        self._taken_at: dict[PairKey, int] = {}
        self._looking: set[PairKey] = set()  # pairs in a look-up under way
        self._lookups: set[asyncio.Task[None]] = set()
        self.landed = asyncio.Event()  # a look-up set fences: their pairs can be judged

    def took_requests(self, key: PairKey, tp: TopicPartition) -> None:
        """A pair took requests from `tp`: note when the fetch that brought them came."""
        stamp = clients.fetched_at(self.consumer, tp)
        if stamp is None:
            self._taken_at.pop(key, None)  # unknown: the lookup decides
        else:
            self._taken_at[key] = stamp

    def forget(self, key: PairKey) -> None:
        self._taken_at.pop(key, None)

    def looking_up(self) -> bool:
        """Whether a look-up is under way (its pairs wait for it)."""
        return bool(self._lookups)

    def set(self, ready: list[PairSlot]) -> None:
        """Give each pair whose waiting requests need one a fence: from the fetch when
        it shows it, else from a look-up started now for all of them (unless one under
        way already covers the pair)."""
        lookup: list[tuple[PairSlot, int]] = []
        for slot in (s for s in ready if s.pair.needs_fence()):
            if slot.events_tp is None:
                slot.pair.set_fence(0)  # no events topic: nothing to wait for
            elif (end := self.fetched(slot)) is not None:
                slot.pair.set_fence(end)
            elif slot.key not in self._looking:
                lookup.append((slot, slot.pair.merge.requests[-1].offset))
        if lookup:
            self._looking.update(slot.key for slot, _ in lookup)
            task = asyncio.create_task(self._look_up(lookup))
            self._lookups.add(task)
            task.add_done_callback(self._lookups.discard)

    async def _look_up(self, lookup: list[tuple[PairSlot, int]]) -> None:
        """One end-offsets request for every pair in `lookup`, each fence covering the
        requests buffered when it started (`covers`, the last one's offset)."""
        try:
            tps = [s.events_tp for s, _ in lookup if s.events_tp is not None]
            try:
                async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                    # every topic known first, in one metadata request: aiokafka learns
                    # one unknown topic per attempt, 100 ms apart. Every assigned topic at
                    # once, so that the fleet's later look-ups need no update of their own.
                    topics = {tp.topic for tp in tps}
                    await clients.know_topics(
                        self.offsets, topics | {tp.topic for tp in self.consumer.assignment()}
                    )
                    ends = await self.offsets.end_offsets(tps)
            except (KafkaError, TimeoutError) as exc:
                log.warning("end offsets lookup failed; requests wait", extra={"error": repr(exc)})
                return  # the next round looks them up again
            except Exception:
                log.exception("internal error looking up end offsets; requests wait")
                return
            for slot, covers in lookup:
                if slot.events_tp is not None and slot.events_tp in ends and not slot.discarded:
                    slot.pair.set_fence(ends[slot.events_tp], covers)
            self.landed.set()
        finally:
            self._looking.difference_update(slot.key for slot, _ in lookup)

    async def wait(self) -> None:
        """Wait for the look-ups under way to end (landed or failed)."""
        while self._lookups:
            await asyncio.gather(*self._lookups, return_exceptions=True)

    async def close(self) -> None:
        """Cancel the look-ups under way (the loop is stopping)."""
        for task in list(self._lookups):
            task.cancel()
        for task in list(self._lookups):
            with contextlib.suppress(BaseException):
                await task

    def fetched(self, slot: PairSlot) -> int | None:
        """The events partition's last stable offset from the consumer's own fetch, when
        that fetch is known to come after the pending requests were appended; else None.

        Both partitions have one leader, so their fetch responses come in order on one
        connection, built by the broker in that order. The requests were delivered by
        a response processed at or before `taken`; an events response processed after
        it was built after the requests were appended, so its last stable offset is a
        valid fence (read_committed: what the end-offsets lookup would answer, or
        later). A paused or buffered events partition is not fetched: its figure is
        stale, and the lookup decides. In a fetch session a quiet partition is left
        out of responses; the session's figure for it holds as of its latest response
        (`fetchsessions`), and the consumer's own as of the last response naming it.
        """
        taken = self._taken_at.get(slot.key)
        if taken is None or slot.events_tp is None or slot.requests_tp is None:
            return None
        sessions = fetchsessions.installed(self.consumer)
        for found in (
            sessions.fetched_end(slot.events_tp, slot.requests_tp) if sessions else None,
            clients.fetched_end(self.consumer, slot.events_tp, slot.requests_tp),
        ):
            if found is not None and found[1] > taken:
                return found[0]
        return None
