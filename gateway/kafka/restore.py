"""Restore: read a pair's changelog partition into a fresh thread store.

Each restore reads with a reader of its own, from the beginning to the end
offset it found at the start, `read_committed`. A few restores run at once
(bounded), so a rebalance that brings many pairs does not restore them one by one.
A changelog partition with nothing committed in it needs no reader: given the
gateway's end-offsets client, the restores asked for together first look up
their partitions' first and last offsets in one request each, and an empty one
gives an empty store at once (a fleet's first start restores nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from gateway.codec import changelog
from gateway.core import RunStatus
from gateway.kafka import clients
from gateway.kafka.batched import Batched
from gateway.settings import Settings
from gateway.state.store import ThreadStore

log = logging.getLogger("gateway.runner")

CONCURRENT_RESTORES = 4


@dataclass
class Restored:
    store: ThreadStore
    active: set[str]  # threads whose run is active
    open_interrupts: int


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
        self, topic: str, partition: int, thread_of: Callable[[str], str | None] | None = None
    ) -> Restored:
        """A changelog partition's threads; `thread_of` maps its keys to threadIds (a
        group's keys name an agent too: `changelog.group_key`)."""
        tp = TopicPartition(topic, partition)
        if self.consumer is not None:
            try:
                known = self._known.pop(tp, None)
                empty = (known if known is not None else await self._sizes.get(tp)) <= 0
            except Exception as exc:  # read it: the reader finds its own bounds
                log.info("changelog bounds not found", extra={"error": repr(exc)})
                empty = False
            if empty:
                return Restored(ThreadStore(thread_of), set(), 0)
        async with self._slots:
            return await self._read(tp, thread_of)

    async def _committed_sizes(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """How many offsets lie between each partition's first one and its last stable one."""
        assert self.consumer is not None
        await clients.know_topics(self.consumer, {tp.topic for tp in tps})
        starts = await self.consumer.beginning_offsets(tps)
        ends = await self.consumer.end_offsets(tps)
        return {tp: ends[tp] - starts[tp] for tp in tps}

    async def _read(
        self, tp: TopicPartition, thread_of: Callable[[str], str | None] | None
    ) -> Restored:
        reader = clients.consumer(
            self.settings,
            client_id=f"{self.settings.client_id}-restore",
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # a "latest" reset racing the seek would skip all
            isolation_level="read_committed",
            max_poll_records=10000,
        )
        try:
            await reader.start()
            reader.assign([tp])
            end = (await reader.end_offsets([tp]))[tp]
            start = (await reader.beginning_offsets([tp]))[tp]
            reader.seek(tp, start)
            store = ThreadStore(thread_of)  # the pair keeps its old store if this is cancelled
            hinted: dict[str, tuple[str, int]] = {}
            while await reader.position(tp) < end:
                batch = await reader.getmany(tp, timeout_ms=1000)
                for message in batch.get(tp, ()):
                    if message.key is None:
                        continue
                    thread_id = message.key.decode("utf-8", "replace")
                    if message.value is None:
                        store.load(None, thread_id)
                        hinted.pop(thread_id, None)
                        continue
                    hint = changelog.read_hints(message.headers)
                    store.load(message.value, thread_id)  # with hints: decoded on first read
                    if hint is None:  # no hints: decode now (None when unreadable)
                        state = store.get(thread_id)
                        if state is None:
                            hinted.pop(thread_id, None)
                            continue
                        hint = (str(state.status), len(state.interrupts))
                    hinted[thread_id] = hint
            active = {t for t, (status, _) in hinted.items() if status == RunStatus.ACTIVE}
            return Restored(store, active, sum(n for _, n in hinted.values()))
        finally:
            with contextlib.suppress(Exception):  # a close failure costs no restored state
                await reader.stop()
