"""The third feed of the view: the audit trail, for each thread's last verdicts.

It reads the audit topic: the one for all, or with {agent} in `audit_topic` every
owner's (looked for again every `DISCOVER_S`), committed records only
(`read_committed`: a verdict shows exactly when the decision's output is visible), with
no consumer group and committing nothing. Each partition is read from
`inbox_verdicts_lookback_s` back (by timestamp; -1: from its beginning), then on.

Why not from the beginning by default: the trail keeps every decision for
`audit_retention_days` (400 by default), so reading all of it would make a view's
start cost grow with a year of traffic; the view keeps every verdict it reads while it
runs (bounded per thread and in threads), so a window back only limits what a fresh
view knows, and each answer says from when (`verdictsSinceMs`).

With the trail off (`audit_enabled` false) it reads nothing and the answers say so;
a topic that does not exist, or that Kafka refuses this principal Read on, is logged
once and looked for (tried) again at the next look, and the threads of the agents it
would carry say their verdicts are not known; nothing else stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError

from gateway.inbox.findings import assign_more, reader
from gateway.inbox.view import InboxView
from gateway.kafka.wire import clients
from gateway.settings import Settings

log = logging.getLogger("gateway.inbox")

DISCOVER_S = 30.0
BATCH_RECORDS = 5_000
CAUGHT_UP_EVERY_S = 1.0


class TrailReader:
    def __init__(
        self, settings: Settings, view: InboxView, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.view = view
        self.clock = clock
        self.discover_s = DISCOVER_S
        self._told = False
        self._refused_told: set[str] = set()  # bounded: the audit topics that exist

    def topic_of(self, agent: str) -> str:
        """The audit topic `agent`'s decisions are written to."""
        template = self.settings.audit_topic
        if not self.settings.per_owner(template):
            return template
        return self.settings.topic(template, self.settings.owner_of(agent))

    def _wanted(self, topics: set[str]) -> list[str]:
        template = self.settings.audit_topic
        if not self.settings.per_owner(template):
            return sorted({template} & topics)
        regex = self.settings.topic_regex(template)
        return sorted(t for t in topics if regex.match(t))

    def since_ms(self) -> int | None:
        lookback = self.settings.inbox_verdicts_lookback_s
        return None if lookback < 0 else int((self.clock() - lookback) * 1000)

    async def run(self, stop: asyncio.Event) -> None:
        """Read until `stop` is set; the view is fed as records arrive."""
        if not self.settings.audit_enabled:
            self.view.trail.off()
            log.info("audit_enabled is false: the inbox's threads show no verdicts")
            await stop.wait()
            return
        consumer = reader(self.settings, "audit", max_partition_fetch_bytes=4 << 20)
        await consumer.start()
        try:
            since = self.since_ms()
            assigned: set[TopicPartition] = set()
            looked = -self.discover_s
            checked = 0.0
            while not stop.is_set():
                now = self.clock()
                if now - looked >= self.discover_s:
                    looked = now
                    assigned = await self._discover(consumer, assigned, since)
                    topics = frozenset(tp.topic for tp in assigned)
                    self.view.trail.reading(topics, self.topic_of, since)
                if not assigned:
                    self.view.trail.caught_up = False
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 1.0)
                    continue
                try:
                    batch = await consumer.getmany(timeout_ms=200, max_records=BATCH_RECORDS)
                except TopicAuthorizationFailedError as exc:
                    assigned = await self._refused(consumer, assigned, exc)
                    topics = frozenset(tp.topic for tp in assigned)
                    self.view.trail.reading(topics, self.topic_of, since)
                    continue
                for tp, records in batch.items():
                    for record in records:
                        self.view.verdict(record.value, (tp.topic, tp.partition, record.offset))
                if not batch or now - checked >= CAUGHT_UP_EVERY_S:
                    checked = now
                    self.view.trail.caught_up = await _caught_up(consumer, assigned)
        finally:
            await clients.stop(consumer)

    async def _refused(
        self,
        consumer: AIOKafkaConsumer,
        assigned: set[TopicPartition],
        exc: TopicAuthorizationFailedError,
    ) -> set[TopicPartition]:
        """Stop reading the topic Kafka refuses Read on (logged once; tried again at the
        next look): the other owners' topics are still read."""
        topic = exc.args[0] if exc.args and isinstance(exc.args[0], str) else None
        if topic is None or not any(tp.topic == topic for tp in assigned):
            raise exc
        if topic not in self._refused_told:
            self._refused_told.add(topic)
            log.warning(
                "Kafka refuses this principal Read on the audit topic (agui-gateway acls "
                "--role inbox grants it): its agents' threads show no verdicts; trying again",
                extra={"topic": topic},
            )
        kept = {tp: await consumer.position(tp) for tp in assigned if tp.topic != topic}
        consumer.assign(sorted(kept))
        for tp, offset in kept.items():
            consumer.seek(tp, offset)
        return set(kept)

    async def _discover(
        self, consumer: AIOKafkaConsumer, assigned: set[TopicPartition], since: int | None
    ) -> set[TopicPartition]:
        """Assign the audit topics' partitions, new ones from `since` (or their beginning)."""
        topics = self._wanted(await consumer.topics())
        if not topics:
            if not self._told:
                self._told = True
                log.warning(
                    "the audit topic does not exist yet, or this principal may not read it "
                    "(agui-gateway topics create makes it; agui-gateway acls --role inbox "
                    "grants Read): the inbox's threads show no verdicts until it does; "
                    "looking again",
                    extra={"topic": self.settings.audit_topic},
                )
            return assigned
        return await assign_more(consumer, topics, assigned, since)


async def _caught_up(consumer: AIOKafkaConsumer, tps: set[TopicPartition]) -> bool:
    """Whether every partition was read up to its last stable offset."""
    for tp in tps:
        end = consumer.last_stable_offset(tp)
        if end is None or await consumer.position(tp) < end:
            return False
    return True
