"""Sending a round batched in a transaction (a fake producer: what is sent where, in which order).

The real producer's batch path runs against the broker in tests/integration
(test_pipelining, test_instance_producer) and tests/kafka/test_groupfence.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from gateway.codec.records import OutRecord
from gateway.kafka.transaction import send_batched


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
    """Batches of two records; keyed records go to partition len(key) % 3."""

    def __init__(self) -> None:
        self.client = Client()
        self.batches: list[tuple[str, int, list[bytes | None]]] = []

    # "out" has partitions 0-2 (by key: len(key) % 3), "log" partition 0 only
    _metadata = SimpleNamespace(
        partitions_for_topic=lambda topic: {0, 1, 2} if topic == "out" else {0},
        available_partitions_for_topic=lambda topic: {0, 1, 2} if topic == "out" else {0},
    )

    @staticmethod
    def _partitioner(key: bytes, every: list[int], available: list[int]) -> int:
        return every[len(key) % len(every)]

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
        OutRecord("out", b"k", b"1"),  # partition 1 (by key)
        OutRecord("out", b"kk", b"2"),  # partition 2
        OutRecord("out", b"k", b"3"),
        OutRecord("log", b"t", b"4", partition=0),  # a partition of its own
        OutRecord("out", b"k", b"5"),  # partition 1's first batch is full
        OutRecord("log", b"t", None, partition=0),  # a tombstone
        OutRecord("log", b"kk", b"6"),  # a topic of one partition: that one
    ]
    delivered = await send_batched(producer, records)  # type: ignore[arg-type]
    assert sorted(producer.client.waited) == ["log", "out"]
    # full batches are sent as the next record of their partition comes
    assert producer.batches[:2] == [("out", 1, [b"1", b"3"]), ("log", 0, [b"4", None])]
    assert sorted(producer.batches[2:]) == [
        ("log", 0, [b"6"]),
        ("out", 1, [b"5"]),
        ("out", 2, [b"2"]),
    ]
    assert len(delivered) == len(producer.batches) == 5
    assert all(d.done() for d in delivered)


async def test_nothing_to_send_sends_nothing() -> None:
    producer = Producer()
    assert await send_batched(producer, []) == []  # type: ignore[arg-type]
    assert producer.batches == []
