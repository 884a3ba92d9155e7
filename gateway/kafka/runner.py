"""The gateway service on Kafka: consume, merge, judge, act, commit exactly once.

One group consumer (range assignment, so partition p of an agent's events
and requests topics meet on one instance) reads both topics with
`read_committed`. Each assigned partition pair has its own transactional
producer, with a transactional id derived from group, agent and partition:
a zombie holding the same pair is fenced when the new owner initialises it.
Per round, one transaction per pair carries the forwarded requests,
rejections, replies, warnings, changelog records and the consumed offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError, ProducerFenced, TopicAuthorizationFailedError
from aiokafka.structs import ConsumerRecord

from gateway.codec import changelog
from gateway.codec.records import HEADER_REPLY_TO
from gateway.core.thread import RunStatus
from gateway.kafka import clients
from gateway.kafka.brokerwatch import BrokerWatch
from gateway.kafka.pair import PairContext, PartitionPair
from gateway.kafka.topics import LEGAL_TOPIC, TopicNames, changelog_configs, ensure_topics
from gateway.observe import logs
from gateway.observe.metrics import Metrics
from gateway.observe.warnings import WarningLimiter
from gateway.settings import Settings
from gateway.state.retention import Retention
from gateway.state.store import ThreadStore

log = logging.getLogger("gateway.runner")

PairKey = tuple[str, int]
SWEEP_SLICE = 1000  # threads a pair's sweep looks at per round (decoding restored ones)
SWEEP_CHANGES = 100  # expiries announced or threads forgotten per pair per round
PENDING_LIMIT = 20_000  # uncommitted records or state changes that force a commit
PREPARE_RETRY_S = 0.5  # first backoff before preparing failed pairs again
PREPARE_RETRY_MAX_S = 30.0
WRITTEN_TOPICS_METADATA_S = 5.0  # a metadata update before writing a topic new to a producer


@dataclass
class PairSlot:
    """A pair and the Kafka things that belong to it."""

    pair: PartitionPair
    events_tp: TopicPartition | None
    requests_tp: TopicPartition | None
    producer: AIOKafkaProducer | None = None
    ready: bool = False
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    discarded: bool = False  # given up: never committed or prepared again

    def tps(self) -> list[TopicPartition]:
        return [tp for tp in (self.events_tp, self.requests_tp) if tp is not None]


class _Listener(ConsumerRebalanceListener):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.gateway._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.gateway._on_assigned(set(assigned))


class Gateway:
    def __init__(
        self, settings: Settings, metrics: Metrics, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.names = TopicNames(settings)
        self.context = PairContext(
            settings_strict=settings.strict,
            rejections_topic=settings.rejections_topic,
            warnings_topic=settings.warnings_topic,
            merge_max_wait_s=settings.merge_max_wait_ms / 1000,
            retention=Retention(
                thread_ms=int(settings.thread_retention_s * 1000),
                interrupt_grace_ms=int(settings.interrupt_grace_s * 1000),
                interrupt_ms=int(settings.interrupt_retention_s * 1000),
            ),
        )
        self.limiter = WarningLimiter(settings.warning_burst, int(settings.warning_window_s * 1000))
        self.slots: dict[PairKey, PairSlot] = {}
        self.by_tp: dict[TopicPartition, tuple[PairKey, str]] = {}
        self.refused: dict[str, str] = {}
        # Pairs given up (fenced, or revoked mid-round) whose partitions may still be
        # assigned here, paused: not ready until the next assignment settles them.
        self.dropped: set[PairKey] = set()
        # Pairs Kafka refuses an operation for want of an ACL: (operation, resource).
        # They wait, paused and undecided, and retry with backoff until it is granted.
        self.denied: dict[PairKey, tuple[str, str]] = {}
        self._denied_attempts: dict[PairKey, int] = {}
        self._denied_preparing: set[PairKey] = set()  # refused while prepared, not committed
        self._denied_gauged: set[tuple[str, str, str]] = set()
        self.consumer: AIOKafkaConsumer | None = None
        self.admin: AIOKafkaAdminClient | None = None
        self.offsets: AIOKafkaConsumer | None = None  # end offsets for the fence
        self.broker = BrokerWatch(lambda: clients.probe(self.admin), settings.broker_timeout_s)
        self._lock = asyncio.Lock()
        self._restore_lock = asyncio.Lock()
        self._restore_tasks: set[asyncio.Task[None]] = set()
        self._closers: set[asyncio.Task[None]] = set()
        # A reply must never land in a topic the gateway itself reads or writes, for
        # any agent: in a changelog it would corrupt restored state, elsewhere it
        # would pose as the gateway's own output or input.
        self._own_topics = {settings.rejections_topic, settings.warnings_topic}
        self._own_patterns: list[re.Pattern[str]] = [
            settings.topic_regex(template)
            for template in (
                settings.events_topic,
                settings.requests_topic,
                settings.run_requests_topic,
                settings.changelog_topic,
            )
        ]
        self._running = False
        self._assigned_once = False
        self._last_sweep = 0.0
        self._last_lag = 0.0
        self._reply_refreshed_at = float("-inf")
        self._gauged_agents: set[str] = set()
        self._refused_gauged: set[str] = set()
        self._lag_gauged: set[TopicPartition] = set()
        metrics.prime_transactions()

    # --- lifecycle ------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        retries = self.metrics.kafka_retries
        logs.KAFKA_LOGS.on_retry = lambda error: retries.labels(error).inc()
        clean = False
        try:
            await self._start_clients()
            self.broker.start()
            log.info("gateway started", extra={"settings": self.settings.masked()})
            consumer = self.consumer
            assert consumer is not None
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=self.settings.poll_timeout_ms)
                logs.KAFKA_LOGS.tick()  # "kafka connection back" once errors stopped
                async with self._lock:
                    await self._round(batch)
            clean = True
        finally:
            self._running = False
            # Never raises: an error that ended the loop is the one that propagates.
            await self._shutdown(commit=clean)

    async def _start_clients(self) -> None:
        """Start the admin client and both consumers (each kept as soon as constructed, so
        a failed start still closes what was opened)."""
        s = self.settings
        self.admin = clients.admin(s, client_id=f"{s.client_id}-admin")
        await self.admin.start()
        self.consumer = clients.consumer(
            s,
            client_id=s.client_id,
            group_id=s.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            partition_assignment_strategy=(RangePartitionAssignor,),
            metadata_max_age_ms=s.discovery_interval_ms,
            max_poll_records=s.max_poll_records,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
        )
        await self.consumer.start()
        # End offsets for the fence come from a client of their own: a broker answers a
        # connection's requests in order, so on the consumer's connection the lookup
        # waits behind a long-polling fetch (up to fetch_max_wait_ms) whenever the
        # fetch covers only quiet partitions, and a round stalls for it.
        self.offsets = clients.consumer(
            s,
            client_id=f"{s.client_id}-offsets",
            enable_auto_commit=False,
            isolation_level="read_committed",
            metadata_max_age_ms=s.discovery_interval_ms,
        )
        await self.offsets.start()
        self.consumer.subscribe(pattern=s.subscription_pattern(), listener=_Listener(self))
        self._running = True

    async def _shutdown(self, commit: bool = True) -> None:
        """Commit what ready pairs decided (only after a clean stop), then close every client.

        Nothing here raises: each failure is logged and the next client is still closed.
        After a failed round nothing is committed: the next owner reads those records
        again from the last commit.
        """
        if commit and not self.broker.reachable:
            commit = False  # it cannot commit: the next owner reads it again
            log.warning("kafka broker unreachable: stopping without the final commit")
        async with self._lock:
            for task in list(self._restore_tasks):
                task.cancel()
            for slot in list(self.slots.values()):
                if commit and slot.ready and slot.pair.has_pending():
                    try:
                        await self._commit(slot)
                    except Exception:
                        log.exception(
                            "final commit failed",
                            extra={"agent": slot.pair.agent, "partition": slot.pair.partition},
                        )
            for slot in list(self.slots.values()):
                await self._close_producer(slot)
            self.slots.clear()
            self.by_tp.clear()
        if self._closers:  # producers of pairs given up mid-round: they need the lock
            await asyncio.gather(*list(self._closers), return_exceptions=True)
        for name, client in (("consumer", self.consumer), ("offsets", self.offsets)):
            if client is not None:
                try:
                    await clients.stop(client)  # the consumer leaves the group
                except Exception:
                    log.exception(f"closing the {name} client failed")
        if self.admin is not None:
            try:
                await self.admin.close()
            except Exception:
                log.exception("closing the admin client failed")
        await self.broker.stop()
        log.info("gateway stopped")

    def ready(self) -> tuple[bool, dict[str, Any]]:
        restoring = [
            f"{a}/{p}" for (a, p), s in self.slots.items() if not s.ready and a not in self.refused
        ]
        dropped = sorted(f"{a}/{p}" for a, p in self.dropped if a not in self.refused)
        denied = {f"{a}/{p}": f"{op} on {res}" for (a, p), (op, res) in self.denied.items()}
        ok = self._running and self._assigned_once and not restoring and not dropped
        ok = ok and not denied
        broker_ok, broker = self.broker.state()
        return ok and broker_ok, {
            "broker": broker,
            "running": self._running,
            "assigned": sorted(f"{a}/{p}" for a, p in self.slots),
            "restoring": restoring,
            "dropped": dropped,
            "refused": self.refused,
            "denied": denied,
        }

    # --- the round --------------------------------------------------------------------------

    async def _round(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        assert self.consumer is not None
        mono = time.monotonic()
        for tp, messages in batch.items():
            entry = self.by_tp.get(tp)
            slot = self.slots.get(entry[0]) if entry else None
            if entry is None or slot is None:
                continue  # not ours (any more): the next owner reads it from the committed offset
            if not slot.ready:
                # fetched just before the pause took effect: read these again once ready
                self.consumer.seek(tp, messages[0].offset)
                continue
            slot.pair.take(entry[1], messages, mono)
        ready = [s for s in self.slots.values() if s.ready]
        await self._fences(ready)
        await self._refresh_for_replies(ready)
        wall_ms = int(self.wall_clock() * 1000)
        for slot in ready:
            if slot.discarded:
                continue  # revoked while this round waited
            if slot.pair.has_work():
                position: int | None = 0  # no events topic: nothing to wait for
                if slot.events_tp is not None and slot.pair.requests:
                    position = await self.consumer.position(slot.events_tp)
                slot.pair.process(position, mono, wall_ms)
        if mono - self._last_sweep >= self.settings.sweep_interval_s:
            self._last_sweep = mono
            sweep = ready
        else:
            sweep = [s for s in ready if s.pair.sweeping]
        passes_done = [
            slot.pair.sweep(wall_ms, limit=SWEEP_SLICE, max_changes=SWEEP_CHANGES) for slot in sweep
        ]
        if any(passes_done):
            # Thread states are acyclic and long-lived: a full collection walking all of
            # them stalls a round for 100+ ms at 100k threads. Frozen, they are skipped
            # (reference counting still frees them).
            gc.freeze()
        # Decided requests are committed at once (their outputs wait on it). What only
        # events changed (state, event warnings) may wait up to commit_interval_ms:
        # replaying those events after a crash rebuilds the same state.
        commit_after = self.settings.commit_interval_ms / 1000
        due = []
        for slot in ready:
            pair = slot.pair
            if slot.discarded or not pair.has_pending():
                continue
            if pair.dirty_since is None:
                pair.dirty_since = mono
            if (
                pair.decided_pending
                or mono - pair.dirty_since >= commit_after
                or len(pair.out) + len(pair.store.changes()) >= PENDING_LIMIT
            ):
                due.append(slot)
        if due:
            results = await asyncio.gather(*(self._commit(s) for s in due))
            failed = [s for s, ok in zip(due, results, strict=True) if not ok and self._holds(s)]
            if failed:
                # a fresh producer before they process again; later if an ACL is missing
                self._start_prepare(failed, after=self._denied_backoff(failed))
            self._gauges()
        if mono - self._last_lag >= 5:
            self._last_lag = mono
            await self._lag()

    async def _fences(self, ready: list[PairSlot]) -> None:
        """Look up, once per round, the events end offsets that pending requests wait for."""
        assert self.consumer is not None
        waiting = [s for s in ready if s.pair.needs_fence()]
        without_events = [s for s in waiting if s.events_tp is None]
        for slot in without_events:
            slot.pair.set_fence(0)
        tps = [s.events_tp for s in waiting if s.events_tp is not None]
        if not tps:
            return
        assert self.offsets is not None
        try:
            ends = await asyncio.wait_for(self.offsets.end_offsets(tps), timeout=10)
        except (KafkaError, TimeoutError) as exc:
            log.warning("end offsets lookup failed; requests wait", extra={"error": repr(exc)})
            return
        for slot in waiting:
            if slot.events_tp is not None and slot.events_tp in ends:
                slot.pair.set_fence(ends[slot.events_tp])

    async def _refresh_for_replies(self, ready: list[PairSlot]) -> None:
        """Refresh the metadata once when a buffered request names a reply topic not seen yet.

        A service may create its reply topic just before sending the request; the
        metadata would show it only after `discovery_interval_ms`. One refresh per round
        covers every such request; a topic still unknown after it is warned about.
        """
        assert self.consumer is not None
        unknown: set[str] = set()
        for slot in ready:
            for request in slot.pair.requests:
                if request.received < self._reply_refreshed_at:
                    continue  # a refresh since it was consumed shows what it names
                topic = request.header(HEADER_REPLY_TO)
                if (
                    topic
                    and topic not in unknown
                    and LEGAL_TOPIC.match(topic)
                    and self._reply_topic_allowed_by_name(topic)
                    and not self._topic_exists(topic)
                ):
                    unknown.add(topic)
        if not unknown:
            return
        self._reply_refreshed_at = time.monotonic()
        self.metrics.reply_topic_refreshes.inc()
        log.debug("refreshing metadata for reply topics", extra={"topics": sorted(unknown)[:10]})
        try:
            await asyncio.wait_for(self.consumer._client.force_metadata_update(), timeout=5)
        except (KafkaError, TimeoutError) as exc:
            log.warning("metadata refresh for reply topics failed", extra={"error": repr(exc)})

    async def _commit(self, slot: PairSlot) -> bool:
        """Commit the pair's round in one transaction; False if it did not commit.

        A failed transaction leaves the pair not ready and without a producer: the
        failure may have put that producer in a fatal state where every later
        transaction fails, so the pair is prepared again with a fresh one (whose
        initialisation also fences any zombie holding the same transactional id).
        """
        assert self.consumer is not None
        pair = slot.pair
        producer = slot.producer
        if producer is None or slot.discarded:
            return False
        offsets = {}
        for side, offset in pair.next_offsets.items():
            tp = slot.events_tp if side == "events" else slot.requests_tp
            if tp is not None:
                offsets[tp] = offset
        try:
            # Building the records is inside: a defect there aborts this pair's round
            # (it is read again from the last commit), it never escapes the loop.
            records = pair.out + pair.changelog_records()
            await producer.begin_transaction()
            await self._track_topics(producer, {r.topic for r in records})
            delivered = [
                await producer.send(
                    r.topic, value=r.value, key=r.key, headers=r.headers, partition=r.partition
                )
                for r in records
            ]
            if offsets:
                await producer.send_offsets_to_transaction(offsets, self.settings.group_id)
            # A record the producer gave up on does not fail the transaction by itself:
            # committed, it would be lost behind the committed offsets. Aborted instead.
            await asyncio.gather(*delivered)
            await producer.commit_transaction()
        except Exception as exc:
            if _fenced(producer, exc):
                self.metrics.transactions.labels("fenced").inc()
                log.error(
                    "producer fenced: another instance owns this pair now",
                    extra={"agent": pair.agent, "partition": pair.partition},
                )
                pair.aborted()
                if not slot.discarded:
                    self._pause(slot)  # not ours: never read past the committed offset
                    if self._holds(slot):
                        self.dropped.add((pair.agent, pair.partition))
                    await self._drop(slot)
                return False
            self.metrics.transactions.labels("aborted").inc()
            log.error(
                "transaction failed; rewinding to the last commit",
                extra={"agent": pair.agent, "partition": pair.partition, "error": repr(exc)},
            )
            self._note_denied(slot, exc)
            with contextlib.suppress(Exception):
                await producer.abort_transaction()
            pair.aborted()
            if slot.discarded:
                return False  # its producer is closed by whoever discarded it
            slot.ready = False
            self._pause(slot)
            await self._close_producer(slot)
            await self._rewind(slot)
            return False
        self.metrics.transactions.labels("committed").inc()
        self._granted(slot)
        slot.committed.update(offsets)
        pair.committed(time.monotonic())
        return True

    async def _track_topics(self, producer: AIOKafkaProducer, topics: set[str]) -> None:
        """Have the producer's metadata track every topic it is about to write.

        A producer fetches metadata for all topics until its first write to a topic it
        does not know yet (typically a reply topic created after it started); from then
        on it asks only for the topics it tracks. A topic it had written while knowing
        it from the first fetch is untracked, vanishes from its metadata, and a batch
        still waiting for it (its partition being added to the transaction, or a retry)
        finds no leader until it expires after `request_timeout_ms` (40 s): the commit,
        and the pair, hang that long. Tracking every written topic before the first
        write, and waiting for a metadata update that covers them, avoids it.
        """
        client = producer.client
        added = [client.add_topic(topic) for topic in sorted(topics)]
        if all(f.done() for f in added):
            return  # all tracked already: the usual case, no round trip
        try:
            async with asyncio.timeout(WRITTEN_TOPICS_METADATA_S):
                await asyncio.gather(*added)
                # an update that was already under way when the topics were added
                # may not cover them: one more, asked for after adding them
                await client.force_metadata_update()
        except (KafkaError, TimeoutError) as exc:
            # not fatal: the sends wait for the metadata they need themselves
            log.warning("metadata update for written topics failed", extra={"error": repr(exc)})

    def _note_denied(
        self, slot: PairSlot, exc: BaseException, topic_op: str = "Write", preparing: bool = False
    ) -> None:
        """Record (log, /readyz, metric) that Kafka refused this pair an operation."""
        found = clients.describe_denial(exc, topic_op)
        if found is None:
            return
        key = (slot.pair.agent, slot.pair.partition)
        self.denied[key] = found
        if preparing:
            self._denied_preparing.add(key)
        else:
            self._denied_preparing.discard(key)
        self._denied_attempts[key] = self._denied_attempts.get(key, 0) + 1
        log.error(
            "permission denied: %s on %s; the pair waits, nothing decided, and retries",
            *found,
            extra={"agent": key[0], "partition": key[1], "operation": found[0]},
        )
        self._gauges()

    def _granted(self, slot: PairSlot, preparing: bool = False) -> None:
        """What Kafka refused the pair now succeeded (a commit; or preparing, if refused there)."""
        key = (slot.pair.agent, slot.pair.partition)
        if key not in self.denied or (preparing and key not in self._denied_preparing):
            return
        del self.denied[key]
        self._denied_preparing.discard(key)
        self._denied_attempts.pop(key, None)
        log.info(
            "permission granted: the pair resumes", extra={"agent": key[0], "partition": key[1]}
        )
        self._gauges()

    def _denied_backoff(self, slots: list[PairSlot]) -> float:
        attempts = max(
            (self._denied_attempts.get((s.pair.agent, s.pair.partition), 0) for s in slots),
            default=0,
        )
        if not attempts:
            return 0.0
        return float(min(PREPARE_RETRY_S * 2 ** (attempts - 1), PREPARE_RETRY_MAX_S))

    def _pause(self, slot: PairSlot) -> None:
        assert self.consumer is not None
        assignment = self.consumer.assignment()
        live = [tp for tp in slot.tps() if tp in assignment]
        if live:
            self.consumer.pause(*live)

    async def _rewind(self, slot: PairSlot) -> None:
        assert self.consumer is not None
        assignment = self.consumer.assignment()
        for tp in slot.tps():
            if tp not in assignment:
                continue  # revoked meanwhile: its next owner starts at the committed offset
            offset = slot.committed.get(tp)
            if offset is None:
                offset = await self.consumer.committed(tp)
            if offset is not None:
                self.consumer.seek(tp, offset)
            else:
                await self.consumer.seek_to_beginning(tp)

    def _gauges(self) -> None:
        """Per-agent gauges from the pairs this instance holds now (zero once none are left)."""
        threads: dict[str, int] = dict.fromkeys(self._gauged_agents, 0)
        open_: dict[str, int] = dict.fromkeys(self._gauged_agents, 0)
        restoring = 0
        for (agent, _), slot in self.slots.items():
            threads[agent] = threads.get(agent, 0) + slot.pair.thread_count
            open_[agent] = open_.get(agent, 0) + slot.pair.open_interrupts
            restoring += not slot.ready and agent not in self.refused
        for agent, count in threads.items():
            self.metrics.threads.labels(agent).set(count)
            self.metrics.interrupts_open.labels(agent).set(open_[agent])
        self._gauged_agents = set(threads)
        self.metrics.pairs_restoring.set(restoring)
        for agent in self._refused_gauged - set(self.refused):
            self.metrics.agent_refused.remove(agent)
        for agent in self.refused:
            self.metrics.agent_refused.labels(agent).set(1)
        self._refused_gauged = set(self.refused)
        denied = {(a, op, res) for (a, _), (op, res) in self.denied.items()}
        for labels in self._denied_gauged - denied:
            self.metrics.permission_denied.remove(*labels)
        for labels in denied:
            self.metrics.permission_denied.labels(*labels).set(1)
        self._denied_gauged = denied

    async def _lag(self) -> None:
        assert self.consumer is not None
        assigned = set(self.consumer.assignment())
        for tp in self._lag_gauged - assigned:
            with contextlib.suppress(KeyError):
                self.metrics.consumer_lag.remove(tp.topic, str(tp.partition))
        self._lag_gauged = assigned
        for tp in assigned:
            high = self.consumer.highwater(tp)
            if high is None:
                continue
            with contextlib.suppress(Exception):
                position = await asyncio.wait_for(self.consumer.position(tp), timeout=1)
                self.metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(
                    max(0, high - position)
                )

    # --- rebalancing ----------------------------------------------------------------------

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Commit what the revoked pairs decided, then hold them until the next assignment.

        A pair whose commit does not finish in time, or every revoked pair when the
        round does not finish in time, is discarded: its transaction may still
        complete in the background, so its memory can no longer be trusted. A later
        assignment rebuilds it from Kafka (committed offsets, changelog), and its new
        producer's initialisation settles that transaction first.
        """
        try:
            await asyncio.wait_for(self._lock.acquire(), timeout=self.settings.revoke_timeout_s)
        except TimeoutError:
            log.error(
                "round did not finish within revoke_timeout_s; dropping the revoked pairs "
                "(their transaction is aborted when the next owner fences this instance)"
            )
            self._cancel_prepares()
            for slot in self._revoked(revoked):
                self._discard(slot)
            self._gauges()
            return
        try:
            self._cancel_prepares()
            for slot in self._revoked(revoked):
                if slot.ready and slot.pair.has_pending():
                    try:
                        await asyncio.wait_for(
                            self._commit(slot), timeout=self.settings.revoke_timeout_s
                        )
                    except TimeoutError:
                        log.error(
                            "commit on revoke timed out; dropping the pair",
                            extra={"agent": slot.pair.agent, "partition": slot.pair.partition},
                        )
                        self._discard(slot)
                        continue
                slot.pair.aborted()  # drop buffers: positions restart at the committed offsets
                slot.ready = False
            self._gauges()
        finally:
            self._lock.release()

    def _revoked(self, revoked: set[TopicPartition]) -> list[PairSlot]:
        return [s for s in self.slots.values() if set(s.tps()) & revoked]

    def _cancel_prepares(self) -> None:
        for task in list(self._restore_tasks):
            task.cancel()

    def _discard(self, slot: PairSlot) -> None:
        """Forget a pair entirely; it stays listed as dropped until the next assignment.

        Its producer is closed once no round runs: a round may be inside its
        transaction, and stopping a producer there leaves that await hanging forever.
        """
        key = (slot.pair.agent, slot.pair.partition)
        slot.discarded = True
        slot.ready = False
        if self._holds(slot):
            del self.slots[key]
            self.denied.pop(key, None)
            for tp in slot.tps():
                self.by_tp.pop(tp, None)
            self.dropped.add(key)
        closer = asyncio.create_task(self._close_after_round(slot))
        self._closers.add(closer)
        closer.add_done_callback(self._closers.discard)

    async def _close_after_round(self, slot: PairSlot) -> None:
        async with self._lock:
            await self._close_producer(slot)

    async def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        """Take the assignment: every pair stays paused until `_prepare` made it ready."""
        assert self.consumer is not None
        self._assigned_once = True
        self.dropped.clear()  # settled: rebuilt below if still ours, else gone
        wanted: dict[PairKey, dict[str, TopicPartition]] = {}
        for tp in assigned:
            found = self.names.classify(tp.topic)
            if found is None:
                continue
            agent, side = found
            wanted.setdefault((agent, tp.partition), {})[side] = tp
        for key in [k for k in self.slots if k not in wanted]:
            await self._drop(self.slots[key])
        if assigned:
            self.consumer.pause(*assigned)
        pending: list[PairSlot] = []
        for key, sides in wanted.items():
            slot = self.slots.get(key)
            if slot is None:
                slot = PairSlot(
                    PartitionPair(
                        self.names.for_agent(key[0]),
                        key[1],
                        self.context,
                        self.metrics,
                        self.limiter,
                        self._reply_topic_allowed,
                    ),
                    None,
                    None,
                )
                self.slots[key] = slot
            slot.events_tp, slot.requests_tp = sides.get("events"), sides.get("requests")
            for side, tp in sides.items():
                self.by_tp[tp] = (key, side)
            slot.ready = False
            pending.append(slot)
        if pending:
            self._start_prepare(pending)

    def _start_prepare(self, slots: list[PairSlot], after: float = 0.0) -> None:
        task = asyncio.create_task(self._prepare(slots, after))
        self._restore_tasks.add(task)
        task.add_done_callback(self._restore_tasks.discard)

    async def _check_agent(self, agent: str) -> str | None:
        """Why an agent must be refused, or None: co-partitioning and its changelog."""
        assert self.consumer is not None and self.admin is not None
        topics = self.names.for_agent(agent)
        cluster = self.consumer._client.cluster
        events = cluster.partitions_for_topic(topics.events)
        requests = cluster.partitions_for_topic(topics.requests)
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
        assert self.admin is not None
        if not topics:
            return
        for found in await self.admin.describe_topics(topics):
            if found.get("error_code") == TopicAuthorizationFailedError.errno:
                denied = TopicAuthorizationFailedError(found["topic"])
                denied.operation = "Read"  # type: ignore[attr-defined]
                raise denied

    async def _prepare(self, slots: list[PairSlot], after: float = 0.0) -> None:
        """Check each agent, fence zombies, restore state, then let the pairs' partitions flow.

        Failures are retried with backoff until they succeed or the pairs are revoked:
        a pair is never processed unprepared, and its partitions stay paused meanwhile.
        Each pass tries every pair, so one that keeps failing holds up no other.
        """
        if after:
            await asyncio.sleep(after)
        delay = PREPARE_RETRY_S
        refused: dict[str, str] = {}
        checked: set[str] = set()
        todo = list(slots)
        while True:
            todo = [s for s in todo if self._holds(s) and s.pair.agent not in refused]
            for agent in dict.fromkeys(s.pair.agent for s in todo):
                if agent in checked:
                    continue
                try:
                    why = await self._check_agent(agent)
                except Exception as exc:
                    log.error(
                        "could not check agent; retrying",
                        extra={"agent": agent, "error": repr(exc), "retry_in_s": delay},
                    )
                    for slot in todo:
                        if slot.pair.agent == agent:
                            self._note_denied(slot, exc, "DescribeConfigs", preparing=True)
                    continue
                checked.add(agent)
                if why:
                    refused[agent] = why
                    self.refused[agent] = why
                    log.error(why, extra={"agent": agent})
                    self._gauges()
                else:
                    self.refused.pop(agent, None)
            failed: list[PairSlot] = []
            for slot in todo:
                agent = slot.pair.agent
                if agent in refused or not self._holds(slot):
                    continue
                if agent not in checked:
                    failed.append(slot)
                    continue
                try:
                    await self._prepare_one(slot)
                except Exception as exc:
                    log.error(
                        "could not prepare pair; retrying",
                        extra={
                            "agent": agent,
                            "partition": slot.pair.partition,
                            "error": repr(exc),
                            "retry_in_s": delay,
                        },
                    )
                    self._note_denied(slot, exc, "Read", preparing=True)
                    failed.append(slot)
            if not failed:
                return
            todo = failed
            await asyncio.sleep(delay)
            delay = min(delay * 2, PREPARE_RETRY_MAX_S)

    async def _prepare_one(self, slot: PairSlot) -> None:
        assert self.consumer is not None
        pair = slot.pair
        if slot.producer is None:
            slot.producer = await self._start_producer(pair)
        committed = await self._committed_offsets(slot)
        still_valid = bool(slot.committed) and all(
            committed[tp] == slot.committed.get(tp) for tp in slot.tps()
        )
        if not still_valid:
            started = time.monotonic()
            await self._restore(pair)
            self.metrics.state_restore_seconds.observe(time.monotonic() - started)
        slot.committed = {tp: off for tp, off in committed.items() if off is not None}
        assignment = self.consumer.assignment()
        for tp in slot.tps():
            if tp in slot.committed and tp in assignment:
                self.consumer.seek(tp, slot.committed[tp])
        self.metrics.prime_agent(pair.agent)
        self._granted(slot, preparing=True)
        gc.freeze()  # restored state is long-lived and acyclic: keep it out of GC passes
        slot.ready = True
        live = [tp for tp in slot.tps() if tp in assignment]
        if live:
            self.consumer.resume(*live)
        self._gauges()
        log.info(
            "pair ready",
            extra={
                "agent": pair.agent,
                "partition": pair.partition,
                "threads": len(pair.store),
                "restored": not still_valid,
            },
        )

    async def _start_producer(self, pair: PartitionPair) -> AIOKafkaProducer:
        producer = clients.producer(
            self.settings,
            client_id=f"{self.settings.client_id}-{pair.agent}-{pair.partition}",
            transactional_id=f"{self.settings.group_id}.{pair.agent}.{pair.partition}",
            enable_idempotence=True,
            transaction_timeout_ms=self.settings.transaction_timeout_ms,
            linger_ms=2,
            # Brokers that verify transactional partitions (KIP-890) answer the first
            # write of a transaction from aiokafka's older produce version with a
            # retriable NOT_ENOUGH_REPLICAS; retry soon rather than after 100 ms.
            retry_backoff_ms=10,
        )
        try:
            await producer.start()  # initialises the transactional id: fences zombies
        except BaseException:
            # a failed or cancelled start has already opened connections
            with contextlib.suppress(Exception):
                await producer.stop()
            raise
        return producer

    async def _committed_offsets(self, slot: PairSlot) -> dict[TopicPartition, int | None]:
        """The group's committed offsets for a pair, waiting out our own commit's visibility.

        A transactional offset commit becomes visible to OffsetFetch a little after
        the commit returns. Offsets only move forward, so a value behind what this
        instance itself committed is such a stale read: ask again (bounded).
        """
        assert self.consumer is not None
        for _ in range(50):
            committed = {tp: await self.consumer.committed(tp) for tp in slot.tps()}
            stale = any(
                ours is not None and (committed.get(tp) or 0) < ours
                for tp, ours in slot.committed.items()
            )
            if not stale:
                return committed
            await asyncio.sleep(0.1)
        return committed

    async def _restore(self, pair: PartitionPair) -> None:
        async with self._restore_lock:
            tp = TopicPartition(pair.topics.changelog, pair.partition)
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
                store = ThreadStore()  # the pair keeps its old store if this is cancelled
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
                        if hint is None:  # no hints: decode now (None when unreadable)
                            store.load(message.value, thread_id)
                            state = store.get(thread_id)
                            if state is None:
                                hinted.pop(thread_id, None)
                                continue
                            hint = (str(state.status), len(state.interrupts))
                        else:
                            store.load(message.value, thread_id)  # decoded on first read
                        hinted[thread_id] = hint
                active = {t for t, (status, _) in hinted.items() if status == RunStatus.ACTIVE}
                pair.load_store(store, active, sum(n for _, n in hinted.values()))
            finally:
                with contextlib.suppress(Exception):  # a close failure costs no restored state
                    await reader.stop()

    async def _drop(self, slot: PairSlot) -> None:
        if self._holds(slot):
            del self.slots[(slot.pair.agent, slot.pair.partition)]
            self.denied.pop((slot.pair.agent, slot.pair.partition), None)
            for tp in slot.tps():
                self.by_tp.pop(tp, None)
        await self._close_producer(slot)
        self._gauges()

    def _holds(self, slot: PairSlot) -> bool:
        """Whether the slot is still this instance's current one for its pair."""
        return self.slots.get((slot.pair.agent, slot.pair.partition)) is slot

    async def _close_producer(self, slot: PairSlot) -> None:
        if slot.producer is not None:
            producer, slot.producer = slot.producer, None
            with contextlib.suppress(Exception):
                await producer.stop()

    def _reply_topic_allowed(self, topic: str) -> bool:
        """Whether a request may have its reply written to `topic`."""
        return self._reply_topic_allowed_by_name(topic) and self._topic_exists(topic)

    def _reply_topic_allowed_by_name(self, topic: str) -> bool:
        """Whether `topic` is none of the gateway's own topics."""
        return topic not in self._own_topics and not any(p.match(topic) for p in self._own_patterns)

    def _topic_exists(self, topic: str) -> bool:
        if self.consumer is None:
            return False
        cluster = self.consumer._client.cluster
        # Asked for every request with a reply topic: a look-up, where topics() would
        # first copy the name of every topic the cluster has.
        return (
            topic not in cluster.internal_topics and cluster.partitions_for_topic(topic) is not None
        )


def _fenced(producer: AIOKafkaProducer, exc: Exception) -> bool:
    """Whether a failed transaction means another producer took over the transactional id.

    A fence met by the producer's background sender puts it in a fatal state; the
    next call then fails on that state (an AssertionError), not with ProducerFenced.
    """
    if isinstance(exc, ProducerFenced):
        return True
    txn = getattr(producer, "_txn_manager", None)
    if txn is None or not txn.is_fatal_error():
        return False
    cause = txn.wait_for_transaction_end()
    return bool(
        cause.done() and not cause.cancelled() and isinstance(cause.exception(), ProducerFenced)
    )
