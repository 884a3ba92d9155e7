"""Hanging transactions, against the real broker.

A hanging transaction is made on purpose: a TxnOffsetCommit sent after its
transaction ended, accepted only while the broker does not verify transactional
partitions (KIP-890), which these tests switch off for a moment. Its offsets then
stay pending for ever, as after the broker defect `gateway.kafka.exactly_once.hanging` describes.
The transaction it is sent after ended as the test says (committed or aborted): the
coordinator's decision the settling follows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import CoordinationType
from prometheus_client import CollectorRegistry

from gateway.kafka.exactly_once import groupoffsets, hanging
from gateway.kafka.exactly_once.checkpoint import Checkpoint, Outcome, Work
from gateway.kafka.exactly_once.groupoffsets import OffsetsUnstable
from gateway.kafka.wire import clients, fencewire, txnstates
from gateway.kafka.wire.fencewire import GroupMetadata
from gateway.observe.metrics import Metrics
from gateway.settings import Settings
from tests.integration.conftest import CreateTopics
from tests.integration.support import GatewayProcess, Namespace, produce, stable_and_high
from tests.integration.test_gateway_durability import (
    AGENT,
    assert_exactly_once,
    send_requests,
    thread_events,
)

pytestmark = pytest.mark.integration

VERIFICATION = "transaction.partition.verification.enable"
INVALID_TXN_STATE = 48  # the error code of a transactional write the broker cannot verify


class NoRound:
    """A round that writes nothing: its commit carries offsets alone."""

    def records(self) -> list[Any]:
        return []


def test_a_pair_writes_every_partition_of_spread_topics_and_its_own_changelog_partition() -> None:
    known = {"run": {0, 1, 2}, "rejections": {0, 1}}
    found = hanging.written_partitions(
        known.get, ["run", "rejections", "absent"], [TopicPartition("changelog", 1)]
    )
    assert found == sorted(
        [TopicPartition("changelog", 1)]
        + [TopicPartition("run", p) for p in (0, 1, 2)]
        + [TopicPartition("rejections", p) for p in (0, 1)]
    )


@contextlib.asynccontextmanager
async def verification_off(settings: Settings) -> AsyncIterator[None]:
    """The broker accepts transactional writes it cannot verify, for a moment."""
    admin = clients.admin(settings)
    await admin.start()
    try:
        broker = str(next(iter(admin._client.cluster.brokers())).nodeId)

        async def set_to(value: str) -> None:
            resource = ConfigResource(ConfigResourceType.BROKER, broker, {VERIFICATION: value})
            for response in await admin.alter_configs([resource]):
                assert all(r[0] == 0 for r in response.resources), response

        await set_to("false")
        try:
            await asyncio.sleep(1)  # a dynamic config reaches the request handlers
            yield
        finally:
            await set_to("true")
    finally:
        await admin.close()


async def committed(
    settings: Settings, group: str, tp: TopicPartition, timeout_s: float
) -> int | None:
    consumer: AIOKafkaConsumer = clients.consumer(settings, group_id=group)
    await consumer.start()
    try:
        return (await groupoffsets.fetch_committed_offsets(consumer, [tp], timeout_s=timeout_s))[tp]
    finally:
        await consumer.stop()


async def hang(
    settings: Settings,
    transactional_id: str,
    group: str,
    tp: TopicPartition,
    at: int,
    pending: int,
    decided: str = "commit",
) -> None:
    """Commit `at` for `tp` in a transaction of `transactional_id`, then leave `pending`
    hanging under the same producer id and epoch, after a last transaction `decided`
    ("commit": that one; "abort": one more, aborted)."""
    producer = clients.producer(
        settings, transactional_id=transactional_id, enable_idempotence=True
    )
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_offsets_to_transaction({tp: at}, group)
        if decided == "abort":
            await producer.begin_transaction()
            await producer.send_offsets_to_transaction({tp: pending}, group)
            await producer.abort_transaction()
        assert await committed(settings, group, tp, 30) == at  # its marker is applied
        txn = producer._txn_manager
        late = fencewire.TxnOffsetCommitRequestV3(
            transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            GroupMetadata(group, -1, ""),
            {tp: (pending, "")},
        )
        # Tests in the other lane may turn verification back on meanwhile (one broker),
        # and a dynamic config takes a moment to reach the handlers: while the write is
        # refused as unverifiable (INVALID_TXN_STATE), turn it off and send it again.
        for _ in range(10):
            async with verification_off(settings):
                node = await producer.client.coordinator_lookup(CoordinationType.GROUP, group)
                answer = await producer.client.send(node, late)
            if [p[1] for t in answer.topics for p in t[1]] != [INVALID_TXN_STATE]:
                break
        assert [p[1] for t in answer.topics for p in t[1]] == [0], answer
    finally:
        await producer.stop()
    with pytest.raises(OffsetsUnstable):
        await committed(settings, group, tp, 3)


async def test_a_sweep_aborts_what_a_hanging_transaction_of_the_same_id_left(
    kafka_bootstrap: str,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    source, output = unique_name("hang-in"), unique_name("hang-out")
    group, transactional_id = unique_name("hang-group"), unique_name("hang-txn")
    await create_topics([source, output])
    tp = TopicPartition(source, 0)
    await hang(settings, transactional_id, group, tp, at=3, pending=7)

    producer = clients.producer(
        settings, transactional_id=transactional_id, enable_idempotence=True
    )
    await producer.start()
    try:
        swept = await hanging.sweep(producer, [TopicPartition(output, 0)], {tp: 3}, group)
        assert swept == [TopicPartition(output, 0)]
        assert await committed(settings, group, tp, 30) == 3  # never 7
        # the producer goes on committing as usual
        async with producer.transaction():
            await producer.send_offsets_to_transaction({tp: 4}, group)
    finally:
        await producer.stop()
    assert await committed(settings, group, tp, 30) == 4


async def test_a_gateway_discards_a_hanging_transaction_its_coordinator_aborted(
    kafka_bootstrap: str,
    tmp_path,
) -> None:
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=1)
    threads = ["t0", "t1", "t2", "t3"]
    await produce(ns.bootstrap, ns.events(AGENT), [e for t in threads for e in thread_events(t)])
    await send_requests(ns, threads)
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    # as if a round that decided the first two requests had been aborted, its offsets
    # left hanging (its outputs, discarded, are not made here)
    requests = TopicPartition(ns.requests(AGENT), 0)
    await hang(
        settings, f"{ns.group}.{AGENT}.0", ns.group, requests, at=0, pending=2, decided="abort"
    )

    gw = await GatewayProcess(ns, tmp_path).start(ready_timeout=90)
    try:
        await assert_exactly_once(ns, threads)
        log = gw.log_path.read_text()
        # its id's last transaction was aborted: discarded at once, no wait for the offsets
        assert "last transaction was aborted; discarded what it may have left pending" in log
        assert "OffsetsUnstable" not in log
    finally:
        await gw.stop()


async def test_a_commit_that_adds_the_partition_heals_a_record_its_producer_left_hanging(
    kafka_bootstrap: str,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    """As after the broker defect: a transaction the producer saw commit, one partition of
    which never got its marker. The heal (a commit of the same producer adding the
    partition, no record in it) makes the record visible, committed as it was meant."""
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    source, output = unique_name("heal-in"), unique_name("heal-out")
    group, transactional_id = unique_name("heal-group"), unique_name("heal-txn")
    await create_topics([source, output])
    tp, out = TopicPartition(source, 0), TopicPartition(output, 0)
    producer = clients.producer(
        settings, transactional_id=transactional_id, enable_idempotence=True
    )
    await producer.start()
    try:
        async with verification_off(settings):
            await producer.begin_transaction()
            # written as if the partition were in the transaction: its coordinator never
            # hears of it, so the commit's markers miss it
            producer._txn_manager._txn_partitions.add(out)
            await producer.send_and_wait(output, b"decided", partition=0)
            await producer.send_offsets_to_transaction({tp: 5}, group)
            await producer.commit_transaction()
        assert await committed(settings, group, tp, 30) == 5
        assert await stable_and_high(kafka_bootstrap, [out]) == {
            out: (0, 1)
        }  # held: read_committed sees nothing

        async with producer.transaction():  # the heal
            hanging.add_partitions(producer, [out])
            await producer.send_offsets_to_transaction({tp: 5}, group)
    finally:
        await producer.stop()
    ((stable, high),) = (await stable_and_high(kafka_bootstrap, [out])).values()
    assert stable == high == 2  # the record and the heal's marker
    reader: AIOKafkaConsumer = clients.consumer(
        settings, isolation_level="read_committed", auto_offset_reset="earliest"
    )
    await reader.start()
    try:
        reader.assign([out])
        batch = await reader.getmany(out, timeout_ms=10_000)
        assert [r.value for r in batch.get(out, [])] == [b"decided"]
    finally:
        await reader.stop()
    assert await committed(settings, group, tp, 30) == 5


async def test_the_coordinator_tells_how_each_ids_last_transaction_ended(
    kafka_bootstrap: str,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    topic = unique_name("states")
    await create_topics([topic])
    ids = {name: unique_name(f"states-{name}") for name in ("committed", "aborted", "open")}
    producers = {
        name: clients.producer(settings, transactional_id=tid, enable_idempotence=True)
        for name, tid in ids.items()
    }
    admin = clients.admin(settings)
    await admin.start()
    try:
        for producer in producers.values():
            await producer.start()
        async with producers["committed"].transaction():
            await producers["committed"].send_and_wait(topic, b"kept")
        await producers["aborted"].begin_transaction()
        await producers["aborted"].send_and_wait(topic, b"dropped")
        await producers["aborted"].abort_transaction()
        await producers["open"].begin_transaction()
        await producers["open"].send_and_wait(topic, b"pending")

        states = await txnstates.last_states(
            admin._client, [*ids.values(), unique_name("none")], timeout_s=10
        )
        assert set(states) == set(ids.values())  # an id never initialised is not described
        assert states[ids["committed"]] in txnstates.COMMITTED
        assert states[ids["aborted"]] in txnstates.ABORTED - {"Ongoing"}
        assert states[ids["open"]] == "Ongoing"
        assert [txnstates.outcome(states[ids[n]]) for n in ("committed", "aborted", "open")] == [
            True,
            False,
            False,
        ]
        assert txnstates.outcome(None) is None and txnstates.outcome("Empty") is None
    finally:
        for producer in producers.values():
            await producer.stop()
        await admin.close()


@pytest.mark.parametrize(("decided", "settled_at"), [("commit", 7), ("abort", 3)])
async def test_a_pairs_checkpoint_settles_pending_offsets_as_their_coordinator_decided(
    decided: str,
    settled_at: int,
    kafka_bootstrap: str,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    """Asked before its producer starts, the pair's transactional id's last transaction
    was committed (its pending offsets are committed as they are: the requests up to
    them were decided, and their outputs may be visible already) or aborted (they are
    discarded: the requests are decided again from the last committed offsets)."""
    settings = Settings(bootstrap_servers=kafka_bootstrap, group_id=unique_name("settle"))
    source, output = unique_name("settle-in"), unique_name("settle-out")
    await create_topics([source, output])
    tp, key = TopicPartition(source, 0), ("bot", 0)
    tid = f"{settings.group_id}.bot.0"
    await hang(settings, tid, settings.group_id, tp, at=3, pending=7, decided=decided)

    consumer: AIOKafkaConsumer = clients.consumer(settings)
    await consumer.start()
    checkpoint = Checkpoint(settings, Metrics(CollectorRegistry()), consumer)
    try:
        await checkpoint.open(key)
        settled = await checkpoint.sweep(key, [TopicPartition(output, 0)], {tp: 3})
        assert settled is not None
        assert settled.committed is (decided == "commit"), settled
        assert settled.partitions == [TopicPartition(output, 0)]
        assert await committed(settings, settings.group_id, tp, 30) == settled_at
        # the pair's producer goes on committing as usual
        (result,) = await checkpoint.commit([Work(key, NoRound(), {tp: 9})])  # type: ignore[arg-type]
        assert result.outcome is Outcome.COMMITTED, result
    finally:
        await checkpoint.close_all()
        await consumer.stop()
    assert await committed(settings, settings.group_id, tp, 30) == 9


async def test_a_gateway_completes_a_hanging_transaction_its_coordinator_committed(
    kafka_bootstrap: str,
    tmp_path,
) -> None:
    """As after an unclean restart of the broker (see `hanging`): a round's outputs are
    visible, its offsets still pending. The next owner commits them; it never decides
    those requests again."""
    ns = Namespace(kafka_bootstrap)
    await ns.create_agent(AGENT, partitions=1)
    threads = ["t0", "t1", "t2", "t3"]
    await produce(ns.bootstrap, ns.events(AGENT), [e for t in threads for e in thread_events(t)])
    await send_requests(ns, threads)
    first = await GatewayProcess(ns, tmp_path, name="first").start(ready_timeout=90)
    try:
        await assert_exactly_once(ns, threads)
    finally:
        await first.stop()
    # every request decided and its output visible; the group's offset of the requests
    # back at 0 with 4 pending, in a transaction of the pair's id its coordinator committed
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    requests = TopicPartition(ns.requests(AGENT), 0)
    await hang(settings, f"{ns.group}.{AGENT}.0", ns.group, requests, at=0, pending=4)

    second = await GatewayProcess(ns, tmp_path, name="second").start(ready_timeout=90)
    try:
        await assert_exactly_once(ns, threads)
        log = second.log_path.read_text()
        assert "which its coordinator committed; completed it as committed" in log
        assert "aborted it" not in log
    finally:
        await second.stop()
    assert await committed(settings, ns.group, requests, 30) == 4


async def test_a_pairs_checkpoint_discards_what_an_aborted_transaction_left_unmarked(
    kafka_bootstrap: str,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    """An aborted transaction whose markers missed a partition, its offsets' marker
    written (so they look stable): the pair, told its id's last transaction was
    aborted, discards the record at once. Left alone, the pair's next commit there
    would have shown it, committed."""
    settings = Settings(bootstrap_servers=kafka_bootstrap, group_id=unique_name("discard"))
    source, output = unique_name("discard-in"), unique_name("discard-out")
    await create_topics([source, output])
    tp, out, key = TopicPartition(source, 0), TopicPartition(output, 0), ("bot", 0)
    producer = clients.producer(
        settings, transactional_id=f"{settings.group_id}.bot.0", enable_idempotence=True
    )
    await producer.start()
    try:
        async with verification_off(settings):
            await producer.begin_transaction()
            producer._txn_manager._txn_partitions.add(out)  # its coordinator never hears of it
            await producer.send_and_wait(output, b"aborted", partition=0)
            await producer.send_offsets_to_transaction({tp: 5}, settings.group_id)
            await producer.abort_transaction()
    finally:
        await producer.stop()
    assert await committed(settings, settings.group_id, tp, 30) is None  # stable: aborted
    assert await stable_and_high(kafka_bootstrap, [out]) == {out: (0, 1)}  # held

    consumer: AIOKafkaConsumer = clients.consumer(settings)
    await consumer.start()
    checkpoint = Checkpoint(settings, Metrics(CollectorRegistry()), consumer)
    try:
        await checkpoint.open(key)
        assert checkpoint.last_aborted(key)
        settled = await checkpoint.sweep(key, [out], {tp: 0})
        assert settled is not None and not settled.committed
        assert not checkpoint.last_aborted(key)  # settled once
    finally:
        await checkpoint.close_all()
        await consumer.stop()
    ((stable, high),) = (await stable_and_high(kafka_bootstrap, [out])).values()
    assert stable == high == 2  # the record and the sweep's ABORT marker
    reader: AIOKafkaConsumer = clients.consumer(
        settings, isolation_level="read_committed", auto_offset_reset="earliest"
    )
    await reader.start()
    try:
        reader.assign([out])
        batch = await reader.getmany(out, timeout_ms=3_000)
        assert batch.get(out, []) == []
    finally:
        await reader.stop()
