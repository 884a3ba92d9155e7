"""The runner's rebalancing, transaction failures and pair preparation, with fake Kafka clients."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import orjson
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import (
    IllegalStateError,
    KafkaError,
    ProducerFenced,
    TopicAuthorizationFailedError,
)
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry, generate_latest

import gateway.kafka.assign.assignment as assignment_module
import gateway.kafka.runner as runner
import gateway.kafka.wire.clients as clients
from gateway.kafka.assign.restore import Restored, Restorer
from gateway.kafka.exactly_once import groupoffsets
from gateway.kafka.pairs.round import Round
from gateway.kafka.pairs.slot import PairSlot
from gateway.kafka.runner import Gateway
from gateway.kafka.wire import denials
from gateway.observe.metrics import Metrics
from gateway.settings import Settings
from gateway.state.store import ThreadStore
from tests.observe.exposition import parse, select

STARTED = orjson.dumps({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"})
INTERRUPTED = orjson.dumps(
    {
        "type": "RUN_FINISHED",
        "threadId": "t1",
        "runId": "r1",
        "outcome": {"type": "interrupt", "interrupts": [{"id": "a", "reason": "tool_call"}]},
    }
)
ANSWER = orjson.dumps(
    {
        "threadId": "t1",
        "runId": "r2",
        "messages": [],
        "resume": [{"interruptId": "a", "status": "resolved"}],
    }
)


def tps(agent: str = "bot", partition: int = 0) -> tuple[TopicPartition, TopicPartition]:
    return (
        TopicPartition(f"agui.{agent}.events", partition),
        TopicPartition(f"agui.{agent}.requests", partition),
    )


def rec(tp: TopicPartition, offset: int, ts: int, value: bytes, headers=()) -> ConsumerRecord:
    return ConsumerRecord(
        tp.topic, tp.partition, offset, ts, 1, b"t1", value, None, 2, len(value), list(headers)
    )


class FakeConsumer:
    def __init__(self) -> None:
        self.assigned: set[TopicPartition] = set()
        self.paused: set[TopicPartition] = set()
        self.positions: dict[TopicPartition, int] = {}
        self.committed_offsets: dict[TopicPartition, int] = {}
        self.topics: set[str] = set()
        # what the consumer's own fetches show: last stable offset and when (wall ms)
        self.fetched: dict[TopicPartition, tuple[int, int]] = {}
        self.highwaters: dict[TopicPartition, int] = {}
        self._client = SimpleNamespace(
            cluster=SimpleNamespace(
                internal_topics={"__consumer_offsets", "__transaction_state"},
                partitions_for_topic=lambda t: {0} if t in self.topics else None,
                leader_for_partition=lambda tp: 1,
            )
        )

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self.fetched[tp][0] if tp in self.fetched else None

    def last_poll_timestamp(self, tp: TopicPartition) -> int | None:
        return self.fetched[tp][1] if tp in self.fetched else None

    def _check(self, tp: TopicPartition) -> None:
        if tp not in self.assigned:
            raise IllegalStateError(f"No current assignment for partition {tp}")

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._check(tp)
        self.positions[tp] = offset

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._check(tp)
            self.positions[tp] = 0

    async def position(self, tp: TopicPartition) -> int:
        self._check(tp)
        return self.positions.get(tp, 0)

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.committed_offsets.get(tp)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._check(tp)
        self.paused |= set(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._check(tp)
        self.paused -= set(partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def highwater(self, tp: TopicPartition) -> int | None:
        assert tp in self.assigned, "Partition is not assigned"  # as aiokafka does
        return self.highwaters.get(tp)

    async def getmany(self, timeout_ms: int = 0) -> dict:
        return {}

    async def stop(self) -> None:
        self.stopped = True


class FakeMetadata:
    """The topics a client's metadata tracks (every one exists)."""

    def __init__(self) -> None:
        self._topics: set[str] = set()
        self.updates = 0
        self.cluster = SimpleNamespace(partitions_for_topic=lambda t: {0})

    def add_topic(self, topic: str) -> asyncio.Future[bool]:
        if topic not in self._topics:
            self.updates += 1
        self._topics.add(topic)
        done = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done


class FakeOffsets:
    def __init__(self) -> None:
        self.ends: dict[TopicPartition, int] = {}
        self.lookups = 0
        self._client = FakeMetadata()

    async def end_offsets(self, partitions):
        self.lookups += 1
        return {tp: self.ends.get(tp, 0) for tp in partitions}

    async def stop(self) -> None:
        self.stopped = True


class FakeProducer:
    """A transactional producer: like aiokafka's, a commit once asked for finishes in the
    background even when its caller stops waiting."""

    def __init__(self, consumer: FakeConsumer, transactional_id: str) -> None:
        self.consumer = consumer
        self.transactional_id = transactional_id
        self.started = False
        self.stopped = False
        self.sent: list[tuple[str, bytes | None]] = []
        self.buf: list[tuple[str, bytes | None]] = []
        self.offsets: dict[TopicPartition, int] = {}
        self.commit_gate: asyncio.Event | None = None  # the commit waits for this
        self.commit_error: BaseException | None = None  # raised once the gate opens
        self.delivery_error: BaseException | None = None  # the records' delivery fails
        self.client = FakeMetadataClient()
        self.aborted = 0
        self._txn_manager = FakeTxnManager()

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def begin_transaction(self) -> None:
        self.buf, self.offsets = [], {}

    async def send(
        self, topic, value=None, key=None, headers=None, partition=None
    ) -> asyncio.Future[None]:
        assert topic in self.client.tracked, "written before its metadata was tracked"
        self.buf.append((topic, value))
        return self._delivery()

    def _delivery(self) -> asyncio.Future[None]:
        delivered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.delivery_error is not None:
            delivered.set_exception(self.delivery_error)
        else:
            delivered.set_result(None)
        return delivered

    @property
    def _metadata(self) -> SimpleNamespace:  # every topic has one partition
        return SimpleNamespace(
            partitions_for_topic=lambda topic: {0}, available_partitions_for_topic=lambda t: {0}
        )

    @staticmethod
    def _partitioner(key, every, available) -> int:
        return every[0]

    def create_batch(self) -> FakeBatch:
        return FakeBatch()

    async def send_batch(self, batch, topic, *, partition) -> asyncio.Future[None]:
        for key, value in batch.records:
            await self.send(topic, value=value, key=key, partition=partition)
        return self._delivery()

    async def send_offsets_to_transaction(self, offsets, group_id) -> None:
        self.offsets = dict(offsets)

    async def commit_transaction(self) -> None:
        await asyncio.shield(asyncio.ensure_future(self._finish(list(self.buf), self.offsets)))

    async def _finish(self, buf, offsets) -> None:
        if self.commit_gate is not None:
            await self.commit_gate.wait()
        if self.commit_error is not None:
            raise self.commit_error
        self.sent += buf
        self.consumer.committed_offsets.update(offsets)

    async def abort_transaction(self) -> None:
        self.aborted += 1


class FakeTxnManager:
    """The partitions added to the open transaction without a record (a sweep, a heal)."""

    def __init__(self) -> None:
        self.added: list[TopicPartition] = []

    def maybe_add_partition_to_txn(self, tp: TopicPartition) -> None:
        self.added.append(tp)

    def is_fatal_error(self) -> bool:
        return False


class FakeBatch:
    """A batch built directly (`create_batch`): its records, in order; never full."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []

    def append(self, *, timestamp, key, value, headers) -> object:
        self.records.append((key, value))
        return object()


class FakeMetadataClient:
    """The producer's client: which topics its metadata tracks, and how often it updated."""

    def __init__(self) -> None:
        self.tracked: set[str] = set()
        self.updates = 0
        self.covered: set[str] = set()  # topics its metadata shows (an update covered them)
        self.cluster = SimpleNamespace(
            partitions_for_topic=lambda t: {0} if t in self.covered else None
        )

    def add_topic(self, topic: str) -> asyncio.Future[bool]:
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if topic in self.tracked:
            done.set_result(True)
        else:
            self.tracked.add(topic)
            self.updates += 1  # aiokafka asks for an update covering the new topic

            def updated() -> None:
                self.covered.add(topic)
                done.set_result(True)

            asyncio.get_running_loop().call_soon(updated)
        return done

    async def force_metadata_update(self) -> bool:
        self.updates += 1
        return True

    async def _wait_on_metadata(self, topic: str) -> None:
        return None


class Producers:
    """Stands in for the AIOKafkaProducer class: every producer the runner makes."""

    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer
        self.made: list[FakeProducer] = []
        self.start_failures: dict[str, int] = {}  # transactional id -> starts that fail
        self.queue: list = []  # producers to hand out next, already started

    def __call__(self, **kwargs):
        if self.queue:
            given = self.queue.pop(0)

            async def started() -> None:
                pass

            given.start = started
            return given
        producer = FakeProducer(self.consumer, kwargs["transactional_id"])
        if self.start_failures.get(producer.transactional_id, 0) > 0:
            self.start_failures[producer.transactional_id] -= 1

            async def fail() -> None:
                raise KafkaError("init failed")

            producer.start = fail
        self.made.append(producer)
        return producer


class FakeRestorer:
    """Restores read an empty log; which pairs were restored is kept."""

    def __init__(self) -> None:
        self.restored: list[tuple[str, int]] = []
        self.last_records: dict[TopicPartition, int] = {}

    async def restore(self, topic: str, partition: int, thread_of=None, head=None) -> Restored:
        self.restored.append((topic.split(".")[1], partition))
        return Restored(ThreadStore(thread_of), set(), 0)

    async def look_ahead(self, tps: list[TopicPartition]) -> None:
        pass

    def forget_looked_ahead(self) -> None:
        pass


@pytest.fixture
def gw(monkeypatch):
    """A running gateway on fake clients; agent checks pass and restores read an empty log."""
    monkeypatch.setattr(assignment_module, "RETRY_S", 0.0)
    g = Gateway(
        # the audit trail off: its records are tests/kafka/test_audit.py's and the broker
        # tests' (tests/integration/test_audit_e2e.py); here they would add a topic to
        # every assertion on what a round wrote
        Settings(revoke_timeout_s=0.05, audit_enabled=False),
        Metrics(CollectorRegistry()),
        wall_clock=lambda: 1000.0,
    )
    consumer = FakeConsumer()
    producers = Producers(consumer)
    monkeypatch.setattr(clients, "AIOKafkaProducer", producers)

    async def fetch_committed(consumer, partitions, *, timeout_s):  # the fake group's offsets
        return {tp: await consumer.committed(tp) for tp in partitions}

    monkeypatch.setattr(groupoffsets, "fetch_committed_offsets", fetch_committed)
    a = g.compose(consumer, SimpleNamespace(), FakeOffsets())
    g.producers = producers
    restorer = FakeRestorer()
    a.preparer.restorer = restorer
    g.restored = restorer.restored

    async def no_check(agent: str) -> None:
        return None

    a.preparer.check_agent = no_check
    return g


async def assign(g: Gateway, *partitions: TopicPartition) -> None:
    g.consumer.assigned = set(partitions)
    await g.assignment.assign(set(partitions))
    await settle(g)


async def rounds(g: Gateway, batch: dict) -> None:
    """One round, then one more each time a fence look-up it started lands (as the loop
    runs them: a look-up runs in the background and wakes the loop)."""
    await g.round(batch)
    while g.fences.looking_up():
        await g.fences.wait()
        if g.fences.landed.is_set():
            g.fences.landed.clear()
            await g.round({})


async def run_round(g: Gateway, batch: dict) -> None:
    """One round (with its look-ups' rounds), and the commits it started (they run in the
    background)."""
    await rounds(g, batch)
    await g.assignment.committer.drain()


async def settle(g: Gateway) -> None:
    await g.assignment.settled()


def producer(g: Gateway, key=("bot", 0)):
    return g.assignment.checkpoint.producer(key)


def gauge(g: Gateway, name: str, **labels) -> float | None:
    return g.metrics.registry.get_sample_value(f"agui_gateway_{name}", labels)


def transactions(g: Gateway, result: str) -> float:
    return g.metrics.transactions.labels(result)._value.get()


def decided_round(ev: TopicPartition, rq: TopicPartition, headers=()) -> dict:
    """Events that leave interrupt "a" open, then the answer to it."""
    return {
        ev: [rec(ev, 0, 1, STARTED), rec(ev, 1, 2, INTERRUPTED)],
        rq: [rec(rq, 0, 5, ANSWER, headers)],
    }


def with_pending_forward(g: Gateway, slot: PairSlot) -> None:
    ev, rq = slot.events_tp, slot.requests_tp
    g.consumer.positions[ev] = 2
    slot.pair.take("events", [rec(ev, 0, 1, STARTED), rec(ev, 1, 2, INTERRUPTED)])
    slot.pair.take("requests", [rec(rq, 0, 5, ANSWER)])
    slot.pair.set_fence(2)
    slot.pair.process(2, 0.0, 0)
    assert [r.topic for r in slot.pair.round.out] == ["agui.bot.run-requests"]


async def holding_a_pending_forward(g: Gateway) -> PairSlot:
    """Pair bot/0 assigned and prepared, with a decided forward not yet committed."""
    ev, rq = tps()
    await assign(g, ev, rq)
    slot = g.assignment.slots[("bot", 0)]
    with_pending_forward(g, slot)
    return slot


def forwards(g: Gateway) -> int:
    return sum(t == "agui.bot.run-requests" for p in g.producers.made for t, _ in p.sent)


# --- reply topics ---------------------------------------------------------------------------


OWN_TOPICS = [
    "agui.bot.events",
    "agui.bot.requests",
    "agui.bot.run-requests",
    "agui.bot.gateway-changelog",
    "agui.other_agent-2.events",
    "agui.other_agent-2.requests",
    "agui.other_agent-2.run-requests",
    "agui.other_agent-2.gateway-changelog",
    "agui.rejections",
    "agui.warnings",
]


@pytest.mark.parametrize("topic", OWN_TOPICS)
def test_no_reply_goes_to_a_topic_of_the_gateway_for_any_agent(gw, topic):
    gw.consumer.topics = {*OWN_TOPICS, "replies"}
    assert gw.reply_topics.exists(topic)
    assert not gw.reply_topics.allowed(topic)


def test_a_reply_may_go_to_any_other_existing_topic(gw):
    gw.consumer.topics = {*OWN_TOPICS, "replies", "agui.bot.replies"}
    assert gw.reply_topics.allowed("replies")
    assert gw.reply_topics.allowed("agui.bot.replies")
    assert not gw.reply_topics.allowed("absent")


def test_a_reply_never_goes_to_the_brokers_internal_topics(gw):
    gw.consumer.topics = {"replies", "__consumer_offsets", "__transaction_state"}
    assert not gw.reply_topics.allowed("__consumer_offsets")
    assert not gw.reply_topics.allowed("__transaction_state")


def test_own_topics_follow_the_configured_templates():
    s = Settings(
        events_topic="in-{agent}",
        requests_topic="ask-{agent}",
        run_requests_topic="{agent}.runs",
        changelog_topic="state.{agent}",
        rejections_topic="no",
        warnings_topic="hm",
        audit_topic="trail",
        agent_name_pattern="[a-z]+",
    )
    g = Gateway(s, Metrics(CollectorRegistry()))
    consumer = FakeConsumer()
    consumer.topics = {"in-x", "ask-x", "x.runs", "state.x", "no", "hm", "trail", "agui.x.events"}
    g.reply_topics.consumer = consumer
    for topic in ("in-x", "ask-x", "x.runs", "state.x", "no", "hm", "trail"):
        assert not g.reply_topics.allowed(topic)
    assert g.reply_topics.allowed("agui.x.events")  # the default template is not in use


async def test_a_reply_naming_the_changelog_is_refused_and_warned(gw):
    ev, rq = tps()
    gw.consumer.topics = {*OWN_TOPICS, "replies"}
    await assign(gw, ev, rq)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq, [("agui-reply-to", b"agui.bot.gateway-changelog")]))
    sent = gw.producers.made[0].sent
    assert [t for t, _ in sent].count("agui.bot.run-requests") == 1
    assert not [t for t, v in sent if v and b'"verdict"' in v]  # no reply anywhere
    warnings = [orjson.loads(v) for t, v in sent if t == "agui.warnings"]
    assert [w["code"] for w in warnings] == ["reply_topic_unknown"]
    assert transactions(gw, "committed") == 1


# --- revoking -------------------------------------------------------------------------------


async def test_a_revoke_that_commits_in_time_keeps_the_pair_for_the_next_assignment(gw):
    ev, rq = tps()
    await assign(gw, ev, rq)
    slot = gw.assignment.slots[("bot", 0)]
    with_pending_forward(gw, slot)
    await gw.assignment.revoke({ev, rq})
    assert gw.assignment.slots[("bot", 0)] is slot and not slot.ready
    assert not slot.pair.has_pending()
    assert gw.consumer.committed_offsets == {ev: 2, rq: 1}
    await assign(gw, ev, rq)
    # the same slot and producer, and no restore: its memory matches the commit
    assert gw.assignment.slots[("bot", 0)] is slot and slot.ready
    assert gw.restored == [("bot", 0)]
    assert len(gw.producers.made) == 1
    assert forwards(gw) == 1


async def test_a_commit_that_times_out_on_revoke_drops_the_pair_and_it_is_rebuilt(gw):
    ev, rq = tps()
    await assign(gw, ev, rq)
    old = gw.assignment.slots[("bot", 0)]
    with_pending_forward(gw, old)
    old_producer = producer(gw)
    old_producer.commit_gate = asyncio.Event()
    await gw.assignment.revoke({ev, rq})
    assert ("bot", 0) not in gw.assignment.slots
    ok, details = gw.ready()
    assert not ok and details["dropped"] == ["bot/0"]
    await settle(gw)
    assert old_producer.stopped
    old_producer.commit_gate.set()  # the cancelled commit still completes
    await asyncio.sleep(0)
    assert gw.consumer.committed_offsets == {ev: 2, rq: 1}
    await assign(gw, ev, rq)
    new = gw.assignment.slots[("bot", 0)]
    assert new is not old and new.ready
    assert producer(gw) is not old_producer
    assert gw.restored == [("bot", 0), ("bot", 0)]
    assert not new.pair.has_pending()
    assert gw.consumer.positions[ev] == 2 and gw.consumer.positions[rq] == 1
    assert gw.ready()[0]
    await run_round(gw, {})
    assert forwards(gw) == 1


async def test_a_revoke_while_one_commit_hangs_drops_that_pair_only(gw):
    a_ev, a_rq = tps("bot", 0)
    b_ev, b_rq = tps("bot", 1)
    await assign(gw, a_ev, a_rq, b_ev, b_rq)
    a, b = gw.assignment.slots[("bot", 0)], gw.assignment.slots[("bot", 1)]
    a_producer, b_producer = producer(gw, a.key), producer(gw, b.key)
    a_producer.commit_gate = asyncio.Event()
    a_producer.commit_error = KafkaError("broker gone")
    gw.offsets.ends = {a_ev: 2, b_ev: 2}
    gw.consumer.positions.update({a_ev: 2, b_ev: 2})
    async with gw.assignment.lock:  # as the consumer loop runs it
        await rounds(gw, {**decided_round(a_ev, a_rq), **decided_round(b_ev, b_rq)})
    while b_producer.sent == []:  # b commits in the background; a's commit hangs
        await asyncio.sleep(0)
    await gw.assignment.revoke({a_ev, a_rq, b_ev, b_rq})
    assert list(gw.assignment.slots) == [("bot", 1)] and not b.ready  # b committed in time
    assert gw.ready()[1]["dropped"] == ["bot/0"]
    assert not a_producer.stopped  # not while its transaction is under way
    gw.consumer.assigned = set()  # the rebalance took the partitions
    a_producer.commit_gate.set()
    await gw.assignment.committer.drain()  # a's failed commit neither rewinds nor pauses partitions
    assert not a.ready and not gw.assignment.preparing()  # and a is not prepared again
    await settle(gw)
    assert a_producer.stopped and not b_producer.stopped
    await assign(gw, a_ev, a_rq, b_ev, b_rq)
    assert gw.assignment.slots[("bot", 0)] is not a and gw.assignment.slots[("bot", 1)] is b
    assert all(s.ready and not s.pair.has_pending() for s in gw.assignment.slots.values())
    # a is rebuilt from Kafka; b's memory matches its commit: no restore
    assert sorted(gw.restored) == [("bot", 0), ("bot", 0), ("bot", 1)]
    assert gw.ready()[0]
    assert forwards(gw) == 1  # b's; a's request is decided again by its next owner


async def test_a_revoke_while_a_round_hangs_drops_every_revoked_pair(gw):
    a_ev, a_rq = tps("bot", 0)
    b_ev, b_rq = tps("bot", 1)
    await assign(gw, a_ev, a_rq, b_ev, b_rq)
    a, b = gw.assignment.slots[("bot", 0)], gw.assignment.slots[("bot", 1)]
    gate = asyncio.Event()
    asked = asyncio.Event()
    position = gw.consumer.position

    async def hanging_position(tp):
        asked.set()
        await gate.wait()
        return await position(tp)

    gw.consumer.position = hanging_position
    gw.offsets.ends = {a_ev: 2, b_ev: 2}
    gw.consumer.positions.update({a_ev: 2, b_ev: 2})
    batch = {**decided_round(a_ev, a_rq), **decided_round(b_ev, b_rq)}

    async def locked_round() -> None:
        async with gw.assignment.lock:  # as the consumer loop runs it
            await rounds(gw, batch)

    round_ = asyncio.create_task(locked_round())
    await asked.wait()  # the round waits for the events position, holding the lock
    await gw.assignment.revoke({a_ev, a_rq, b_ev, b_rq})
    assert gw.assignment.slots == {} and gw.assignment.by_tp == {}
    assert gw.ready()[1]["dropped"] == ["bot/0", "bot/1"]
    gw.consumer.assigned = set()  # the rebalance took the partitions
    gate.set()
    await round_  # the discarded pairs are neither judged nor committed
    await gw.assignment.committer.drain()
    assert not a.ready and not b.ready and not gw.assignment.preparing()
    await settle(gw)
    assert forwards(gw) == 0 and transactions(gw, "committed") == 0
    await assign(gw, a_ev, a_rq, b_ev, b_rq)
    assert all(s.ready and not s.pair.has_pending() for s in gw.assignment.slots.values())
    assert gw.ready()[0]


# --- failed transactions --------------------------------------------------------------------


def fatal_producer(error: Exception) -> AIOKafkaProducer:
    """A real producer whose background sender failed: aiokafka marks it fatal."""
    producer = AIOKafkaProducer(
        bootstrap_servers="127.0.0.1:1", transactional_id="agui-gateway.bot.0"
    )
    producer._txn_manager.set_pid_and_epoch(7, 0)
    producer._txn_manager.begin_transaction()
    producer._txn_manager.fatal_error(error)
    return producer


async def test_a_failed_transaction_replaces_the_producer_before_processing_resumes(
    gw, monkeypatch
):
    monkeypatch.setattr(runner, "PENDING_LIMIT", 1)
    ev, rq = tps()
    await assign(gw, ev, rq)
    slot = gw.assignment.slots[("bot", 0)]
    broken = fatal_producer(KafkaError("sender died"))
    gw.assignment.checkpoint.detach(slot.key)
    gw.producers.queue.append(broken)
    await gw.assignment.checkpoint.open(slot.key)  # as if its producer had failed since
    gw.producers.start_failures["agui-gateway.bot.0"] = 1  # the first replacement fails
    await run_round(gw, {ev: [rec(ev, 0, 1, STARTED)]})
    assert transactions(gw, "aborted") == 1
    assert not slot.ready and ev in gw.consumer.paused
    assert broken._closed
    await settle(gw)
    assert slot.ready and ev not in gw.consumer.paused
    replacements = gw.producers.made[1:]
    assert len(replacements) == 2 and replacements[0].stopped
    assert producer(gw) is replacements[1] and replacements[1].started
    assert gw.consumer.positions[ev] == 0  # rewound: no commit yet
    await run_round(gw, {ev: [rec(ev, 0, 1, STARTED)]})
    assert transactions(gw, "committed") == 1
    assert [t for t, _ in producer(gw).sent] == ["agui.bot.gateway-changelog"]


async def test_a_producer_fenced_in_the_background_drops_the_pair_until_reassigned(gw, monkeypatch):
    monkeypatch.setattr(runner, "PENDING_LIMIT", 1)
    ev, rq = tps()
    await assign(gw, ev, rq)
    assert gw.ready()[0]
    gw.assignment.checkpoint.detach(("bot", 0))
    gw.producers.queue.append(fatal_producer(ProducerFenced()))
    await gw.assignment.checkpoint.open(("bot", 0))
    await run_round(gw, {ev: [rec(ev, 0, 1, STARTED)]})
    assert transactions(gw, "fenced") == 1 and transactions(gw, "aborted") == 0
    assert ("bot", 0) not in gw.assignment.slots
    assert gw.consumer.paused == {ev, rq}
    assert not gw.assignment.preparing()  # not taken back from the instance that fenced it
    ok, details = gw.ready()
    assert not ok and details["dropped"] == ["bot/0"]
    await assign(gw, ev, rq)
    assert gw.ready() == (
        True,
        {
            "broker": "reachable",
            "running": True,
            "assigned": ["bot/0"],
            "restoring": [],
            "dropped": [],
            "refused": {},
            "denied": {},
        },
    )


async def test_a_fenced_commit_is_not_reported_ready(gw):
    slot = await holding_a_pending_forward(gw)
    producer(gw).commit_error = ProducerFenced()
    assert await gw.assignment.committer.commit([slot]) == ([], [])
    assert ("bot", 0) not in gw.assignment.slots
    assert not gw.ready()[0]


async def test_a_refused_write_is_reported_retried_later_and_cleared_by_a_commit(gw):
    slot = await holding_a_pending_forward(gw)
    producer(gw).commit_error = TopicAuthorizationFailedError("agui.bot.run-requests")
    assert await gw.assignment.committer.commit([slot]) == ([], [slot])
    assert transactions(gw, "aborted") == 1
    ok, details = gw.ready()
    assert not ok and details["denied"] == {"bot/0": "Write on topic agui.bot.run-requests"}
    labels = {"agent": "bot", "operation": "Write", "resource": "topic agui.bot.run-requests"}
    assert gauge(gw, "permission_denied", **labels) == 1
    assert gw.assignment.denials.backoff([slot.key]) == denials.RETRY_S  # not at once
    gw.assignment.start_prepare([slot], after=0.01)
    await settle(gw)
    assert slot.ready and gw.ready()[1]["denied"] == {
        "bot/0": "Write on topic agui.bot.run-requests"
    }
    await run_round(gw, decided_round(*tps()))  # granted now: the fresh producer commits
    assert transactions(gw, "committed") == 1
    assert "agui.bot.run-requests" in [t for t, _ in producer(gw).sent]
    ok, details = gw.ready()
    assert ok and details["denied"] == {}
    assert gauge(gw, "permission_denied", **labels) is None  # the series is gone


async def test_a_denied_pair_that_is_given_up_no_longer_holds_readiness(gw):
    slot = await holding_a_pending_forward(gw)
    producer(gw).commit_error = TopicAuthorizationFailedError("agui.bot.run-requests")
    assert await gw.assignment.committer.commit([slot]) == ([], [slot])
    assert gw.ready()[1]["denied"] == {"bot/0": "Write on topic agui.bot.run-requests"}
    gw.assignment.discard(slot)  # e.g. revoked while its commit hung
    assert gw.ready()[1]["denied"] == {}
    await settle(gw)
    await assign(gw)  # the pair went elsewhere
    assert gw.ready() == (True, gw.ready()[1])


# --- preparing ------------------------------------------------------------------------------


async def test_a_pair_that_cannot_be_prepared_does_not_hold_up_the_others(gw):
    tp_list = [*tps("alpha"), *tps("beta")]
    order: list[str] = []
    first: list[str] = []
    prepare_one = gw.assignment.preparer.prepare_one

    async def failing_first(slot):
        agent = slot.pair.agent
        first[:] = first or [agent]
        order.append(agent)
        if agent == first[0] and order.count(agent) <= 3:
            raise KafkaError("cannot prepare")
        await prepare_one(slot)

    gw.assignment.preparer.prepare_one = failing_first
    await assign(gw, *tp_list)
    stuck, other = first[0], ({"alpha", "beta"} - {first[0]}).pop()
    # the other pair was prepared in the first pass, before any retry of the failing one
    assert order[:2] == [stuck, other]
    assert order.count(stuck) == 4 and order.count(other) == 1
    assert all(s.ready for s in gw.assignment.slots.values())


async def test_an_agent_check_that_fails_does_not_hold_up_other_agents(gw):
    checks: list[str] = []
    other_ready: list[bool] = []

    async def check(agent: str) -> None:
        checks.append(agent)
        stuck = checks[0]  # whichever agent comes first fails twice
        other = ({"alpha", "beta"} - {stuck}).pop()
        other_ready.append(gw.assignment.slots[(other, 0)].ready)
        if agent == stuck and checks.count(stuck) < 3:
            raise KafkaError("admin unavailable")

    gw.assignment.preparer.check_agent = check
    await assign(gw, *tps("alpha"), *tps("beta"))
    assert sorted(checks.count(a) for a in ("alpha", "beta")) == [1, 3]
    assert other_ready[-1]  # the failing agent's retries happen with the other one serving
    assert all(s.ready for s in gw.assignment.slots.values())


async def test_a_producer_whose_start_fails_is_stopped(gw):
    ev, rq = tps()
    gw.consumer.assigned = {ev, rq}
    gw.producers.start_failures["agui-gateway.bot.0"] = 1
    await gw.assignment.assign({ev, rq})
    while not gw.producers.made:  # the first attempt to prepare the pair
        await asyncio.sleep(0)
    gw.assignment.cancel_prepares()
    await settle(gw)
    slot = gw.assignment.slots[("bot", 0)]
    assert not slot.ready and producer(gw) is None
    assert [p.stopped for p in gw.producers.made] == [True]


async def test_a_producer_whose_start_is_cancelled_is_stopped(gw, monkeypatch):
    ev, rq = tps()
    gw.consumer.assigned = {ev, rq}
    made: list[FakeProducer] = []
    entered = asyncio.Event()

    def hanging(**kwargs):
        producer = FakeProducer(gw.consumer, kwargs["transactional_id"])

        async def start() -> None:
            entered.set()
            await asyncio.Event().wait()

        producer.start = start
        made.append(producer)
        return producer

    monkeypatch.setattr(clients, "AIOKafkaProducer", hanging)
    await gw.assignment.assign({ev, rq})
    await entered.wait()
    await gw.assignment.revoke({ev, rq})
    await settle(gw)
    assert len(made) == 1 and made[0].stopped
    assert producer(gw) is None


class FakeReader:
    made: list[FakeReader] = []

    def __init__(self, **kwargs) -> None:
        self.stopped = False
        self.entered = asyncio.Event()
        FakeReader.made.append(self)

    async def start(self) -> None:
        raise KafkaError("no connection")

    async def stop(self) -> None:
        self.stopped = True


class HangingReader(FakeReader):
    async def start(self) -> None:
        self.entered.set()
        await asyncio.Event().wait()


async def test_the_restore_reader_is_stopped_when_its_start_fails(monkeypatch):
    FakeReader.made = []
    monkeypatch.setattr(clients, "AIOKafkaConsumer", FakeReader)
    with pytest.raises(KafkaError):
        await Restorer(Settings()).restore("agui.bot.gateway-changelog", 0)
    assert [r.stopped for r in FakeReader.made] == [True]


async def test_the_restore_reader_is_stopped_when_its_start_is_cancelled(monkeypatch):
    FakeReader.made = []
    monkeypatch.setattr(clients, "AIOKafkaConsumer", HangingReader)
    task = asyncio.create_task(Restorer(Settings()).restore("agui.bot.gateway-changelog", 0))
    while not FakeReader.made:
        await asyncio.sleep(0)
    await FakeReader.made[0].entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [r.stopped for r in FakeReader.made] == [True]


# --- defects while building a round, and shutting down ----------------------------------


async def test_a_defect_building_a_rounds_records_aborts_that_pair_and_the_loop_goes_on(gw):
    ev, rq = tps()
    await assign(gw, ev, rq)
    slot = gw.assignment.slots[("bot", 0)]

    def broken(self) -> list:
        raise TypeError("cannot build the changelog")

    gw.consumer.positions[ev] = 2
    gw.offsets.ends = {ev: 2}
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(Round, "changelog_records", broken)
        await run_round(gw, decided_round(ev, rq))  # does not raise
    assert transactions(gw, "aborted") == 1 and transactions(gw, "committed") == 0
    assert not slot.ready and ev in gw.consumer.paused  # rewound, prepared again
    await settle(gw)
    assert slot.ready and gw.consumer.positions[ev] == 0  # rewound
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq))
    assert transactions(gw, "committed") == 1 and forwards(gw) == 1


async def started_with_a_pending_forward(gw):
    """A gateway holding pair bot/0 with a decided forward not yet committed, and a
    `start` that does nothing (already started): what `run` finds when it stops.
    Returns the pair's producer."""
    await holding_a_pending_forward(gw)

    async def started() -> None:
        return None

    gw.start = started
    return producer(gw)


async def test_a_failed_round_propagates_its_own_error_and_every_client_is_closed(gw):
    made = await started_with_a_pending_forward(gw)
    commits: list[PairSlot] = []

    async def failing_round(batch) -> None:
        raise RuntimeError("the first error")

    async def commit(slots: list[PairSlot]) -> tuple:
        commits.extend(slots)
        raise RuntimeError("a second error")

    gw.round = failing_round
    gw.assignment.committer.commit = commit
    with pytest.raises(RuntimeError, match="the first error") as raised:
        await gw.run(asyncio.Event())
    assert raised.value.__suppress_context__ is False and raised.value.__context__ is None
    assert commits == []  # a failed round's half-built outputs are never committed
    assert made.stopped and gw.consumer.stopped and gw.offsets.stopped
    assert gw.assignment.slots == {} and not gw.ready()[1]["running"]


async def test_a_failing_final_commit_does_not_stop_the_clients_closing(gw):
    made = await started_with_a_pending_forward(gw)

    async def commit(slots: list[PairSlot]) -> tuple:
        raise RuntimeError("commit failed")

    gw.assignment.committer.commit = commit
    stop = asyncio.Event()
    stop.set()
    await gw.run(stop)  # a clean stop: the failed final commit is logged, not raised
    assert made.stopped and gw.consumer.stopped and gw.offsets.stopped


async def test_a_stop_with_the_broker_unreachable_skips_the_final_commit(gw):
    made = await started_with_a_pending_forward(gw)
    commits: list[PairSlot] = []

    async def started() -> None:
        gw.broker.unreachable_after_s = 0.0  # as if no answer came for the whole limit

    async def commit(slots: list[PairSlot]) -> tuple:
        commits.extend(slots)
        return [], []

    gw.start = started
    gw.assignment.committer.commit = commit
    stop = asyncio.Event()
    stop.set()
    await gw.run(stop)
    assert commits == []  # it could not commit: the next owner reads it again
    assert made.stopped and gw.consumer.stopped and gw.offsets.stopped


# --- reply topics created just before the request ----------------------------------------


def refreshing(gw, creates: set[str]) -> list[int]:
    """The fake cluster's metadata refresh: it shows `creates` once refreshed."""
    calls: list[int] = []

    async def refresh() -> bool:
        calls.append(1)
        gw.consumer.topics |= creates
        return True

    gw.consumer._client.force_metadata_update = refresh
    return calls


async def test_a_reply_topic_created_just_before_the_request_gets_its_reply(gw):
    ev, rq = tps()
    gw.consumer.topics = {*OWN_TOPICS}
    calls = refreshing(gw, {"fresh-replies"})
    await assign(gw, ev, rq)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq, [("agui-reply-to", b"fresh-replies")]))
    sent = gw.producers.made[0].sent
    assert [t for t, _ in sent if t == "fresh-replies"] == ["fresh-replies"]
    assert not [t for t, _ in sent if t == "agui.warnings"]
    assert calls == [1]
    assert gw.metrics.reply_topic_refreshes._value.get() == 1


async def test_a_reply_topic_that_does_not_exist_is_refreshed_once_then_warned(gw):
    ev, rq = tps()
    gw.consumer.topics = {*OWN_TOPICS, "replies"}
    calls = refreshing(gw, set())
    await assign(gw, ev, rq)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    batch = decided_round(ev, rq, [("agui-reply-to", b"absent")])
    batch[rq].append(rec(rq, 1, 6, ANSWER, [("agui-reply-to", b"absent")]))
    await run_round(gw, batch)
    warnings = [orjson.loads(v) for t, v in gw.producers.made[0].sent if t == "agui.warnings"]
    assert [w["code"] for w in warnings] == ["reply_topic_unknown"] * 2
    assert calls == [1]  # once for the round, not once per request
    # a known topic, or one of the gateway's own, never costs a refresh
    await run_round(gw, {rq: [rec(rq, 2, 7, ANSWER, [("agui-reply-to", b"replies")])]})
    await run_round(gw, {rq: [rec(rq, 3, 8, ANSWER, [("agui-reply-to", b"agui.warnings")])]})
    assert calls == [1]


async def test_every_topic_a_round_writes_is_tracked_by_its_producer_before_the_first_write(gw):
    """A producer's metadata covers only what it tracks once it tracks anything: a topic
    written untracked would drop out of it and leave its batch without a leader."""
    ev, rq = tps()
    gw.consumer.topics = {*OWN_TOPICS, "fresh-replies"}
    await assign(gw, ev, rq)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq, [("agui-reply-to", b"fresh-replies")]))
    producer = gw.producers.made[0]
    written = {t for t, _ in producer.sent}  # each send asserted its topic tracked
    assert {"agui.bot.run-requests", "fresh-replies"} <= written
    assert written <= producer.client.tracked
    updates = producer.client.updates
    assert updates > 0
    # topics it already tracks cost no further metadata update
    await run_round(gw, {rq: [rec(rq, 1, 6, ANSWER, [("agui-reply-to", b"fresh-replies")])]})
    assert transactions(gw, "committed") == 2
    assert producer.client.updates == updates


async def test_a_record_the_producer_gives_up_on_aborts_the_transaction(gw):
    """Committing without it would lose it behind the committed offsets."""
    ev, rq = tps()
    gw.consumer.topics = {*OWN_TOPICS, "replies"}
    await assign(gw, ev, rq)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    slot = gw.assignment.slots[("bot", 0)]
    producer = gw.producers.made[0]
    producer.delivery_error = KafkaError("batch expired")
    await run_round(gw, decided_round(ev, rq, [("agui-reply-to", b"replies")]))
    assert transactions(gw, "committed") == 0 and transactions(gw, "aborted") == 1
    assert producer.aborted == 1 and not producer.sent
    assert not slot.ready and ev in gw.consumer.paused  # read again from the last commit
    await settle(gw)
    assert slot.ready
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq, [("agui-reply-to", b"replies")]))  # a fresh producer
    assert transactions(gw, "committed") == 1
    assert forwards(gw) == 1


# --- pipelining: judging the next round while one commits ----------------------------------


def answer_for(interrupt: str, run: str) -> bytes:
    return orjson.dumps(
        {
            "threadId": "t1",
            "runId": run,
            "messages": [],
            "resume": [{"interruptId": interrupt, "status": "resolved"}],
        }
    )


def decisions(sent: list[tuple[str, object]]) -> list[str]:
    """The topics of what was sent, less the state it wrote (changelog, interrupts topic)."""
    return [t for t, _ in sent if t not in ("agui.bot.gateway-changelog", "agui.interrupts")]


async def test_the_next_round_is_judged_while_one_commits_and_both_land_in_order(gw):
    ev, rq = tps()
    await assign(gw, ev, rq)
    made = producer(gw)
    made.commit_gate = asyncio.Event()
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    async with gw.assignment.lock:
        await rounds(gw, decided_round(ev, rq))  # round 1: forwards the answer; commit waits
    slot = gw.assignment.slots[("bot", 0)]
    assert gw.assignment.committer.in_flight(slot) and made.sent == []
    second = rec(rq, 1, 6, answer_for("a", "r3"))
    async with gw.assignment.lock:
        await rounds(gw, {rq: [second]})  # round 2 judged on round 1's uncommitted state
    assert [r.topic for r in slot.pair.round.out] == ["agui.rejections"]  # already resumed
    assert made.sent == []  # nothing of either round visible yet
    made.commit_gate.set()
    await gw.assignment.committer.drain()  # round 1 lands, and round 2 (decided) follows at once
    assert decisions(made.sent) == [
        "agui.bot.run-requests",
        "agui.rejections",
    ]
    assert gw.consumer.committed_offsets == {ev: 2, rq: 2}
    assert transactions(gw, "committed") == 2


async def test_a_failed_commit_with_a_second_round_pending_rewinds_both(gw):
    ev, rq = tps()
    await assign(gw, ev, rq)
    made = producer(gw)
    made.commit_gate = asyncio.Event()
    made.commit_error = KafkaError("broker gone")
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    async with gw.assignment.lock:
        await rounds(gw, decided_round(ev, rq))
        await rounds(gw, {rq: [rec(rq, 1, 6, answer_for("a", "r3"))]})
    slot = gw.assignment.slots[("bot", 0)]
    assert not slot.pair.round.empty()  # the second layer
    made.commit_gate.set()
    await gw.assignment.committer.drain()
    assert transactions(gw, "aborted") == 1 and made.sent == []
    assert not slot.pair.has_pending()  # both layers forgotten
    assert gw.consumer.positions[ev] == 0 and gw.consumer.positions[rq] == 0  # rewound
    await settle(gw)  # prepared again with a fresh producer
    assert slot.ready and producer(gw) is not made
    gw.consumer.positions[ev] = 2
    await run_round(
        gw,
        {
            **decided_round(ev, rq),
            rq: [rec(rq, 0, 5, ANSWER), rec(rq, 1, 6, answer_for("a", "r3"))],
        },
    )
    # read again from the last commit: each request decided once, nothing lost
    sent = decisions(producer(gw).sent)
    assert sent == ["agui.bot.run-requests", "agui.rejections"]
    assert gw.consumer.committed_offsets == {ev: 2, rq: 2}


async def test_a_slow_commit_holds_back_no_other_pair(gw):
    a_ev, a_rq = tps("bot", 0)
    b_ev, b_rq = tps("bot", 1)
    await assign(gw, a_ev, a_rq, b_ev, b_rq)
    slow = producer(gw, ("bot", 0))
    slow.commit_gate = asyncio.Event()
    gw.offsets.ends = {a_ev: 2, b_ev: 2}
    gw.consumer.positions.update({a_ev: 2, b_ev: 2})
    async with gw.assignment.lock:
        await rounds(gw, {**decided_round(a_ev, a_rq), **decided_round(b_ev, b_rq)})
    fast = producer(gw, ("bot", 1))
    while not fast.sent:
        await asyncio.sleep(0)
    async with gw.assignment.lock:  # the loop goes on while a's commit hangs
        await rounds(gw, {b_rq: [rec(b_rq, 1, 6, answer_for("a", "r3"))]})
    while len([t for t, _ in fast.sent if t == "agui.rejections"]) < 1:
        await asyncio.sleep(0)
    assert slow.sent == [] and gw.consumer.committed_offsets[b_rq] == 2
    slow.commit_gate.set()
    await gw.assignment.committer.drain()
    assert gw.consumer.committed_offsets[a_rq] == 1


async def test_the_fence_comes_from_the_fetch_when_it_followed_the_requests(gw):
    ev, rq = tps()
    await assign(gw, ev, rq)
    gw.consumer.positions[ev] = 2
    gw.consumer.fetched = {rq: (1, 1000), ev: (2, 1001)}  # events fetched after the request
    await run_round(gw, decided_round(ev, rq))
    assert gw.offsets.lookups == 0 and forwards(gw) == 1


async def test_a_stale_fetched_fence_falls_back_to_the_lookup(gw):
    ev, rq = tps()
    await assign(gw, ev, rq)
    gw.consumer.positions[ev] = 2
    gw.offsets.ends = {ev: 2}
    gw.consumer.fetched = {rq: (1, 1000), ev: (0, 1000)}  # not after the request: stale
    await run_round(gw, decided_round(ev, rq))
    assert gw.offsets.lookups == 1 and forwards(gw) == 1


async def test_a_fetched_fence_from_another_leader_is_not_trusted(gw):
    ev, rq = tps()
    await assign(gw, ev, rq)
    gw.consumer._client.cluster.leader_for_partition = lambda tp: 1 if tp == ev else 2
    gw.consumer.positions[ev] = 2
    gw.offsets.ends = {ev: 2}
    gw.consumer.fetched = {rq: (1, 1000), ev: (2, 5000)}
    await run_round(gw, decided_round(ev, rq))
    assert gw.offsets.lookups == 1 and forwards(gw) == 1


# --- a pattern subscription that grows ------------------------------------------------------


async def test_a_subscription_reset_before_the_revoke_judges_nothing_and_does_not_fail(gw):
    """aiokafka drops a pattern subscription's assignment as soon as a new topic matches,
    before the rebalance that revokes the pairs: a round in between must not fail the loop
    (it did: IllegalStateError ended the gateway), and judges nothing it cannot fence."""
    ev, rq = tps()
    await assign(gw, ev, rq)
    await run_round(gw, {ev: [rec(ev, 0, 1, STARTED), rec(ev, 1, 2, INTERRUPTED)]})
    gw.consumer.positions[ev] = 2
    gw.consumer.assigned = set()  # the subscription changed; the revoke has not come yet
    await run_round(gw, {rq: [rec(rq, 0, 5, ANSWER)]})
    assert forwards(gw) == 0  # not judged without knowing how far its events were read
    gw.consumer.assigned = {ev, rq}  # the rebalance gives the pair back
    await run_round(gw, {})
    await run_round(gw, {})
    assert forwards(gw) == 1


async def test_lag_skips_partitions_the_growing_subscription_let_go_while_it_read(gw):
    """The lag gauge awaits each partition's position; meanwhile a pattern subscription
    that grew can drop the assignment, and aiokafka's `highwater` then asserts. That
    ended the gateway (seen adding an agent to a fleet of 50); now those partitions
    have no figure this time and the others keep theirs."""
    ev, rq = tps()
    await assign(gw, ev, rq)
    gw.consumer.highwaters = {ev: 7, rq: 9}
    position = gw.consumer.position
    read: list[TopicPartition] = []

    async def letting_go(tp: TopicPartition) -> int:
        at = await position(tp)
        if not read:
            gw.consumer.assigned = {tp}  # the subscription grew: the other one is let go
        read.append(tp)
        return at

    gw.consumer.position = letting_go
    await gw._lag()  # raised AssertionError before
    text = generate_latest(gw.metrics.registry).decode()
    lag = select(parse(text), "agui_gateway_consumer_lag")
    assert read == [read[0]]  # the other partition was skipped, not read
    assert sum(lag.values()) == gw.consumer.highwaters[read[0]]


# --- fence look-ups in the background -------------------------------------------------------


def hanging_lookups(g: Gateway) -> tuple[asyncio.Event, asyncio.Event]:
    """Look-ups that wait for the returned gate; the other event is set when one starts."""
    gate, started = asyncio.Event(), asyncio.Event()
    ends = g.offsets.end_offsets

    async def hanging(partitions):
        started.set()
        await gate.wait()
        return await ends(partitions)

    g.offsets.end_offsets = hanging
    return gate, started


async def test_a_fence_look_up_holds_up_no_other_pair(gw):
    """A round awaited its look-up: every pair waited for the slowest one (seconds in a
    fleet of 200 agents). Now a pair fenced by the fetch is judged while another's
    look-up is under way, and that one is judged once its look-up lands."""
    a_ev, a_rq = tps("bot", 0)
    b_ev, b_rq = tps("bot", 1)
    await assign(gw, a_ev, a_rq, b_ev, b_rq)
    gate, started = hanging_lookups(gw)
    gw.offsets.ends = {a_ev: 2}
    gw.consumer.positions.update({a_ev: 2, b_ev: 2})
    gw.consumer.fetched = {b_rq: (1, 1000), b_ev: (2, 1001)}  # b's fence comes from its fetch
    batch = {**decided_round(a_ev, a_rq), **decided_round(b_ev, b_rq)}
    # (bounded only so that a round that waits for the look-up fails rather than hangs)
    await asyncio.wait_for(gw.round(batch), timeout=30)
    assert gw.fences.looking_up()
    await started.wait()
    a, b = gw.assignment.slots[("bot", 0)], gw.assignment.slots[("bot", 1)]
    assert a.pair.merge.requests and not b.pair.merge.requests  # b judged, a waits
    gate.set()
    await gw.fences.wait()
    assert gw.fences.landed.is_set()  # the loop runs the next round at once
    await run_round(gw, {})
    assert forwards(gw) == 2 and gw.offsets.lookups == 1


async def test_a_look_up_covers_only_the_requests_buffered_when_it_started(gw):
    """A request taken while a look-up is under way arrived after the end offset it
    reads may have been taken: it needs a fence of its own."""
    ev, rq = tps()
    await assign(gw, ev, rq)
    gate, started = hanging_lookups(gw)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    await gw.round(decided_round(ev, rq))
    await started.wait()
    await gw.round({rq: [rec(rq, 1, 6, answer_for("a", "r3"))]})  # while it is under way
    gate.set()
    await run_round(gw, {})  # the first lands; the second request looks up again
    assert gw.offsets.lookups == 2
    sent = decisions(producer(gw).sent)
    assert sent == ["agui.bot.run-requests", "agui.rejections"]


async def test_a_failed_look_up_is_tried_again_by_a_later_round(gw, caplog):
    ev, rq = tps()
    await assign(gw, ev, rq)
    ends = gw.offsets.end_offsets
    failures = [KafkaError("broker busy")]

    async def flaky(partitions):
        if failures:
            raise failures.pop()
        return await ends(partitions)

    gw.offsets.end_offsets = flaky
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq))
    assert forwards(gw) == 0 and "end offsets lookup failed" in caplog.text
    await run_round(gw, {})
    assert forwards(gw) == 1


async def test_pairs_dropped_together_are_recounted_once(gw, monkeypatch):
    pairs = [tp for p in range(8) for tp in tps("bot", p)]
    await assign(gw, *pairs)
    walks: list[int] = []
    recount = gw.status.recount
    monkeypatch.setattr(
        gw.status, "recount", lambda slots, *rest: (walks.append(1), recount(slots, *rest))
    )
    for key in list(gw.assignment.slots):
        await gw.assignment.fenced(gw.assignment.slots[key])  # a group fence drops them all
    assert walks == []  # not one walk over every pair per pair dropped
    await asyncio.sleep(0)
    assert walks == [1] and gw.assignment.slots == {}
    assert gauge(gw, "threads", agent="bot") == 0
