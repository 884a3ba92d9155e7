"""KIP-447 fencing by the consumer group, against the real broker.

TxnOffsetCommit v3 (generation, member id) and OffsetFetch v7 (require_stable):
offsets committed in a transaction become visible on commit; a zombie whose
group generation is gone cannot commit and its output is never read by
read_committed readers; a new owner's offset fetch waits for a pending
transaction instead of reading offsets it may still commit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gateway.kafka.exactly_once import groupfence, groupoffsets
from gateway.kafka.exactly_once.groupfence import GroupFenced, GroupMetadata
from gateway.kafka.exactly_once.groupoffsets import OffsetsUnstable
from gateway.kafka.wire import clients
from gateway.settings import Settings
from tests.integration.conftest import CreateTopics

pytestmark = pytest.mark.integration

WAIT_S = 60.0


class Topics:
    def __init__(self, source: str, output: str, group: str) -> None:
        self.source = source
        self.output = output
        self.group = group
        self.tp = TopicPartition(source, 0)
        self.out = TopicPartition(output, 0)


@pytest.fixture
async def setup(
    kafka_bootstrap: str,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> AsyncIterator[tuple[Settings, Topics, Callable[[str], str]]]:
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    topics = Topics(unique_name("gf-in"), unique_name("gf-out"), unique_name("gf-group"))
    await create_topics([topics.source, topics.output])
    plain = clients.producer(settings)
    await plain.start()
    try:
        for i in range(3):
            await plain.send_and_wait(topics.source, f"in-{i}".encode(), partition=0)
    finally:
        await plain.stop()
    yield settings, topics, unique_name


async def member(settings: Settings, topics: Topics) -> AIOKafkaConsumer:
    consumer = clients.consumer(
        settings,
        topics.source,
        group_id=topics.group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await consumer.start()
    return consumer


async def until_members(
    consumers: list[AIOKafkaConsumer], done: Callable[[list[GroupMetadata]], bool]
) -> list[GroupMetadata]:
    """Poll every consumer (which drives their rebalances) until `done(metadata)`."""
    deadline = time.monotonic() + WAIT_S
    while True:
        await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))
        try:
            metadata = [groupfence.group_metadata(c) for c in consumers]
        except GroupFenced:
            metadata = []
        if metadata and done(metadata):
            return metadata
        if time.monotonic() > deadline:
            raise TimeoutError(f"the group did not settle: {metadata}")


async def transactional(settings: Settings, transactional_id: str) -> AIOKafkaProducer:
    producer = clients.producer(settings, transactional_id=transactional_id)
    await producer.start()
    return producer


async def committed_output(settings: Settings, topics: Topics, expected_count: int) -> list[bytes]:
    """The output a read_committed reader sees, once it has seen `expected_count` records
    and has read up to the partition's last stable offset (nothing open before it)."""
    reader = clients.consumer(
        settings, isolation_level="read_committed", auto_offset_reset="earliest"
    )
    await reader.start()
    try:
        reader.assign([topics.out])
        await reader.seek_to_beginning(topics.out)
        seen: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(seen) < expected_count and time.monotonic() < deadline:
            batch = await reader.getmany(topics.out, timeout_ms=200)
            seen.extend(r.value for r in batch.get(topics.out, []) if r.value is not None)
        # one more look, so an extra record would show
        batch = await reader.getmany(topics.out, timeout_ms=500)
        seen.extend(r.value for r in batch.get(topics.out, []) if r.value is not None)
        return seen
    finally:
        await reader.stop()


async def test_offsets_sent_in_a_transaction_become_visible_on_commit(setup) -> None:
    settings, topics, unique = setup
    consumer = await member(settings, topics)
    producer = await transactional(settings, unique("gf-txn"))
    try:
        [meta] = await until_members([consumer], lambda m: m[0].generation_id > 0)
        assert meta.group_id == topics.group and meta.member_id
        before = await groupoffsets.fetch_committed_offsets(consumer, [topics.tp], timeout_s=WAIT_S)
        assert before == {topics.tp: None}

        async with producer.transaction():
            await producer.send(topics.output, b"out", partition=0)
            await groupfence.send_offsets_to_transaction(producer, {topics.tp: 3}, meta)

        after = await groupoffsets.fetch_committed_offsets(consumer, [topics.tp], timeout_s=WAIT_S)
        assert after == {topics.tp: 3}
        assert await consumer.committed(topics.tp) == 3  # aiokafka's own fetch agrees
        assert await committed_output(settings, topics, 1) == [b"out"]
    finally:
        await producer.stop()
        await consumer.stop()


@pytest.mark.parametrize(
    ("how", "reason"),
    [("new-generation", "ILLEGAL_GENERATION"), ("left-the-group", "UNKNOWN_MEMBER_ID")],
)
async def test_a_zombie_of_an_old_generation_cannot_commit_and_its_output_stays_unseen(
    setup, how: str, reason: str
) -> None:
    settings, topics, unique = setup
    first = await member(settings, topics)
    zombie = await transactional(settings, unique("gf-zombie"))
    owner = await transactional(settings, unique("gf-owner"))
    second: AIOKafkaConsumer | None = None
    try:
        [old] = await until_members([first], lambda m: m[0].generation_id > 0)

        # the first member's work under its generation: output written, offsets pending
        await zombie.begin_transaction()
        await zombie.send_and_wait(topics.output, b"zombie", partition=0)

        # a second member joins: the group moves to a new generation
        second = await member(settings, topics)
        if how == "new-generation":
            members = [first, second]
        else:
            members = [second]
            await until_members(
                [first, second],
                lambda m: m[0].generation_id == m[1].generation_id > old.generation_id,
            )
            await first.stop()  # it leaves: the group rebalances again without it
        new = await until_members(
            members,
            lambda m: (
                all(x.generation_id > old.generation_id for x in m)
                and len({x.generation_id for x in m}) == 1
                and (how == "new-generation" or second.assignment() == {topics.tp})
            ),
        )
        assert new[-1].generation_id > old.generation_id

        with pytest.raises(GroupFenced, match="fenced by the group") as refused:
            await groupfence.send_offsets_to_transaction(zombie, {topics.tp: 3}, old)
        assert refused.value.reason == reason, refused.value
        await zombie.abort_transaction()

        # nothing of the zombie is committed: the new owner starts from scratch
        stable = await groupoffsets.fetch_committed_offsets(second, [topics.tp], timeout_s=WAIT_S)
        assert stable == {topics.tp: None}
        current = groupfence.group_metadata(second)
        async with owner.transaction():
            await owner.send(topics.output, b"owner", partition=0)
            await groupfence.send_offsets_to_transaction(owner, {topics.tp: 3}, current)

        # the zombie's producer is still usable, and its aborted output never resurfaces
        async with zombie.transaction():
            await zombie.send(topics.output, b"zombie-later", partition=0)

        assert await committed_output(settings, topics, 2) == [b"owner", b"zombie-later"]
        after = await groupoffsets.fetch_committed_offsets(second, [topics.tp], timeout_s=WAIT_S)
        assert after == {topics.tp: 3}
    finally:
        await zombie.stop()
        await owner.stop()
        if second is not None:
            await second.stop()
        await first.stop()


async def test_a_stable_fetch_waits_for_the_pending_transaction(setup, caplog) -> None:
    settings, topics, unique = setup
    consumer = await member(settings, topics)
    producer = await transactional(settings, unique("gf-pending"))
    try:
        [meta] = await until_members([consumer], lambda m: m[0].generation_id > 0)
        await producer.begin_transaction()
        await producer.send_and_wait(topics.output, b"pending", partition=0)
        await groupfence.send_offsets_to_transaction(producer, {topics.tp: 2}, meta)

        # while the transaction is open its offsets are unstable, never read as committed
        with pytest.raises(OffsetsUnstable, match="UNSTABLE_OFFSET_COMMIT"):
            await groupoffsets.fetch_committed_offsets(consumer, [topics.tp], timeout_s=0.5)

        caplog.set_level(logging.DEBUG, logger="gateway.kafka.exactly_once.groupfence")
        caplog.clear()
        fetch = asyncio.ensure_future(
            groupoffsets.fetch_committed_offsets(consumer, [topics.tp], timeout_s=WAIT_S)
        )
        deadline = time.monotonic() + WAIT_S
        while not any("not stable yet" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the fetch never met the pending transaction"
            assert not fetch.done(), fetch
            await asyncio.sleep(0.05)
        assert not fetch.done()

        await producer.commit_transaction()
        assert await fetch == {topics.tp: 2}
    finally:
        await producer.stop()
        await consumer.stop()


async def test_a_member_without_a_generation_is_refused_before_sending(setup) -> None:
    settings, topics, unique = setup
    producer = await transactional(settings, unique("gf-none"))
    try:
        await producer.begin_transaction()
        stale = GroupMetadata(topics.group, -1, "")
        with pytest.raises(GroupFenced, match="not a member"):
            await groupfence.send_offsets_to_transaction(producer, {topics.tp: 1}, stale)
        await producer.abort_transaction()
    finally:
        await producer.stop()


async def test_a_static_member_replaced_under_its_instance_id_is_fenced(setup) -> None:
    settings, topics, unique = setup
    instance = unique("gf-instance")

    async def static_member() -> AIOKafkaConsumer:
        consumer = clients.consumer(
            settings,
            topics.source,
            group_id=topics.group,
            group_instance_id=instance,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        await consumer.start()
        return consumer

    first = await static_member()
    zombie = await transactional(settings, unique("gf-static-zombie"))
    second: AIOKafkaConsumer | None = None
    try:
        [old] = await until_members([first], lambda m: m[0].generation_id > 0)
        assert old.group_instance_id == instance
        await zombie.begin_transaction()
        await zombie.send_and_wait(topics.output, b"zombie", partition=0)

        # the same instance id comes back (a restarted instance): the old member id is fenced
        second = await static_member()
        [new] = await until_members([second], lambda m: m[0].member_id != old.member_id)
        assert new.group_instance_id == instance

        with pytest.raises(GroupFenced, match="fenced by the group") as refused:
            await groupfence.send_offsets_to_transaction(zombie, {topics.tp: 3}, old)
        assert refused.value.reason == "FENCED_INSTANCE_ID", refused.value
        await zombie.abort_transaction()
        stable = await groupoffsets.fetch_committed_offsets(second, [topics.tp], timeout_s=WAIT_S)
        assert stable == {topics.tp: None}
    finally:
        await zombie.stop()
        if second is not None:
            await second.stop()
        try:
            await first.stop()
        except Exception as exc:  # noqa: BLE001  (the fenced member may fail to leave)
            logging.getLogger(__name__).info("the fenced member stopped with %r", exc)
