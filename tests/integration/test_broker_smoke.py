"""Smoke tests against the real local broker (deploy/kafka.sh) with aiokafka.

They prove that the pinned broker serves every request the gateway relies on:
topic creation with configs, keyed produce with headers, consumer groups with
commits, idempotent and transactional produce (commit and abort),
read_committed consumption, consume-transform-produce with
send_offsets_to_transaction, and DescribeConfigs. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from .conftest import CreateTopics

OP_TIMEOUT_S = 30.0  # one client operation (start, send, commit, ...)
CONSUME_TIMEOUT_S = 30.0  # collecting the records a test expects

Client = TypeVar("Client", AIOKafkaProducer, AIOKafkaConsumer)


@asynccontextmanager
async def running(client: Client) -> AsyncIterator[Client]:
    """Start an aiokafka client and always stop it, both bounded in time."""
    await asyncio.wait_for(client.start(), OP_TIMEOUT_S)
    try:
        yield client
    finally:
        await asyncio.wait_for(client.stop(), OP_TIMEOUT_S)


async def bounded(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, OP_TIMEOUT_S)


async def consume_until(
    consumer: AIOKafkaConsumer,
    done: Callable[[list[ConsumerRecord]], bool],
    timeout: float = CONSUME_TIMEOUT_S,
) -> list[ConsumerRecord]:
    """Collect records until `done(records)` holds; fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    records: list[ConsumerRecord] = []
    while not done(records):
        remaining = deadline - loop.time()
        if remaining <= 0:
            pytest.fail(
                f"timed out after {timeout} s; got {len(records)} records: "
                f"{[(r.partition, r.offset, r.key, r.value) for r in records][:20]}"
            )
        batches = await asyncio.wait_for(
            consumer.getmany(timeout_ms=int(min(remaining, 1.0) * 1000)), remaining + 10
        )
        for batch in batches.values():
            records.extend(batch)
    return records


def values(records: Iterable[ConsumerRecord]) -> list[bytes]:
    return [r.value for r in records]


def assigned_consumer(
    bootstrap: str, topic: str, partitions: int, **config: Any
) -> AIOKafkaConsumer:
    """A consumer without group that reads `topic` from the beginning."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=20000,
        **config,
    )
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    return consumer


def transactional_producer(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        enable_idempotence=True,
        acks="all",
        request_timeout_ms=20000,
    )


# --------------------------------------------------------------------------


def test_broker_process_is_the_kafka_jvm(kafka_bootstrap: str, kafka_state: Path) -> None:
    pid_file = kafka_state / "kafka.pid"
    assert pid_file.is_file(), f"no pid file at {pid_file}"
    pid = int(pid_file.read_text().strip())
    raw_argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    argv = [a.decode() for a in raw_argv if a]
    assert Path(argv[0]).name == "java", argv[:3]
    assert "kafka.Kafka" in argv, argv
    # the broker reads the properties deploy/kafka.sh wrote for this port
    props = argv[argv.index("kafka.Kafka") + 1]
    assert Path(props) == kafka_state / "server.properties"
    text = Path(props).read_text()
    assert f"advertised.listeners=PLAINTEXT://{kafka_bootstrap}\n" in text
    assert "auto.create.topics.enable=false\n" in text


async def test_topics_are_not_auto_created(
    kafka_bootstrap: str, kafka_admin: AIOKafkaAdminClient, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("smoke-absent")
    (described,) = await bounded(kafka_admin.describe_topics([topic]))
    assert described["error_code"] == 3, described  # UNKNOWN_TOPIC_OR_PARTITION
    assert topic not in await bounded(kafka_admin.list_topics())


async def test_produce_consume_roundtrip_keys_headers_values(
    kafka_bootstrap: str, create_topics: CreateTopics, unique_name: Callable[[str], str]
) -> None:
    (topic,) = await create_topics([unique_name("smoke-roundtrip")], partitions=3)
    sent: dict[tuple[int, int], tuple[bytes, bytes, tuple[tuple[str, bytes], ...]]] = {}
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True
    )
    async with running(producer):
        for i in range(30):
            key = f"thread-{i % 10}".encode()
            value = f'{{"seq": {i}, "text": "h\u00e9llo"}}'.encode()
            headers = [("event-type", b"TEXT_MESSAGE_CONTENT"), ("seq", str(i).encode())]
            meta = await bounded(producer.send_and_wait(topic, value, key=key, headers=headers))
            assert meta.topic == topic
            sent[(meta.partition, meta.offset)] = (key, value, tuple(headers))

    partitions_used = {p for p, _ in sent}
    assert len(partitions_used) > 1, "10 distinct keys should spread over 3 partitions"
    for key in {k for k, _, _ in sent.values()}:
        assert len({p for (p, _), (k, _, _) in sent.items() if k == key}) == 1, key

    async with running(assigned_consumer(kafka_bootstrap, topic, 3)) as consumer:
        records = await consume_until(consumer, lambda rs: len(rs) >= len(sent))
    received = {
        (r.partition, r.offset): (r.key, r.value, tuple((k, bytes(v)) for k, v in r.headers))
        for r in records
    }
    assert received == sent


async def test_consumer_group_commit_and_resume(
    kafka_bootstrap: str,
    kafka_admin: AIOKafkaAdminClient,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    (topic,) = await create_topics([unique_name("smoke-group")], partitions=3)
    group = unique_name("smoke-group")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")

    def group_consumer() -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=200,  # exercise Heartbeat within the test
            request_timeout_ms=20000,
        )
        return consumer

    async with running(producer):
        for i in range(12):
            await bounded(producer.send_and_wait(topic, f"first-{i}".encode(), key=str(i).encode()))

        async with running(group_consumer()) as consumer:
            records = await consume_until(consumer, lambda rs: len(rs) >= 12)
            assert sorted(values(records)) == sorted(f"first-{i}".encode() for i in range(12))
            await bounded(consumer.commit())
            committed = {
                p: await bounded(consumer.committed(TopicPartition(topic, p))) for p in range(3)
            }

        expected: dict[int, int] = {}
        for r in records:
            expected[r.partition] = max(expected.get(r.partition, 0), r.offset + 1)
        assert {p: o for p, o in committed.items() if o is not None} == expected
        offsets = await bounded(kafka_admin.list_consumer_group_offsets(group))
        assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == (
            expected
        )

        await bounded(producer.send_and_wait(topic, b"second", key=b"0"))

    # a new member of the group resumes at the committed offsets: only the new record
    async with running(group_consumer()) as consumer:
        records = await consume_until(consumer, lambda rs: b"second" in values(rs))
        # give anything that should not be there a chance to show up
        more = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 15)
        records += [r for batch in more.values() for r in batch]
    assert values(records) == [b"second"]


async def test_committed_transaction_is_read_committed(
    kafka_bootstrap: str, create_topics: CreateTopics, unique_name: Callable[[str], str]
) -> None:
    (topic,) = await create_topics([unique_name("smoke-txn-commit")], partitions=1)
    producer = transactional_producer(kafka_bootstrap, unique_name("smoke-txn"))
    async with running(producer):
        async with producer.transaction():
            for i in range(3):
                await bounded(producer.send(topic, f"committed-{i}".encode(), key=b"k"))
    consumer = assigned_consumer(kafka_bootstrap, topic, 1, isolation_level="read_committed")
    async with running(consumer):
        records = await consume_until(consumer, lambda rs: len(rs) >= 3)
        end = await bounded(consumer.end_offsets([TopicPartition(topic, 0)]))
    assert values(records) == [f"committed-{i}".encode() for i in range(3)]
    # 3 records + the commit marker: the end offset (LSO) is past the control record
    assert end[TopicPartition(topic, 0)] == 4


async def test_aborted_transaction_is_not_read_committed(
    kafka_bootstrap: str, create_topics: CreateTopics, unique_name: Callable[[str], str]
) -> None:
    (topic,) = await create_topics([unique_name("smoke-txn-abort")], partitions=1)
    producer = transactional_producer(kafka_bootstrap, unique_name("smoke-txn"))
    async with running(producer):
        await bounded(producer.begin_transaction())
        for i in range(3):
            meta = await bounded(producer.send_and_wait(topic, f"aborted-{i}".encode()))
            assert meta.offset == i  # really written to the log before the abort
        await bounded(producer.abort_transaction())

        # a committed marker after the aborted records: read_committed must reach it
        async with producer.transaction():
            await bounded(producer.send(topic, b"marker"))

    committed_reader = assigned_consumer(
        kafka_bootstrap, topic, 1, isolation_level="read_committed"
    )
    async with running(committed_reader):
        seen = await consume_until(committed_reader, lambda rs: b"marker" in values(rs))
    assert values(seen) == [b"marker"]

    # the aborted records are in the log: a read_uncommitted reader sees them
    uncommitted_reader = assigned_consumer(
        kafka_bootstrap, topic, 1, isolation_level="read_uncommitted"
    )
    async with running(uncommitted_reader):
        raw = await consume_until(uncommitted_reader, lambda rs: b"marker" in values(rs))
    assert values(raw) == [b"aborted-0", b"aborted-1", b"aborted-2", b"marker"]


async def test_consume_transform_produce_commits_group_offsets_in_transaction(
    kafka_bootstrap: str,
    kafka_admin: AIOKafkaAdminClient,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    source, sink = await create_topics(
        [unique_name("smoke-ctp-in"), unique_name("smoke-ctp-out")], partitions=3
    )
    group = unique_name("smoke-ctp")
    plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    txn = transactional_producer(kafka_bootstrap, unique_name("smoke-ctp"))
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        heartbeat_interval_ms=200,
        request_timeout_ms=20000,
    )

    def next_offsets(records: list[ConsumerRecord]) -> dict[TopicPartition, int]:
        offsets: dict[TopicPartition, int] = {}
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            offsets[tp] = max(offsets.get(tp, 0), r.offset + 1)
        return offsets

    async def group_offsets() -> dict[TopicPartition, int]:
        fetched = await bounded(kafka_admin.list_consumer_group_offsets(group))
        return {
            tp: om.offset for tp, om in fetched.items() if tp.topic == source and om.offset >= 0
        }

    async def wait_for_group_offsets(expected: dict[TopicPartition, int]) -> None:
        # Offsets committed in a transaction become visible once the coordinator
        # has written the commit markers, shortly after EndTxn returns.
        deadline = asyncio.get_running_loop().time() + CONSUME_TIMEOUT_S
        while (current := await group_offsets()) != expected:
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail(f"group offsets {current} never became {expected}")
            await asyncio.sleep(0.1)

    def transformed(records: list[ConsumerRecord]) -> list[bytes]:
        return [r.value.replace(b"in-", b"out-") for r in records]

    async with running(plain), running(txn), running(consumer):
        for i in range(9):
            await bounded(plain.send_and_wait(source, f"in-{i}".encode(), key=str(i).encode()))
        first = await consume_until(consumer, lambda rs: len(rs) >= 9)
        assert sorted(values(first)) == sorted(f"in-{i}".encode() for i in range(9))

        # round 1: transform, produce and commit the input offsets atomically
        committed_1 = next_offsets(first)
        async with txn.transaction():
            for r, value in zip(first, transformed(first), strict=True):
                await bounded(txn.send(sink, value, key=r.key))
            await bounded(txn.send_offsets_to_transaction(committed_1, group))
        await wait_for_group_offsets(committed_1)
        for tp, offset in committed_1.items():
            assert await bounded(consumer.committed(tp)) == offset

        # round 2: the same, aborted: neither the output nor the offsets may stick
        for i in range(9, 12):
            await bounded(plain.send_and_wait(source, f"in-{i}".encode(), key=str(i).encode()))
        second = await consume_until(consumer, lambda rs: len(rs) >= 3)
        assert sorted(values(second)) == sorted(f"in-{i}".encode() for i in range(9, 12))
        committed_2 = next_offsets(first + second)
        assert committed_2 != committed_1
        await bounded(txn.begin_transaction())
        for r, value in zip(second, transformed(second), strict=True):
            await bounded(txn.send(sink, value, key=r.key))
        await bounded(txn.send_offsets_to_transaction(committed_2, group))
        await bounded(txn.abort_transaction())
        for _ in range(10):
            assert await group_offsets() == committed_1
            await asyncio.sleep(0.1)

        # round 3: rewind to the committed offsets and redo round 2, committed.
        # The coordinator only lets this transaction start once the abort is
        # complete, so the offsets checked above were really discarded.
        for tp in consumer.assignment():
            consumer.seek(tp, committed_1.get(tp, 0))
        retry = await consume_until(consumer, lambda rs: len(rs) >= 3)
        assert sorted(values(retry)) == sorted(values(second))
        async with txn.transaction():
            for r, value in zip(retry, transformed(retry), strict=True):
                await bounded(txn.send(sink, value, key=r.key))
            await bounded(txn.send_offsets_to_transaction(next_offsets(first + retry), group))
        await wait_for_group_offsets(committed_2)

    # read_committed: every output exactly once, the aborted copies invisible
    expected_out = sorted(f"out-{i}".encode() for i in range(12))
    reader = assigned_consumer(kafka_bootstrap, sink, 3, isolation_level="read_committed")
    async with running(reader):
        outputs = await consume_until(reader, lambda rs: len(rs) >= 12)
        extra = await asyncio.wait_for(reader.getmany(timeout_ms=1000), 15)
        outputs += [r for batch in extra.values() for r in batch]
    assert sorted(values(outputs)) == expected_out

    # read_uncommitted: the aborted copies are in the log
    raw_reader = assigned_consumer(kafka_bootstrap, sink, 3, isolation_level="read_uncommitted")
    async with running(raw_reader):
        raw = await consume_until(raw_reader, lambda rs: len(rs) >= 15)
    assert sorted(values(raw)) == sorted(expected_out + [f"out-{i}".encode() for i in range(9, 12)])


async def test_compacted_topic_config(
    kafka_bootstrap: str,
    kafka_admin: AIOKafkaAdminClient,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    compacted = unique_name("smoke-compact")
    regular = unique_name("smoke-delete")
    await create_topics([compacted], partitions=1, configs={"cleanup.policy": "compact"})
    await create_topics([regular], partitions=1)

    async def cleanup_policy(topic: str) -> str:
        responses = await bounded(
            kafka_admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, {"cleanup.policy": None})]
            )
        )
        entries = {}
        for response in responses:
            for resource in response.to_object()["resources"]:
                assert resource["error_code"] == 0, resource
                if resource["resource_name"] == topic:
                    for entry in resource["config_entries"]:
                        entries[entry["config_names"]] = entry["config_value"]
        return entries["cleanup.policy"]

    assert await cleanup_policy(compacted) == "compact"
    assert await cleanup_policy(regular) == "delete"
