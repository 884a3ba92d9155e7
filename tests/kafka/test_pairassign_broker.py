"""The pair assignor and static membership on the real broker, with aiokafka's own consumers.

Three members of one group share ten pairs (six one-partition agents and a group of
four partitions): each pair's two partitions go to one member, counts within one of
each other; a member that leaves moves only its own pairs. A static member restarted
within the session timeout gets its partitions back while the others see no
rebalance at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from gateway.kafka.assign.pairassign import pair_assignor
from gateway.kafka.wire.topics import TopicNames
from gateway.settings import Settings

pytestmark = pytest.mark.integration

NAMES = TopicNames(Settings())
SETTLE_S = 60.0


class Member(ConsumerRebalanceListener):
    def __init__(self, bootstrap: str, group: str, pattern: str, instance: str | None = None):
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            group_instance_id=instance,
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            metadata_max_age_ms=1000,
            partition_assignment_strategy=(pair_assignor(NAMES.owner_of_topic),),
        )
        self.pattern = pattern
        self.assigned: set[TopicPartition] = set()
        self.assignments = 0
        self.revokes = 0
        self._poll: asyncio.Task[None] | None = None

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revokes += 1

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned = set(assigned)
        self.assignments += 1

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe(pattern=self.pattern, listener=self)

        async def poll() -> None:
            while True:
                await self.consumer.getmany(timeout_ms=200)

        self._poll = asyncio.ensure_future(poll())

    async def stop(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poll
        await self.consumer.stop()

    def pairs(self) -> set[tuple[str | None, int]]:
        return {(NAMES.owner_of_topic(tp.topic), tp.partition) for tp in self.assigned}


async def _settled(members: list[Member], total: int, stable: Callable[[], bool] = lambda: True):
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        held = [tp for m in members for tp in m.assigned]
        if len(held) == total and len(set(held)) == total and stable():
            return
        await asyncio.sleep(0.2)
    state = [(sorted(m.pairs()), m.assignments, m.revokes) for m in members]
    raise AssertionError(f"not settled (pairs, assignments, revokes): {state!r}")


@contextlib.asynccontextmanager
async def _members(*members: Member) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for m in members:
            with contextlib.suppress(Exception):
                await m.stop()


def _co_partitioned(member: Member) -> None:
    sides: dict[tuple[str | None, int], set[str]] = {}
    for tp in member.assigned:
        sides.setdefault((NAMES.owner_of_topic(tp.topic), tp.partition), set()).add(tp.topic)
    assert all(len(topics) == 2 for topics in sides.values()), sides


async def test_pairs_spread_evenly_together_and_stay_put(
    kafka_bootstrap, create_topics, unique_name
):
    prefix = unique_name("pa").replace("-", "")
    agents = [f"{prefix}a{i}" for i in range(6)]
    await create_topics([f"agui.{a}.{side}" for a in agents for side in ("events", "requests")])
    group_topics = [f"agui.{prefix}team.{side}" for side in ("events", "requests")]
    await create_topics(group_topics, partitions=4)
    pattern = rf"^agui\.{prefix}[a-z0-9]+\.(events|requests)$"
    group = unique_name("pa-group")
    members = [Member(kafka_bootstrap, group, pattern) for _ in range(3)]
    async with _members(*members):
        for m in members:
            await m.start()
        await _settled(members, 20, lambda: sorted(len(m.pairs()) for m in members) == [3, 3, 4])
        for m in members:
            _co_partitioned(m)
        before = {id(m): m.pairs() for m in members}
        leaving, *staying = members
        await leaving.stop()
        await _settled(staying, 20, lambda: sorted(len(m.pairs()) for m in staying) == [5, 5])
        for m in staying:
            _co_partitioned(m)
            assert before[id(m)] <= m.pairs(), "a member that stayed lost a pair"


async def test_a_static_member_restarted_in_time_moves_nothing(
    kafka_bootstrap, create_topics, unique_name
):
    prefix = unique_name("st").replace("-", "")
    agents = [f"{prefix}a{i}" for i in range(4)]
    await create_topics([f"agui.{a}.{side}" for a in agents for side in ("events", "requests")])
    pattern = rf"^agui\.{prefix}[a-z0-9]+\.(events|requests)$"
    group = unique_name("st-group")
    first = Member(kafka_bootstrap, group, pattern, instance="gw-1")
    other = Member(kafka_bootstrap, group, pattern, instance="gw-2")
    again = Member(kafka_bootstrap, group, pattern, instance="gw-1")
    async with _members(first, other, again):
        await first.start()
        await other.start()
        await _settled([first, other], 8, lambda: len(first.pairs()) == len(other.pairs()) == 2)
        await asyncio.sleep(2)  # any rebalance of the joins is over
        held, seen = first.pairs(), (other.assignments, other.revokes)
        await first.stop()  # a static member sends no LeaveGroup: nothing moves yet
        await again.start()
        await _settled([again, other], 8)
        await asyncio.sleep(3)  # a rebalance, had there been one, would show by now
        assert again.pairs() == held
        assert (other.assignments, other.revokes) == seen, "the other member was rebalanced"
