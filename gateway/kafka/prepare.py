"""Preparing one pair to consume: check its agent, fence zombies, restore, seek, resume.

A pair is never processed unprepared: its partitions stay paused until
`prepare_one` made it ready. The assignment runs the retries.
"""

from __future__ import annotations

import gc
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import TopicAuthorizationFailedError

from gateway.kafka import clients, hanging
from gateway.kafka.checkpoint import Strategy
from gateway.kafka.denials import Denials
from gateway.kafka.groupoffsets import OffsetsUnstable
from gateway.kafka.restore import Restorer
from gateway.kafka.slot import PairSlot
from gateway.kafka.topics import TopicNames, changelog_configs, ensure_topics
from gateway.observe.metrics import Metrics

log = logging.getLogger("gateway.runner")


class Preparer:
    """Prepares pairs for the assignment, which reads the clients it shares from here."""

    def __init__(
        self,
        names: TopicNames,
        metrics: Metrics,
        consumer: AIOKafkaConsumer,
        admin: AIOKafkaAdminClient,
        checkpoint: Strategy,
        restorer: Restorer,
    ) -> None:
        self.names = names
        self.metrics = metrics
        self.consumer = consumer
        self.admin = admin
        self.checkpoint = checkpoint
        self.restorer = restorer
        self.denials = Denials()  # refused ACLs: granted again once a pair is prepared

    async def prepare_one(self, slot: PairSlot) -> None:
        pair = slot.pair
        await self.checkpoint.open(slot.key)
        tps = slot.tps()
        committed = await self.committed_offsets(slot, tps)
        still_valid = bool(slot.committed) and all(
            committed[tp] == slot.committed.get(tp) for tp in tps
        )
        if not still_valid:
            started = time.monotonic()
            restored = await self.restorer.restore(pair.topics.changelog, pair.partition)
            pair.load_store(restored.store, restored.active, restored.open_interrupts)
            self.metrics.state_restore_seconds.observe(time.monotonic() - started)
        slot.committed = {tp: off for tp, off in committed.items() if off is not None}
        assignment = self.consumer.assignment()
        for tp in tps:
            if tp in slot.committed and tp in assignment:
                self.consumer.seek(tp, slot.committed[tp])
        self.metrics.prime_agent(pair.agent)
        self.denials.granted(slot.key, preparing=True)
        gc.freeze()  # restored state is long-lived and acyclic: keep it out of GC passes
        slot.ready = True
        live = [tp for tp in tps if tp in assignment]
        if live:
            self.consumer.resume(*live)
        log.info(
            "pair ready",
            extra={
                "agent": pair.agent,
                "partition": pair.partition,
                "threads": len(pair.store),
                "restored": not still_valid,
            },
        )

    async def committed_offsets(
        self, slot: PairSlot, tps: list[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The pair's stable committed offsets, sweeping a hanging transaction of its
        own if they stay pending (see `hanging`)."""
        try:
            return await self.checkpoint.committed_offsets(
                tps, slot.committed, timeout_s=hanging.SUSPECT_AFTER_S
            )
        except OffsetsUnstable as exc:
            pending = str(exc)
        agent, partition = slot.key
        topics = slot.pair.topics
        offsets = {tp: slot.committed.get(tp, 0) for tp in tps}
        partitions = hanging.written_partitions(
            lambda topic: clients.partitions_for(self.consumer, topic),
            [topics.run_requests, *self.names.shared_outputs()],
            [TopicPartition(topics.changelog, partition)],
        )
        where = {"agent": agent, "partition": partition, "pending": pending}
        try:
            swept = await self.checkpoint.sweep(slot.key, partitions, offsets)
        except Exception as exc:  # the long wait below still ends a transaction the broker knows
            log.error("sweeping a hanging transaction failed", extra={**where, "error": repr(exc)})
        else:
            if swept is None:  # with one producer per instance: perhaps a zombie's, ending
                log.warning(
                    "committed offsets held by a transaction this instance cannot abort; "
                    "waiting for the broker to end it (if it never does, see the README: "
                    "hanging transactions)",
                    extra=where,
                )
            else:
                log.warning(
                    "committed offsets held by a hanging transaction of this pair's "
                    "transactional id; aborted it",
                    extra={**where, "partitions": len(swept)},
                )
        return await self.checkpoint.committed_offsets(tps, slot.committed)

    async def check_agent(self, agent: str) -> str | None:
        """Why an agent must be refused, or None: co-partitioning and its changelog."""
        topics = self.names.for_agent(agent)
        events = clients.partitions_for(self.consumer, topics.events)
        requests = clients.partitions_for(self.consumer, topics.requests)
        if events and requests and len(events) != len(requests):
            return (
                f"{topics.events} has {len(events)} partitions but {topics.requests} has "
                f"{len(requests)}; co-partitioned topics must have the same count. Agent refused"
            )
        await self._check_readable(
            [t for t, found in ((topics.events, events), (topics.requests, requests)) if not found]
        )
        count = len(events or requests or ())
        reports = await ensure_topics(self.admin, {topics.changelog: (count, changelog_configs())})
        bad = [r for r in reports if r.action == "mismatch"]
        if bad:
            return f"changelog topic {bad[0].topic}: {bad[0].detail}. Agent refused"
        return None

    async def _check_readable(self, topics: list[str]) -> None:
        """Raise if Kafka hides one of an agent's consumed topics for want of an ACL.

        A pattern subscription never sees a topic it may not describe: without this
        the agent would be served on one side only, silently.
        """
        if not topics:
            return
        for found in await self.admin.describe_topics(topics):
            if found.get("error_code") == TopicAuthorizationFailedError.errno:
                denied = TopicAuthorizationFailedError(found["topic"])
                denied.operation = "Read"  # type: ignore[attr-defined]
                raise denied
