"""The gateway service on Kafka: consume, merge, judge, act, commit exactly once.

One group consumer (range assignment, so partition p of an agent's events
and requests topics meet on one instance) reads both topics with
`read_committed`. The runner composes the pieces and runs the loop:

- `Assignment` (assignment.py): the pairs held; revoke, assign, prepare, drop;
- `Committer` (committer.py): the assignment's; each pair's rounds committed in the background;
- `Checkpoint` (checkpoint.py): a round's records and offsets in one transaction;
- `Restorer` (restore.py): a pair's changelog read into a store;
- `Fences` (fences.py): how far a pair's events must be read before its requests;
- `HoldBack` (holdback.py): a backlog's pending rounds bounded, pairs paused meanwhile;
- `PartitionPair` (pair.py) fills a `Round` (round.py), shaped by shaping.py;
- `Status` (status.py) keeps what the gauges show, read at scrape time.

Each round takes what `getmany` returned, gives each pair its records, looks up
the fences its waiting requests need, judges, and commits the pairs whose round
is due. Its cost follows the pairs that have records, not the pairs assigned.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import CoordinationType
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import IllegalStateError, KafkaError
from aiokafka.structs import ConsumerRecord

from gateway.kafka.assign.assignment import Assignment
from gateway.kafka.assign.fences import Fences
from gateway.kafka.assign.pairassign import Unit, pair_assignor
from gateway.kafka.assign.prepare import Preparer
from gateway.kafka.assign.restore import Restorer
from gateway.kafka.assign.standby import Standbys
from gateway.kafka.assign.status import Status
from gateway.kafka.exactly_once.checkpoint import Checkpoint
from gateway.kafka.exactly_once.holdback import HoldBack
from gateway.kafka.exactly_once.instancecheckpoint import InstanceCheckpoint
from gateway.kafka.exactly_once.pacing import CommitPacing
from gateway.kafka.exactly_once.transaction import read_failure
from gateway.kafka.pairs.agents import layout_for
from gateway.kafka.pairs.pair import PairContext, PartitionPair
from gateway.kafka.pairs.slot import PairKey, PairSlot
from gateway.kafka.pairs.sweeps import SweepPlan, SweepTurns
from gateway.kafka.wire import asread, clients, fetchsessions, fetchwalk
from gateway.kafka.wire.attestation import Verifier
from gateway.kafka.wire.brokerwatch import BrokerWatch
from gateway.kafka.wire.denials import ConsumerDenial
from gateway.kafka.wire.lag import read_lag
from gateway.kafka.wire.replytopics import ReplyTopics
from gateway.kafka.wire.topics import TopicNames
from gateway.observe import logs
from gateway.observe.metrics import Metrics
from gateway.observe.warnings import WarningLimiter
from gateway.settings import Settings
from gateway.state.retention import Retention

log = logging.getLogger("gateway.runner")

# Threads the sweeps look at per round at most, over all the pairs sweeping (decoding
# restored ones), shared between them: a slice per pair grew with the pairs sweeping at
# once, and with a group's few large pairs a round swept about one pair's whole store
# (2,500 threads at 10,000 agents in 8 pairs), which held the round and made the p99.
# Within it, a round sweeps only its share of time (`SweepTurns`).
SWEEP_SLICE = 1000
SWEEP_CHUNK = 50  # threads a pair's pass looks at per turn
SWEEP_CHANGES = 50  # expiries announced or threads forgotten per turn
PENDING_LIMIT = 20_000  # uncommitted records or state changes that force a commit
LAG_INTERVAL_S = 5.0
GRANT_LOOK_S = 5.0  # longest look at whether a refused consumer's group answers again
TOPIC_QUIET_S = 10.0  # a topic's fetch refusal is cleared after this long without one
CONSUMER = "consumer"  # /readyz `denied` key (and gauge agent) of the consumer's own refusal


FLAPPING_ASSIGNMENTS = 5  # assignments within FLAPPING_WINDOW_S that look like a name clash
FLAPPING_WINDOW_S = 30.0


def _read_abandoned_waiters(consumer: AIOKafkaConsumer) -> None:
    """A `getmany` cancelled while it waits for records leaves aiokafka's fetch waiter
    pending (`asyncio.wait` does not cancel what it waits on); a refusal of the group
    later sets its error on that waiter, which nobody awaits any more, and asyncio logs
    it as "Future exception was never retrieved". Read each one's error when it comes:
    the refusal itself reaches the next `getmany`, where it is handled."""
    fetcher = getattr(consumer, "_fetcher", None)  # reach: the waiters are aiokafka's own
    for waiter in list(getattr(fetcher, "_fetch_waiters", ())):
        waiter.add_done_callback(read_failure)


class _Listener(ConsumerRebalanceListener):
    def __init__(
        self,
        assignment: Assignment,
        status: Status,
        static_name: str | None,
        standbys: Standbys | None = None,
        standby_units: Callable[[], list[Unit]] = list,
    ) -> None:
        self.assignment = assignment
        self.status = status
        self.static_name = static_name
        self.standbys = standbys
        self.standby_units = standby_units  # this instance's, as its latest assignment says
        self.recent: deque[float] = deque(maxlen=FLAPPING_ASSIGNMENTS)
        self.warned_at = -FLAPPING_WINDOW_S

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.assignment.revoke(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.status.assigned(time.time())
        self._flapping(time.monotonic())
        if self.standbys is not None:
            # before the pairs are prepared: a replica of a pair now this instance's own
            # is handed over to its restore
            names = self.assignment.names
            own = [
                (found[0], tp.partition)
                for tp in assigned
                if (found := names.classify(tp.topic)) is not None
            ]
            await self.standbys.place(self.standby_units(), own)
        await self.assignment.assign(set(assigned))

    def _flapping(self, now: float) -> None:
        """Two live static members with one name fence each other at every join, over and
        over: say so (once per window) rather than only rebalancing."""
        self.recent.append(now)
        if (
            self.static_name is not None
            and len(self.recent) == FLAPPING_ASSIGNMENTS
            and now - self.recent[0] <= FLAPPING_WINDOW_S
            and now - self.warned_at > FLAPPING_WINDOW_S
        ):
            self.warned_at = now
            log.error(
                "rebalanced %d times in %.0f s as static member %r: another live instance "
                "probably has the same instance_name (each join fences the other); give "
                "every instance its own",
                FLAPPING_ASSIGNMENTS,
                now - self.recent[0],
                self.static_name,
            )


def verifier(settings: Settings) -> Verifier | None:
    """The identity headers' verifier, with the settings' trusted keys (None: none)."""
    if not settings.attest_trusted_keys and settings.attest_trusted_keys_file is None:
        return None
    return Verifier(
        settings.attest_trusted_keys,
        settings.attest_trusted_keys_file,
        settings.attest_keys_reload_s,
    )


def approver_warnings(settings: Settings) -> None:
    """Say at start what the approver policy leaves open."""
    if not settings.approvers:
        log.warning(
            "no approver policy (approvers): anyone who can publish to a requests topic or "
            "reach the edge may answer or abandon any interrupt, as before there was one"
        )
    elif not settings.attest_trusted_keys and settings.attest_trusted_keys_file is None:
        log.warning(
            "an approver policy with no trusted keys (attest_trusted_keys): no identity can "
            "be verified, so every answer its rules govern is approver_unverified unless "
            "they accept unattested ones"
        )
    else:
        log.info(
            "approver policy",
            extra={
                "rules": len(settings.approvers),
                "trusted_keys": sorted(settings.attest_trusted_keys),
            },
        )


class Gateway:
    def __init__(
        self, settings: Settings, metrics: Metrics, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.names = TopicNames(settings)
        self.limiter = WarningLimiter(settings.warning_burst, int(settings.warning_window_s * 1000))
        self.reply_topics = ReplyTopics(settings, metrics)
        self.context = PairContext(
            settings_strict=settings.strict,
            merge_max_wait_s=settings.merge_max_wait_ms / 1000,
            retention=Retention(
                thread_ms=int(settings.thread_retention_s * 1000),
                interrupt_grace_ms=int(settings.interrupt_grace_s * 1000),
                interrupt_ms=int(settings.interrupt_retention_s * 1000),
            ),
            metrics=metrics,
            limiter=self.limiter,
            topic_exists=self.reply_topics.allowed,
            approvers=tuple(rule.rule() for rule in settings.approvers),
            verifier=verifier(settings),
            interrupts_topic=settings.interrupts_topic or None,
            interrupts_runs=settings.interrupts_topic_runs,
        )
        approver_warnings(settings)
        self.status = Status(metrics.gauges)
        self.consumer: AIOKafkaConsumer | None = None
        self.admin: AIOKafkaAdminClient | None = None
        self.offsets: AIOKafkaConsumer | None = None  # end offsets for the fence
        self.broker = BrokerWatch(
            lambda: clients.probe(self.admin), settings.broker_timeout_s, back=self._broker_back
        )
        self.assignment: Assignment | None = None
        self.standbys: Standbys | None = None
        self.busy: dict[PairKey, PairSlot] = {}  # pairs with records, pending work or a sweep
        self.fences: Fences | None = None
        self.hold_back: HoldBack | None = None
        self._running = False
        self._recount_due = False
        self.sweeps = SweepPlan(settings.sweep_interval_s, SWEEP_SLICE)
        self.sweep_turns = SweepTurns(time.perf_counter, SWEEP_SLICE, SWEEP_CHUNK, SWEEP_CHANGES)
        self._last_lag = 0.0
        self._lag_task: asyncio.Task[None] | None = None
        self.consumer_denial = ConsumerDenial()
        self._next_look = 0.0
        metrics.prime_transactions()

    def _broker_back(self) -> None:
        """The broker answers again after it was lost: it may have restarted uncleanly
        and left transactions hanging that this instance saw commit (see `hanging`)."""
        if self.assignment is not None:
            self.assignment.heal()

    def make_pair(self, agent: str, partition: int) -> PartitionPair:
        """The pair of an agent's own topics, or of a group's (`agent` a group's name)."""
        layout = layout_for(agent, self.settings)
        return PartitionPair(self.names.for_agent(agent), partition, self.context, layout)

    # --- lifecycle: start, the loop, shutdown --------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        retries = self.metrics.kafka_retries
        logs.KAFKA_LOGS.on_retry = lambda error: retries.labels(error).inc()
        clean = False
        try:
            await self.start()
            self.broker.start()
            log.info("gateway started", extra={"settings": self.settings.masked()})
            assert self.consumer is not None and self.assignment is not None
            while not stop.is_set():
                try:
                    batch = await self._poll()
                except clients.AUTHORIZATION_ERRORS as exc:
                    self.consumer_denial.note(exc)
                    self._recount()
                    if self.consumer_denial.group:
                        await self._refused(stop)
                    continue
                if self.consumer_denial.denied is not None:
                    await self._granted_again()
                logs.KAFKA_LOGS.tick()  # "kafka connection back" once errors stopped
                async with self.assignment.lock:
                    await self.round(batch)
            clean = True
        finally:
            self._running = False
            # Never raises: an error that ended the loop is the one that propagates.
            await self._shutdown(commit=clean)

    async def _poll(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        """What the consumer fetched, within `poll_timeout_ms`; at once when a fence
        look-up landed, so the pairs it fenced are judged without waiting for a fetch."""
        assert self.consumer is not None and self.fences is not None
        consumer, landed = self.consumer, self.fences.landed
        if landed.is_set():
            landed.clear()
            return await consumer.getmany(timeout_ms=0)
        if not self.fences.looking_up():
            return await consumer.getmany(timeout_ms=self.settings.poll_timeout_ms)
        getter = asyncio.ensure_future(consumer.getmany(timeout_ms=self.settings.poll_timeout_ms))
        waiter = asyncio.ensure_future(landed.wait())
        try:
            await asyncio.wait((getter, waiter), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not getter.done():
                getter.cancel()  # before it took any record: they stay in its buffer
                _read_abandoned_waiters(consumer)
        try:
            return await getter
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the loop itself is cancelled
            return {}

    async def _refused(self, stop: asyncio.Event) -> None:
        """The consumer was refused (see `ConsumerDenial`): wait the backoff, then have
        it join its group again once the group answers (aiokafka's heartbeat ends at a
        refusal, and only a rejoin starts it again)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), self.consumer_denial.backoff())
        if self.consumer is not None:
            self.consumer._coordinator.request_rejoin()  # reach: no public call rejoins

    async def _granted_again(self) -> None:
        """Clear the consumer's refusal: the group's once its coordinator answers it again
        (FindCoordinator needs Describe on the group, which Read implies; looked at no
        more often than the backoff), a topic's once no fetch was refused for
        `TOPIC_QUIET_S`."""
        now = time.monotonic()
        if not self.consumer_denial.group:
            if now - self.consumer_denial.since >= TOPIC_QUIET_S:
                self.consumer_denial.granted()
                self._recount()
            return
        if self.consumer is None or now < self._next_look:
            return
        self._next_look = now + self.consumer_denial.backoff()
        try:
            async with asyncio.timeout(GRANT_LOOK_S):
                await self.consumer._client.coordinator_lookup(
                    CoordinationType.GROUP, self.settings.group_id
                )
        except (KafkaError, TimeoutError):
            return
        self.consumer_denial.granted()
        self._recount()

    async def start(self) -> None:
        """Start the admin client and both consumers (each kept as soon as constructed, so
        a failed start still closes what was opened), and subscribe."""
        s = self.settings
        self.admin = clients.admin(s, client_id=f"{s.client_id}-admin")
        await self.admin.start()
        assignor = (
            pair_assignor(self.names.owner_of_topic, s.standby_replicas)
            if s.partition_assignor == "pairs"
            else RangePartitionAssignor
        )
        self.consumer = clients.consumer(
            s,
            client_id=s.client_id,
            group_id=s.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            # one protocol only: aiokafka members offering two (pairs and range) were seen
            # to rebalance over and over, one member never getting its assignment
            partition_assignment_strategy=(assignor,),
            group_instance_id=s.instance_name if s.static_membership else None,
            metadata_max_age_ms=s.discovery_interval_ms,
            max_poll_records=s.max_poll_records,
            fetch_max_wait_ms=s.fetch_max_wait_ms,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            key_deserializer=asread.as_read,  # no ConsumerRecord per record: see asread
        )
        await self.consumer.start()
        fetchwalk.install(self.consumer)
        if s.fetch_sessions:
            fetchsessions.install(self.consumer)
        # End offsets for the fence come from a client of their own: a broker answers a
        # connection's requests in order, so on the consumer's connection the lookup
        # waits behind a long-polling fetch (up to fetch_max_wait_ms) whenever the
        # fetch covers only quiet partitions, and a round stalls for it.
        self.offsets = clients.consumer(
            s,
            client_id=f"{s.client_id}-offsets",
            enable_auto_commit=False,
            isolation_level="read_committed",
            # aiokafka's default age (5 min), not the discovery interval: a client that
            # tracks no topic yet asks for every topic's metadata at each refresh (the
            # whole fleet's, every 5 s while idle). A lookup on a partition it does not
            # know adds the topic and fetches its metadata then; a moved leader's
            # error refreshes it.
        )
        await self.offsets.start()
        self.compose(self.consumer, self.admin, self.offsets)
        assert self.assignment is not None
        self.consumer.subscribe(
            pattern=s.subscription_pattern(),
            listener=_Listener(
                self.assignment,
                self.status,
                s.instance_name if s.static_membership else None,
                # warm standbys need the pair assignor, which places them
                self.standbys if s.partition_assignor == "pairs" else None,
                lambda: list(getattr(assignor, "standby", ())),
            ),
        )
        self._running = True

    def compose(
        self, consumer: AIOKafkaConsumer, admin: AIOKafkaAdminClient, offsets: AIOKafkaConsumer
    ) -> Assignment:
        """Build the pieces around started clients (tests hand in their own)."""
        self.consumer, self.admin, self.offsets = consumer, admin, offsets
        self.reply_topics.consumer = consumer
        self.fences = Fences(consumer, offsets)
        self.standbys = Standbys(self.settings, self._changelog_of, self.status.standby)
        preparer = Preparer(
            self.names,
            self.metrics,
            consumer,
            admin,
            self._checkpoint(consumer),
            Restorer(self.settings, consumer=offsets),
            self.standbys,
        )
        self.assignment = Assignment(
            preparer,
            self.make_pair,
            self.settings.revoke_timeout_s,
            changed=self._recount,
            counted=self.status.committed,
            pacing=CommitPacing(
                self.settings.commit_min_interval_ms / 1000, self.settings.commit_min_records
            ),
        )
        self.hold_back = HoldBack(
            consumer,
            self.assignment.committer,
            self.assignment.holds,
            self.settings.pending_max_bytes,
            self.metrics.fetch_held_back,
        )
        self._running = True
        return self.assignment

    def _changelog_of(self, owner: str) -> tuple[str, Callable[[str], str | None]]:
        """An owner's changelog topic and how its keys map to threadIds (for standbys)."""
        return self.names.for_agent(owner).changelog, layout_for(owner, self.settings).thread_of

    def _checkpoint(self, consumer: AIOKafkaConsumer) -> Checkpoint | InstanceCheckpoint:
        """One transactional producer per pair (fenced by transactional id), or one per
        instance (fenced by the group's generation, KIP-447): `producer_scope`."""
        if self.settings.producer_scope == "instance":
            return InstanceCheckpoint(self.settings, self.metrics, consumer)
        return Checkpoint(self.settings, self.metrics, consumer)

    async def _shutdown(self, commit: bool = True) -> None:
        """Commit what ready pairs decided (only after a clean stop), then close every client.

        Nothing here raises: each failure is logged and the next client is still closed.
        After a failed round nothing is committed: the next owner reads those records
        again from the last commit.
        """
        if commit and not self.broker.reachable:
            commit = False  # it cannot commit: the next owner reads it again
            log.warning("kafka broker unreachable: stopping without the final commit")
        if self.fences is not None:
            await self.fences.close()
        if self._lag_task is not None:
            self._lag_task.cancel()
            with contextlib.suppress(BaseException):
                await self._lag_task
        if self.standbys is not None:
            await self.standbys.close()
        if self.assignment is not None:
            await self.assignment.close(commit)
            self.busy.clear()
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
        a = self.assignment
        if a is None:
            return False, {
                "broker": self.broker.state()[1],
                "running": self._running,
                "assigned": [],
                "restoring": [],
                "dropped": [],
                "refused": {},
                "denied": {},
            }
        restoring = [
            f"{agent}/{p}"
            for (agent, p), s in a.slots.items()
            if not s.ready and agent not in a.refused
        ]
        dropped = sorted(f"{agent}/{p}" for agent, p in a.dropped if agent not in a.refused)
        denied = {f"{ag}/{p}": f"{op} on {res}" for (ag, p), (op, res) in a.denials.denied.items()}
        if self.consumer_denial.denied is not None:
            denied[CONSUMER] = "{} on {}".format(*self.consumer_denial.denied)
        ok = self._running and a.assigned_once and not restoring and not dropped and not denied
        broker_ok, broker = self.broker.state()
        return ok and broker_ok, {
            "broker": broker,
            "running": self._running,
            "assigned": sorted(f"{agent}/{p}" for agent, p in a.slots),
            "restoring": restoring,
            "dropped": dropped,
            "refused": a.refused,
            "denied": denied,
        }

    # --- the round --------------------------------------------------------------------------

    async def round(self, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """One round: hand out records, fence, judge, sweep, commit what is due."""
        assert self.consumer is not None and self.assignment is not None
        assert self.fences is not None and self.hold_back is not None
        a, fences, hold_back = self.assignment, self.fences, self.hold_back
        mono = time.monotonic()
        for tp, messages in batch.items():
            found = a.slot_for(tp)
            if found is None:
                continue  # not ours (any more): the next owner reads it from the committed offset
            slot, side = found
            if not slot.ready:
                # fetched just before the pause took effect: read these again once ready
                with contextlib.suppress(IllegalStateError):  # not the consumer's any more
                    self.consumer.seek(tp, messages[0].offset)
                continue
            slot.pair.take(side, messages, mono)
            self.busy[slot.key] = slot
            if side == "requests":
                fences.took_requests(slot.key, tp)
        starting = {slot.key for slot in self.sweeps.starting(a.slots, mono)}
        for key in starting:
            self.busy[key] = a.slots[key]
        ready = [s for s in self.busy.values() if s.ready and a.holds(s)]
        fences.set(ready)  # a look-up runs in the background; its pairs wait for it
        await self.reply_topics.refresh_for(r for s in ready for r in s.pair.merge.requests)
        wall_ms = int(self.wall_clock() * 1000)
        for slot in ready:
            if slot.discarded:
                continue  # revoked while this round waited
            if slot.pair.has_work():
                position: int | None = 0  # no events topic: nothing to wait for
                if slot.events_tp is not None and slot.pair.merge.requests:
                    try:
                        position = await self.consumer.position(slot.events_tp)
                    except IllegalStateError:
                        # The consumer let its partitions go before the rebalance that
                        # revokes them (aiokafka does so when a pattern subscription
                        # grows): nothing is judged; the revoke, or the pair again once
                        # reassigned, takes it from the last commit.
                        continue
                    except clients.AUTHORIZATION_ERRORS as exc:
                        # the group's refusal, raised here rather than by the next poll:
                        # the pair's records wait for the next round
                        self.consumer_denial.note(exc)
                        self._recount()
                        continue
                slot.pair.process(position, mono, wall_ms)
        # requests behind the ones just judged, taken since their fence: looked up now
        fences.set(ready)
        self._sweep(ready, starting, wall_ms)
        # Committed in the background: the next round is judged meanwhile. A failed
        # commit rewinds both layers and prepares the pair again with a fresh producer.
        # Rounds holding too much commit now, and the pairs still committing stop
        # fetching until their commit ends (a backlog's memory is bounded).
        over = hold_back.over(ready)
        a.committer.launch(self._due(ready, mono, over))
        if over:
            hold_back.hold(ready)
        for slot in ready:
            pair = slot.pair
            if not (pair.has_work() or pair.has_pending() or pair.sweeping):
                self.busy.pop(slot.key, None)
        for key in [k for k, s in self.busy.items() if not a.holds(s)]:
            del self.busy[key]
            fences.forget(key)
        if mono - self._last_lag >= LAG_INTERVAL_S and (
            self._lag_task is None or self._lag_task.done()
        ):
            self._last_lag = mono
            # in the background: a position still being reset must not hold up a round
            self._lag_task = asyncio.create_task(self._lag())

    def _sweep(self, ready: list[PairSlot], starting: set[PairKey], wall_ms: int) -> None:
        sweep = [s for s in ready if s.pair.sweeping or s.key in starting]
        if self.sweep_turns.run(sweep, starting, wall_ms):
            # Thread states are acyclic and long-lived: a full collection walking all of
            # them stalls a round for 100+ ms at 100k threads. Frozen, they are skipped
            # (reference counting still frees them).
            gc.freeze()

    def _due(self, ready: list[PairSlot], mono: float, over: bool = False) -> list[PairSlot]:
        """The pairs whose round commits now.

        Decided requests are committed at once (their outputs wait on it). What only
        events changed (state, event warnings) may wait up to commit_interval_ms:
        replaying those events after a crash rebuilds the same state. Every round is
        due when the rounds pending hold pending_max_bytes (`over`).
        """
        commit_after = self.settings.commit_interval_ms / 1000
        due = []
        for slot in ready:
            current = slot.pair.round
            if slot.discarded or not slot.ready or current.empty():
                continue
            if self.assignment is not None and self.assignment.committer.in_flight(slot):
                continue  # one commit at a time per pair: this round waits its turn
            if current.started is None:
                current.started = mono
            if (
                over
                or current.decided_any
                or mono - current.started >= commit_after
                or current.size() >= PENDING_LIMIT
            ):
                due.append(slot)
        return due

    # --- gauges -------------------------------------------------------------------------------

    def _recount(self) -> None:
        """Recount once the changes of this turn of the loop are made: a group fence
        drops every pair one after another, and a recount each walks every pair."""
        if self._recount_due:
            return
        try:
            asyncio.get_running_loop().call_soon(self._recount_now)
        except RuntimeError:  # no loop: at once
            self._recount_now()
            return
        self._recount_due = True

    def _recount_now(self) -> None:
        self._recount_due = False
        a = self.assignment
        if a is not None:
            denied = dict(a.denials.denied)
            if self.consumer_denial.denied is not None:
                denied[(CONSUMER, -1)] = self.consumer_denial.denied
            self.status.recount(a.slots.values(), a.refused, denied)

    async def _lag(self) -> None:
        """The lag gauges, read anew (a task of its own, every LAG_INTERVAL_S)."""
        assert self.consumer is not None
        try:
            self.status.lag(*await read_lag(self.consumer, self.names))
        except Exception:
            log.exception("internal error updating the lag gauges")
