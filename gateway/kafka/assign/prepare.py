"""Preparing one pair to consume: check its agent, fence zombies, restore, seek, resume.

A pair is never processed unprepared: its partitions stay paused until
`prepare_one` made it ready. The assignment runs the retries.

A rebalance hands back every pair (the range assignor is eager), most of them
unchanged: what is asked of Kafka for them is batched. Agents checked together
share one look-up of their changelog topics (`ChangelogChecks`), and the
committed offsets of every pair whose producer already fenced its zombies come
from one OffsetFetch (`prefetch`); a pair whose memory still matches them is
not restored.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import TopicAuthorizationFailedError

from gateway.kafka.assign.restore import Restorer
from gateway.kafka.assign.standby import Standbys
from gateway.kafka.exactly_once import groupoffsets, hanging
from gateway.kafka.exactly_once.checkpoint import Strategy
from gateway.kafka.exactly_once.groupoffsets import OffsetsUnstable
from gateway.kafka.pairs.slot import PairKey, PairSlot
from gateway.kafka.wire import clients
from gateway.kafka.wire.batched import Batched
from gateway.kafka.wire.denials import Denials
from gateway.kafka.wire.topics import TopicNames, TopicReport, changelog_configs, ensure_topics
from gateway.observe.metrics import Metrics

log = logging.getLogger("gateway.runner")

OPEN_CONCURRENCY = 32  # producers started at once before the offsets are read
OPEN_WAIT_S = 30.0  # then the offsets are read for the pairs whose producer started


class ChangelogChecks:
    """`ensure_topics` for changelog topics, the checks asked for together made as one.

    The agents of one assignment, checked concurrently, cost one Metadata and one
    DescribeConfigs request (and one CreateTopics for the missing ones), not two or
    three each.
    """

    def __init__(self, admin: AIOKafkaAdminClient) -> None:
        self.admin = admin
        self._batched: Batched[tuple[str, int], TopicReport] = Batched(self._look_up)

    async def ensure(self, topic: str, partitions: int) -> TopicReport:
        return await self._batched.get((topic, partitions))

    async def _look_up(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], TopicReport]:
        wanted = {topic: (count, changelog_configs()) for topic, count in keys}
        reports = {r.topic: r for r in await ensure_topics(self.admin, wanted)}
        return {(topic, count): reports[topic] for topic, count in keys}


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
        standbys: Standbys | None = None,
    ) -> None:
        self.names = names
        self.standbys = standbys  # replicas handed over to this instance's own pairs
        self.metrics = metrics
        self.consumer = consumer
        self.admin = admin
        self.checkpoint = checkpoint
        self.restorer = restorer
        self.denials = Denials()  # refused ACLs: granted again once a pair is prepared
        self.changelogs = ChangelogChecks(admin)
        # slots whose store was restored here: a pair given up gets a new slot
        self._loaded: weakref.WeakSet[PairSlot] = weakref.WeakSet()
        # committed offsets read for a pair in one batch, with the producer that fenced
        # them: used once, by the pair's next `prepare_one`, if that producer is its own
        self._prefetched: dict[PairKey, tuple[object, dict[TopicPartition, int | None]]] = {}
        self.timings: dict[str, float] = {}  # the last prefetch's look-ups, for the log

    async def prefetch(self, slots: list[PairSlot]) -> int:
        """Open the pairs' producers, then read all their committed offsets in one request.

        Only pairs whose producer is open are read: their zombies were fenced when it
        started, so no commit of theirs may land after this read. (A producer that
        fails to start here is started again, and its failure handled, by
        `prepare_one`.) The read is stable (`require_stable`): if any pending
        transaction holds one of these offsets, or the read fails, nothing is
        prefetched and each pair reads its own (waiting, and sweeping, as
        `committed_offsets` does). A pair whose answer lags what it committed itself
        reads its own too. Returns how many pairs were prefetched.
        """
        opening = asyncio.Semaphore(OPEN_CONCURRENCY)
        # how each id's last transaction ended, all in one look-up before the opens
        asked = await self.checkpoint.ask(s.key for s in slots)

        async def open_one(slot: PairSlot) -> None:
            async with opening:
                await self.checkpoint.open(slot.key, asked)

        opens = [
            asyncio.ensure_future(open_one(s)) for s in slots if not self.checkpoint.holds(s.key)
        ]
        try:
            if opens:
                # a start that hangs holds up no other pair: it is cancelled (its producer
                # stopped) and the pair starts one again in its own `prepare_one`
                await asyncio.wait(opens, timeout=OPEN_WAIT_S)
        finally:
            for task in opens:
                task.cancel()
            await asyncio.gather(*opens, return_exceptions=True)
        held = [s for s in slots if self.checkpoint.holds(s.key) and s.tps()]
        opened = time.monotonic()
        self.timings = {}
        # a pair never restored here will be: its changelog's bounds, all in one look-up
        await self.restorer.look_ahead(
            [
                TopicPartition(s.pair.topics.changelog, s.pair.partition)
                for s in held
                if s not in self._loaded
            ]
            if len(held) > 1
            else []
        )
        if len(held) < 2:
            return 0
        bounds = time.monotonic()
        tps = [tp for s in held for tp in s.tps()]
        try:
            found = await groupoffsets.fetch_committed_offsets(self.consumer, tps, timeout_s=0)
        except Exception as exc:  # each pair reads its own
            log.info("committed offsets not prefetched", extra={"reason": repr(exc)})
            return 0
        self.timings = {
            "bounds_s": round(bounds - opened, 3),
            "offsets_s": round(time.monotonic() - bounds, 3),
        }
        self._place([tp for s in held if not s.ready for tp in s.tps()], found)
        count = 0
        for slot in held:
            offsets = {tp: found.get(tp) for tp in slot.tps()}
            if any((offsets.get(tp) or 0) < off for tp, off in slot.committed.items()):
                continue  # our own last commit is not visible yet: read again alone
            self._prefetched[slot.key] = (self.checkpoint.producer(slot.key), offsets)
            count += 1
        return count

    def _place(self, tps: list[TopicPartition], found: dict[TopicPartition, int | None]) -> None:
        """Give every partition read in the batch its position now, while it is paused.

        Left to find a position itself, aiokafka reads a new partition's committed
        offset, one request after another for each partition without one (11 to 28 s
        over the 8,000 partitions of 1,000 agents after a rebalance, every pair's
        fetch waiting behind them). A partition never committed starts at its
        beginning (`auto_offset_reset`), found for all of them in one request. Each
        pair still seeks its own offsets when it is prepared.
        """
        assigned = self.consumer.assignment()
        beginning = []
        for tp in tps:
            offset = found.get(tp)
            if tp not in assigned:
                continue
            if offset is None:
                beginning.append(tp)
            else:
                self.consumer.seek(tp, offset)
        if beginning:
            # positions are awaited by whoever needs one; a reset cut short by the next
            # rebalance is that rebalance's to start again
            reset = asyncio.ensure_future(self.consumer.seek_to_beginning(*beginning))
            reset.add_done_callback(_settled)

    def forget_prefetched(self, slots: list[PairSlot]) -> None:
        """After the pass: what was read ahead is not trusted later."""
        for slot in slots:
            self._prefetched.pop(slot.key, None)
        self.restorer.forget_looked_ahead()

    async def prepare_one(self, slot: PairSlot) -> None:
        pair = slot.pair
        await self.checkpoint.open(slot.key)
        tps = slot.tps()
        if self.checkpoint.last_aborted(slot.key):
            # what an aborted transaction left pending is discarded now, even where the
            # group's offsets are stable: its other partitions' markers may be missing
            await self.settle(slot, tps, None)
        producer, prefetched = self._prefetched.pop(slot.key, (None, None))
        if prefetched is not None and producer is self.checkpoint.producer(slot.key):
            committed = prefetched
        else:
            committed = await self.committed_offsets(slot, tps)
        # Its memory is the changelog's as of its last commit (or its last restore, if it
        # committed nothing since) while the group's offsets are still where it left them.
        still_valid = slot in self._loaded and all(
            committed[tp] == slot.committed.get(tp) for tp in tps
        )
        # a warm standby's replica, if this instance kept one: the restore's head start
        changelog_tp = TopicPartition(pair.topics.changelog, pair.partition)
        head = self.standbys.take(changelog_tp) if self.standbys is not None else None
        read: int | None = None  # records the restore read, if it restored
        ahead = head.records if head is not None else None  # records the replica had read
        if not still_valid:
            started = time.monotonic()
            restored = await self.restorer.restore(
                pair.topics.changelog, pair.partition, pair.layout.thread_of, head=head
            )
            pair.load_store(restored.store, restored.active, restored.open_interrupts)
            self._loaded.add(slot)
            self.metrics.state_restore_seconds.observe(time.monotonic() - started)
            read = self.restorer.last_records.pop(changelog_tp, 0)
            self.metrics.state_restore_records.labels(
                "standby" if head is not None else "beginning"
            ).inc(read)
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
                "restored_records": read,
                "standby_records": ahead if read is not None else None,
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
        await self.settle(slot, tps, pending)
        return await self.checkpoint.committed_offsets(tps, slot.committed)

    async def settle(self, slot: PairSlot, tps: list[TopicPartition], pending: str | None) -> None:
        """Complete what a hanging transaction of the pair's own transactional id left,
        as its coordinator decided (see `hanging`): its offsets stayed `pending`, or
        (None) its last transaction was aborted. Logged, a failure included."""
        agent, partition = slot.key
        offsets = {tp: slot.committed.get(tp, 0) for tp in tps}
        partitions = self.written(slot)
        where = {"agent": agent, "partition": partition}
        if pending is not None:
            where["pending"] = pending
        try:
            settled = await self.checkpoint.sweep(slot.key, partitions, offsets)
        except Exception as exc:  # the long wait below still ends a transaction the broker knows
            log.error("sweeping a hanging transaction failed", extra={**where, "error": repr(exc)})
        else:
            if settled is None:  # with one producer per instance: perhaps a zombie's, ending
                log.warning(
                    "committed offsets held by a transaction this instance cannot abort; "
                    "waiting for the broker to end it (if it never does, see the docs: "
                    "concepts/exactly-once, hanging transactions)",
                    extra=where,
                )
            elif settled.committed:
                log.warning(
                    "committed offsets held by a hanging transaction of this pair's "
                    "transactional id, which its coordinator committed; completed it as "
                    "committed",
                    extra={**where, "partitions": len(settled.partitions)},
                )
            elif pending is None:
                log.info(
                    "this pair's transactional id's last transaction was aborted; "
                    "discarded what it may have left pending",
                    extra={**where, "partitions": len(settled.partitions)},
                )
            else:
                log.warning(
                    "committed offsets held by a hanging transaction of this pair's "
                    "transactional id; aborted it",
                    extra={
                        **where,
                        "partitions": len(settled.partitions),
                        "last_state": settled.last_state,
                    },
                )

    def written(self, slot: PairSlot) -> list[TopicPartition]:
        """Every partition the pair may write (reply topics aside: see `hanging`)."""
        topics = slot.pair.topics
        return hanging.written_partitions(
            lambda topic: clients.partitions_for(self.consumer, topic),
            [
                topics.run_requests,
                topics.rejections,
                topics.warnings,
                *((topics.audit,) if topics.audit is not None else ()),
                *((topics.interrupts,) if topics.interrupts is not None else ()),
            ],
            [TopicPartition(topics.changelog, slot.pair.partition)],
        )

    async def check_agent(self, agent: str) -> str | None:
        """Why an agent must be refused, or None: co-partitioning, its audit topic (with
        the trail on, its decisions cannot be written without it), the interrupts topic
        (while it is set, no round that opens or closes an interrupt can commit without
        it) and its changelog."""
        topics = self.names.for_agent(agent)
        events = clients.partitions_for(self.consumer, topics.events)
        requests = clients.partitions_for(self.consumer, topics.requests)
        if events and requests and len(events) != len(requests):
            return (
                f"{topics.events} has {len(events)} partitions but {topics.requests} has "
                f"{len(requests)}; co-partitioned topics must have the same count. Agent refused"
            )
        if topics.audit is not None and not clients.partitions_for(self.consumer, topics.audit):
            return (
                f"audit topic {topics.audit} does not exist (or this principal may not "
                "describe it): the audit trail is on (audit_enabled), so no decision can be "
                "written without it. Create it with `agui-gateway topics create` (then "
                "restart the gateway), or set audit_enabled=false. Agent refused"
            )
        if topics.interrupts is not None and not clients.partitions_for(
            self.consumer, topics.interrupts
        ):
            return (
                f"interrupts topic {topics.interrupts} does not exist (or this principal may "
                "not describe it): every interrupt opened or closed is written to it in the "
                "decision's transaction (interrupts_topic), so no such decision can be "
                "committed without it. Create it with `agui-gateway topics create` (then "
                'restart the gateway), or set interrupts_topic="" (the inbox then shows '
                "nothing). Agent refused"
            )
        await self._check_readable(
            [t for t, found in ((topics.events, events), (topics.requests, requests)) if not found]
        )
        count = len(events or requests or ())
        report = await self.changelogs.ensure(topics.changelog, count)
        if report.action in ("mismatch", "refused"):
            return f"changelog topic {report.topic}: {report.detail}. Agent refused"
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


def _settled(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info(
            "partitions not reset to their beginning", extra={"reason": repr(task.exception())}
        )
