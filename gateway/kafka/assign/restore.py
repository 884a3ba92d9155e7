"""Restore: read a pair's changelog partition into a fresh thread store.

Each restore reads with a reader of its own, from the beginning to the end
offset it found at the start, `read_committed`. A few restores run at once
(bounded), so a rebalance that brings many pairs does not restore them one by one.
A changelog partition with nothing committed in it needs no reader: given the
gateway's end-offsets client, the restores asked for together first look up
their partitions' first and last offsets in one request each, and an empty one
gives an empty store at once (a fleet's first start restores nothing).

A restore may start from a warm standby's replica (`head`, standby.py): it then
reads only from the replica's position to the end it found, the same read under
the same fence, so the store is the one a whole read would build. A replica that
cannot be trusted (its position outside the partition's offsets) is not used.
`last_records` says how many records the last restore of each partition read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.kafka.assign.replica import Replica, Restored
from gateway.kafka.wire import clients
from gateway.kafka.wire.batched import Batched
from gateway.kafka.wire.readto import read_to
from gateway.settings import Settings
from gateway.state.store import ThreadStore

__all__ = ["Restored", "Restorer"]

log = logging.getLogger("gateway.runner")

CONCURRENT_RESTORES = 4


class Restorer:
    def __init__(
        self,
        settings: Settings,
        concurrency: int = CONCURRENT_RESTORES,
        consumer: AIOKafkaConsumer | None = None,
    ) -> None:
        self.settings = settings
        self._slots = asyncio.Semaphore(concurrency)
        # a read_committed consumer with no subscription (the gateway's end-offsets
        # client), for the partitions' bounds
        self.consumer = consumer
        self._sizes: Batched[TopicPartition, int] = Batched(self._committed_sizes)
        self._known: dict[TopicPartition, int] = {}  # sizes looked up ahead, used once
        # records read by each partition's last restore, until taken (the preparer
        # pops its pair's): at most one entry per changelog partition
        self.last_records: dict[TopicPartition, int] = {}

    async def look_ahead(self, tps: list[TopicPartition]) -> None:
        """Look up the bounds of partitions about to be restored, all in one request
        (restores start a few at a time, so their own batches would be small)."""
        if self.consumer is None or not tps:
            return
        try:
            self._known.update(await self._committed_sizes(tps))
        except Exception as exc:  # each restore looks its own up
            log.info("changelog bounds not found", extra={"error": repr(exc)})

    def forget_looked_ahead(self) -> None:
        self._known.clear()

    async def restore(
        self,
        topic: str,
        partition: int,
        thread_of: Callable[[str], str | None] | None = None,
        head: Replica | None = None,
    ) -> Restored:
        """A changelog partition's threads; `thread_of` maps its keys to threadIds (a
        group's keys name an agent too: `changelog.group_key`). With `head`, a standby's
        replica of the partition, only what lies past its position is read."""
        tp = TopicPartition(topic, partition)
        if self.consumer is not None and head is None:
            try:
                known = self._known.pop(tp, None)
                empty = (known if known is not None else await self._sizes.get(tp)) <= 0
            except Exception as exc:  # read it: the reader finds its own bounds
                log.info("changelog bounds not found", extra={"error": repr(exc)})
                empty = False
            if empty:
                self.last_records[tp] = 0
                return Restored(ThreadStore(thread_of), set(), 0)
        async with self._slots:
            return await self._read(tp, thread_of, head)

    async def _committed_sizes(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """How many offsets lie between each partition's first one and its last stable one."""
        assert self.consumer is not None
        await clients.know_topics(self.consumer, {tp.topic for tp in tps})
        starts = await self.consumer.beginning_offsets(tps)
        ends = await self.consumer.end_offsets(tps)
        return {tp: ends[tp] - starts[tp] for tp in tps}

    async def _read(
        self,
        tp: TopicPartition,
        thread_of: Callable[[str], str | None] | None,
        head: Replica | None,
    ) -> Restored:
        reader = clients.changelog_reader(self.settings, f"{self.settings.client_id}-restore")
        try:
            await reader.start()
            reader.assign([tp])
            end = (await reader.end_offsets([tp]))[tp]
            start = (await reader.beginning_offsets([tp]))[tp]
            if head is not None and not (start <= (head.position or 0) <= end):
                log.warning(
                    "standby replica outside the changelog's offsets; restoring it whole",
                    extra={"topic": tp.topic, "partition": tp.partition, "at": head.position},
                )
                head = None
            # the pair keeps its old store if this is cancelled
            replica = head if head is not None else Replica(thread_of)
            before = replica.records
            reader.seek(tp, replica.position if replica.position is not None else start)
            async for records in read_to(reader, tp, end):
                replica.apply(records)
            self.last_records[tp] = replica.records - before
            return replica.restored()
        finally:
            with contextlib.suppress(Exception):  # a close failure costs no restored state
                await reader.stop()
