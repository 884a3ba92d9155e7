"""The outbox's transactions on the real broker: the group's offset only when it moved.

A transaction that only starts a run (its marker made durable before the agent is
called) leaves the committable offset where it was; it must not commit it again (two
of its five round trips). Whatever the transactions skip, the group's offset and the
last marker's `next` end equal.
"""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client import CollectorRegistry

from gateway.bridge.ledger import MarkerState, PartitionLedger, RunRequest
from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.outbox import Outbox

pytestmark = pytest.mark.integration


async def test_a_transaction_commits_the_groups_offset_only_when_it_moved(
    kafka_bootstrap: str, create_topics
) -> None:
    prefix = "it" + uuid.uuid4().hex[:10]
    requests, events, runs = (f"{prefix}.{name}" for name in ("run-requests", "events", "runs"))
    await create_topics([requests, events, runs])
    group = f"{prefix}-bridge"
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        transactional_id=f"{prefix}-outbox",
        enable_idempotence=True,
    )
    offsets_sent: list[int] = []
    send_offsets = producer.send_offsets_to_transaction

    async def spy(offsets: dict, group_id: str) -> None:
        offsets_sent.extend(o.offset for o in offsets.values())
        await send_offsets(offsets, group_id)

    producer.send_offsets_to_transaction = spy  # type: ignore[method-assign]
    await producer.start()
    tp = TopicPartition(requests, 0)
    ledger = PartitionLedger(MarkerState(0))
    outbox = Outbox(
        producer,
        ledger,
        tp=tp,
        events_topic=events,
        runs_topic=runs,
        group_id=group,
        capacity_bytes=1 << 20,
        metrics=BridgeMetrics(CollectorRegistry()),
    )
    outbox.start()
    try:
        first, second = RunRequest(0, b"t1", b"{}"), RunRequest(1, b"t2", b"{}")
        for request in (first, second):
            assert ledger.accept(request)
        ledger.start(first)
        await outbox.commit()  # the outbox's first: its offset is written whatever it is
        assert offsets_sent == [0]
        ledger.start(second)
        await outbox.commit()  # a run started, none ended: the offset did not move
        await outbox.emit(b"t1", b'{"type":"RUN_STARTED"}', [])
        await outbox.commit()  # events alone: nor here
        assert offsets_sent == [0]
        ledger.end(0)
        await outbox.commit()  # the first run ended: the offset moved to the second's
        ledger.end(1)
        await outbox.commit()
        assert offsets_sent == [0, 1, 2]
    finally:
        await outbox.stop()
        await producer.stop()

    reader = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await reader.start()
    try:
        assert await reader.committed(tp) == 2
        marker_tp = TopicPartition(runs, 0)
        reader.assign([marker_tp])
        end = (await reader.end_offsets([marker_tp]))[marker_tp]
        markers = []
        while await reader.position(marker_tp) < end:
            batch = await reader.getmany(marker_tp, timeout_ms=1000)
            markers += [orjson.loads(r.value) for r in batch.get(marker_tp, [])]
        assert len(markers) == 5 and markers[-1]["next"] == 2 and markers[-1]["started"] == []
        assert [m["next"] for m in markers] == [0, 0, 0, 1, 2]
    finally:
        await reader.stop()


async def test_what_arrives_within_the_linger_shares_one_transaction(
    kafka_bootstrap: str, create_topics
) -> None:
    prefix = "it" + uuid.uuid4().hex[:10]
    requests, events, runs = (f"{prefix}.{name}" for name in ("run-requests", "events", "runs"))
    await create_topics([requests, events, runs])
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        transactional_id=f"{prefix}-outbox",
        enable_idempotence=True,
    )
    commits = 0
    commit_transaction = producer.commit_transaction

    async def counted() -> None:
        nonlocal commits
        commits += 1
        await commit_transaction()

    producer.commit_transaction = counted  # type: ignore[method-assign]
    await producer.start()
    ledger = PartitionLedger(MarkerState(0))
    outbox = Outbox(
        producer,
        ledger,
        tp=TopicPartition(requests, 0),
        events_topic=events,
        runs_topic=runs,
        group_id=f"{prefix}-bridge",
        capacity_bytes=1 << 20,
        metrics=BridgeMetrics(CollectorRegistry()),
        linger_s=0.5,  # far longer than the steps below take
    )
    outbox.start()
    try:
        run = RunRequest(0, b"t1", b"{}")
        assert ledger.accept(run)
        ledger.start(run)
        await outbox.commit()
        assert commits == 1
        # a run's events, then its end, handed in one after another: one transaction
        for event in (b'{"type":"RUN_STARTED"}', b'{"type":"RUN_FINISHED"}'):
            await outbox.emit(b"t1", event, [])
            await asyncio.sleep(0.01)  # the outbox's loop is woken in between
        ledger.end(0)
        await outbox.commit()
        assert commits == 2
        assert ledger.committed_next == 1
    finally:
        await outbox.stop()
        await producer.stop()
