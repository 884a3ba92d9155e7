"""Sending a round batched in a transaction (a fake producer: what is sent where, in which order).

The real producer's batch path runs against the broker in tests/integration
(test_pipelining, test_instance_producer) and tests/kafka/test_groupfence.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from gateway.codec.records import OutRecord
from gateway.kafka.exactly_once import transaction
from gateway.kafka.exactly_once.transaction import send_batched, track_topics


class SmallBatch:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: list[bytes | None] = []

    def append(self, *, timestamp: Any, key: Any, value: bytes | None, headers: Any) -> Any:
        if len(self.records) >= self.capacity:
            return None
        self.records.append(value)
        return object()


class Client:
    def __init__(self) -> None:
        self.waited: list[str] = []

    async def _wait_on_metadata(self, topic: str) -> None:
        self.waited.append(topic)


class Producer:
    """Batches of two records; keyed records go where Kafka's default partitioner puts
    them (murmur2 of the key: b"k" to partition 2 of 3, b"kk" to 0)."""

    def __init__(self) -> None:
        self.client = Client()
        self.batches: list[tuple[str, int, list[bytes | None]]] = []

    # "out" has partitions 0-2 (by key), "log" partition 0 only
    _metadata = SimpleNamespace(
        partitions_for_topic=lambda topic: {0, 1, 2} if topic == "out" else {0},
        available_partitions_for_topic=lambda topic: {0, 1, 2} if topic == "out" else {0},
    )

    def create_batch(self) -> SmallBatch:
        return SmallBatch(2)

    async def send_batch(self, batch: SmallBatch, topic: str, *, partition: int) -> Any:
        self.batches.append((topic, partition, batch.records))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def test_records_go_in_one_batch_per_partition_in_order_full_ones_sent_first() -> None:
    producer = Producer()
    records = [
        OutRecord("out", b"k", b"1"),  # partition 2 (by key)
        OutRecord("out", b"kk", b"2"),  # partition 0
        OutRecord("out", b"k", b"3"),
        OutRecord("log", b"t", b"4", partition=0),  # a partition of its own
        OutRecord("out", b"k", b"5"),  # partition 2's first batch is full
        OutRecord("log", b"t", None, partition=0),  # a tombstone
        OutRecord("log", b"kk", b"6"),  # a topic of one partition: that one
    ]
    delivered = await send_batched(producer, records)  # type: ignore[arg-type]
    assert sorted(producer.client.waited) == ["log", "out"]
    # full batches are sent as the next record of their partition comes
    assert producer.batches[:2] == [("out", 2, [b"1", b"3"]), ("log", 0, [b"4", None])]
    assert sorted(producer.batches[2:]) == [
        ("log", 0, [b"6"]),
        ("out", 0, [b"2"]),
        ("out", 2, [b"5"]),
    ]
    assert len(delivered) == len(producer.batches) == 5
    assert all(d.done() for d in delivered)


async def test_nothing_to_send_sends_nothing() -> None:
    producer = Producer()
    assert await send_batched(producer, []) == []  # type: ignore[arg-type]
    assert producer.batches == []


# --- tracking the topics a transaction writes -------------------------------------------------


class Tracking:
    """A producer's metadata: what it tracks, what it shows; its updates never end here."""

    def __init__(self, shown: set[str]) -> None:
        self._topics: set[str] = set()
        self.pending: list[asyncio.Future[bool]] = []
        self.cluster = SimpleNamespace(partitions_for_topic=lambda t: {0} if t in shown else None)

    def add_topic(self, topic: str) -> asyncio.Future[bool]:
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if topic in self._topics:
            done.set_result(True)
        else:
            self._topics.add(topic)
            self.pending.append(done)  # an update that covers it, still to come
        return done

    async def force_metadata_update(self) -> bool:
        await asyncio.Event().wait()  # never
        return True


async def test_topics_the_metadata_shows_are_tracked_without_waiting_for_an_update(
    monkeypatch, caplog
) -> None:
    """A fleet's first transactions each wrote some agent's topics for the first time, and
    each waited for a metadata update over every tracked topic before sending."""
    monkeypatch.setattr(transaction, "WRITTEN_TOPICS_METADATA_S", 0.01)
    client = Tracking(shown={"a.run-requests", "a.changelog"})
    await track_topics(SimpleNamespace(client=client), {"a.run-requests", "a.changelog"})
    assert client._topics == {"a.run-requests", "a.changelog"}  # tracked from now on
    assert all(not f.done() for f in client.pending)  # the update was not waited for
    assert "metadata update for written topics failed" not in caplog.text


async def test_a_topic_the_metadata_does_not_show_yet_is_waited_for(monkeypatch, caplog) -> None:
    monkeypatch.setattr(transaction, "WRITTEN_TOPICS_METADATA_S", 0.01)
    client = Tracking(shown={"a.run-requests"})
    await track_topics(SimpleNamespace(client=client), {"a.run-requests", "fresh-replies"})
    assert client._topics == {"a.run-requests", "fresh-replies"}
    # it waited (here until its bound, as this update never comes), then went on
    assert "metadata update for written topics failed" in caplog.text


# --- an ACL revoked under a transaction: handled where Kafka refuses it --------------


def in_transaction() -> Any:
    from aiokafka.producer.transaction_manager import TransactionManager

    manager = TransactionManager("gw.support.0", 60000)
    manager.set_pid_and_epoch(7, 0)
    manager.begin_transaction()
    transaction.watch_transaction(SimpleNamespace(_txn_manager=manager))  # type: ignore[arg-type]
    return manager


async def test_a_txn_offset_commit_refused_on_a_topic_fails_the_transaction_naming_it() -> None:
    """aiokafka's own handler raises this in the sender routine, ending the producer."""
    from aiokafka.errors import TopicAuthorizationFailedError
    from aiokafka.producer.sender import TxnOffsetCommitHandler
    from aiokafka.producer.transaction_manager import TransactionState

    from gateway.kafka.wire import clients

    manager = in_transaction()
    sender = SimpleNamespace(_txn_manager=manager, _retry_backoff=0.1)
    refused = TopicAuthorizationFailedError.errno
    response = SimpleNamespace(errors=[("agui.support.requests", [(0, refused)])])
    with_aiokafkas = TxnOffsetCommitHandler(sender, {}, "gw")
    try:
        with_aiokafkas.handle_response(response)
        raise AssertionError("aiokafka's handler handles it now: drop ours")
    except TopicAuthorizationFailedError:
        pass  # what ended the sender routine

    assert transaction._OffsetCommitHandler(sender, {}, "gw").handle_response(response) is None
    assert manager.state == TransactionState.ABORTABLE_ERROR
    error = manager.wait_for_transaction_end().exception()
    assert clients.describe_denial(error) == ("Read", "topic agui.support.requests")


async def test_a_failed_transactions_error_is_read_where_it_is_raised_only(caplog) -> None:
    """The waiter aiokafka drops unread at the abort (asyncio logged it at collection)."""
    import gc

    from aiokafka.errors import GroupAuthorizationFailedError

    manager = in_transaction()
    manager.error_transaction(GroupAuthorizationFailedError("gw"))
    manager.aborting_transaction()  # replaces the failed waiter, unread
    await asyncio.sleep(0)  # the done callbacks run
    gc.collect()
    assert "exception was never retrieved" not in caplog.text


async def test_a_delivery_nobody_awaits_any_more_is_read_when_it_fails(caplog) -> None:
    import gc

    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    transaction.watch_failures([future])
    future.set_exception(RuntimeError("refused"))
    await asyncio.sleep(0)
    del future
    gc.collect()
    assert "exception was never retrieved" not in caplog.text


async def test_a_rewind_skips_a_partition_revoked_while_its_offset_was_looked_up() -> None:
    """A rebalance (the topic's Read revoked, say) while `committed` is awaited: aiokafka
    asserts at a seek on a partition no longer assigned, which failed the commit."""
    from aiokafka import TopicPartition

    from gateway.kafka.exactly_once.groupoffsets import rewind

    events = TopicPartition("agui.support.events", 0)
    tp = TopicPartition("agui.support.requests", 0)

    class Consumer:
        assigned = {events, tp}
        seeks: list[TopicPartition] = []

        def assignment(self) -> set[TopicPartition]:
            return set(self.assigned)

        async def committed(self, partition: TopicPartition) -> int:
            self.assigned = set()  # revoked meanwhile
            return 5

        def seek(self, partition: TopicPartition, offset: int) -> None:
            assert partition in self.assigned, "aiokafka: assignment is None"
            self.seeks.append(partition)

    consumer = Consumer()
    await rewind(consumer, [tp], {})  # type: ignore[arg-type]
    assert consumer.seeks == []
    # and a partition after one whose offset was looked up (the assignment read once)
    consumer.assigned = {events, tp}
    await rewind(consumer, [events, tp], {tp: 3})  # type: ignore[arg-type]
    assert consumer.seeks == []
