"""The Kafka reader that feeds the view: the interrupts topic from its beginning, then on.

It reads committed records only (`read_committed`: what the gateway's transactions
committed), joins no consumer group and commits nothing: every reader builds the whole
view, whichever gateway instance owns which partitions. The topic is compacted, so
reading it from the beginning costs about one record per open interrupt (plus the
tombstones not yet removed).

Its lag behind the gateway, in seconds, is 0 once it has read every partition up to
its last stable offset, else how long ago the newest record it read was written (or
how long it has been reading, before the first); it is the view's `lagSeconds` and the
gauge `agui_gateway_inbox_lag_seconds`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.inbox.findings import reader
from gateway.inbox.view import InboxView
from gateway.kafka.wire import clients
from gateway.settings import Settings

log = logging.getLogger("gateway.inbox")

BATCH_RECORDS = 5_000
LAG_EVERY_S = 1.0
TOPIC_WAIT_S = 2.0  # between looks for a topic that does not exist yet


class InboxMetrics:
    """The inbox's metrics, on the registry it is given."""

    def __init__(self, registry: CollectorRegistry, view: InboxView) -> None:
        self.lag = Gauge(
            "agui_gateway_inbox_lag_seconds",
            "How far the inbox's view is behind the interrupts topic, in seconds (0: it "
            "has read every committed record); -1 until it is known.",
            registry=registry,
        )
        self.lag.set(-1)
        self.open = Gauge(
            "agui_gateway_inbox_open_interrupts",
            "Open interrupts the inbox's view holds.",
            registry=registry,
        )
        self.open.set_function(lambda: len(view.index))
        self.dropped = Counter(
            "agui_gateway_inbox_dropped",
            "Opened interrupts the inbox's view did not hold: it held inbox_max_open already.",
            registry=registry,
        )
        self.unreadable = Counter(
            "agui_gateway_inbox_unreadable_records",
            "Interrupts topic records the inbox skipped: not a record it can read.",
            registry=registry,
        )
        self.threads = Gauge(
            "agui_gateway_inbox_threads",
            "Threads whose history (runs, closes, last verdicts) the inbox's view keeps.",
            registry=registry,
        )
        self.threads.set_function(lambda: len(view.history))
        self.forgotten = Counter(
            "agui_gateway_inbox_threads_forgotten",
            "Threads whose history the inbox's view forgot to stay within inbox_max_threads "
            "and inbox_history_max_bytes (the least recently active first).",
            registry=registry,
        )
        self.unreadable_audit = Counter(
            "agui_gateway_inbox_unreadable_audit_records",
            "Audit topic records the inbox skipped: not an audit record it can read.",
            registry=registry,
        )


class InboxReader:
    def __init__(
        self,
        settings: Settings,
        view: InboxView,
        metrics: InboxMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.view = view
        self.metrics = metrics
        self.clock = clock
        self.caught_up = asyncio.Event()  # set once every partition was read to its end
        self._newest_ms: int | None = None
        self._started = clock()
        self._dropped = 0
        self._unreadable = 0
        self._forgotten = 0
        self._unreadable_audit = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Read until `stop` is set; the view is fed as records arrive."""
        topic = self.settings.interrupts_topic
        if not topic:
            log.error("interrupts_topic is empty: the inbox has nothing to read")
            await stop.wait()
            return
        consumer = reader(self.settings, "reader", max_partition_fetch_bytes=4 << 20)
        await consumer.start()
        try:
            tps = await self._partitions(consumer, topic, stop)
            if not tps:
                return
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            last_lag = 0.0
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=BATCH_RECORDS)
                for records in batch.values():
                    for record in records:
                        self.view.apply(record.key, record.value, dict(record.headers))
                        if self._newest_ms is None or record.timestamp > self._newest_ms:
                            self._newest_ms = record.timestamp
                self._count()
                now = self.clock()
                if not batch or now - last_lag >= LAG_EVERY_S:
                    last_lag = now
                    await self._lag(consumer, tps, now)
        finally:
            await clients.stop(consumer)

    async def _partitions(
        self, consumer: AIOKafkaConsumer, topic: str, stop: asyncio.Event
    ) -> list[TopicPartition]:
        """The topic's partitions, waiting for the topic to exist (logged once)."""
        told = False
        while not stop.is_set():
            try:
                await clients.know_topics(consumer, [topic])
            except KafkaError as exc:
                log.warning(
                    "cannot read the interrupts topic's metadata", extra={"error": repr(exc)}
                )
            found = clients.partitions_for(consumer, topic)
            if found:
                return [TopicPartition(topic, p) for p in sorted(found)]
            if not told:
                log.warning(
                    "the interrupts topic does not exist yet (agui-gateway topics create makes "
                    "it); waiting for it",
                    extra={"topic": topic},
                )
                told = True
            try:
                await asyncio.wait_for(stop.wait(), TOPIC_WAIT_S)
            except TimeoutError:
                await clients.refresh_metadata(consumer)
        return []

    async def _lag(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition], now: float) -> None:
        behind = False
        for tp in tps:
            end = consumer.last_stable_offset(tp)
            if end is None:
                behind = True
                break
            if await consumer.position(tp) < end:
                behind = True
                break
        if not behind:
            lag = 0.0
            self.caught_up.set()
        elif self._newest_ms is None:
            lag = max(0.0, now - self._started)
        else:
            lag = max(0.0, now - self._newest_ms / 1000)
        self.view.lag_seconds = round(lag, 3)
        self.metrics.lag.set(lag)

    def _count(self) -> None:
        index = self.view.index
        if index.dropped > self._dropped:
            self.metrics.dropped.inc(index.dropped - self._dropped)
            self._dropped = index.dropped
        if self.view.unreadable > self._unreadable:
            self.metrics.unreadable.inc(self.view.unreadable - self._unreadable)
            self._unreadable = self.view.unreadable
        forgotten = self.view.history.evicted
        if forgotten > self._forgotten:
            self.metrics.forgotten.inc(forgotten - self._forgotten)
            self._forgotten = forgotten
        if self.view.unreadable_audit > self._unreadable_audit:
            self.metrics.unreadable_audit.inc(self.view.unreadable_audit - self._unreadable_audit)
            self._unreadable_audit = self.view.unreadable_audit
