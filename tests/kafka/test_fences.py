"""Fence look-ups against the real broker: one look-up over a fleet's topics."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition

from gateway.kafka.assign.fences import Fences
from gateway.kafka.wire import clients
from gateway.settings import Settings
from tests.integration.conftest import CreateTopics
from tests.integration.support import produce

pytestmark = pytest.mark.integration

TOPICS = 12


@dataclass
class WaitingPair:
    """A pair with one request waiting for its events side's fence."""

    fences: list[tuple[int, int | None]] = field(default_factory=list)
    merge: SimpleNamespace = field(
        default_factory=lambda: SimpleNamespace(requests=deque([SimpleNamespace(offset=0)]))
    )

    def needs_fence(self) -> bool:
        return not self.fences

    def set_fence(self, events_end: int, covers: int | None = None) -> None:
        self.fences.append((events_end, covers))


@dataclass
class Slot:
    key: tuple[str, int]
    events_tp: TopicPartition
    requests_tp: TopicPartition
    pair: WaitingPair = field(default_factory=WaitingPair)
    discarded: bool = False


async def test_a_look_up_over_topics_new_to_its_client_learns_them_in_one_update(
    kafka_bootstrap: str,
    create_topics: CreateTopics,
    unique_name: Callable[[str], str],
) -> None:
    """aiokafka's look-up learns one unknown topic per attempt, 100 ms apart: a round's
    look-up over a fleet's events topics took seconds, and held every pair meanwhile."""
    settings = Settings(bootstrap_servers=kafka_bootstrap)
    tracked, *events = [unique_name("fence-ev") for _ in range(TOPICS + 1)]
    await create_topics([tracked, *events])
    for n, topic in enumerate(events):
        await produce(kafka_bootstrap, topic, [("t", {"n": i}) for i in range(n % 3)])
    offsets = clients.consumer(
        settings, client_id=unique_name("fence-offsets"), isolation_level="read_committed"
    )
    await offsets.start()
    try:
        net = offsets._client
        await net.add_topic(tracked)  # it tracks a topic: it now asks only for those it tracks
        updates = 0
        update = net._metadata_update

        async def counted(cluster, topics):  # type: ignore[no-untyped-def]
            nonlocal updates
            updates += 1
            return await update(cluster, topics)

        net._metadata_update = counted
        slots = [
            Slot((f"a{n}", 0), TopicPartition(t, 0), TopicPartition(f"{t}-rq", 0))
            for n, t in enumerate(events)
        ]
        assigned = {s.events_tp for s in slots}
        # no fetch seen: every pair looks up
        fences = Fences(SimpleNamespace(assignment=lambda: assigned), offsets)  # type: ignore[arg-type]
        fences.set(slots[:6])  # type: ignore[arg-type]
        await fences.wait()
        assert fences.landed.is_set()
        first = updates
        assert first <= 2  # one for all of them (and one more if one was under way)
        fences.set(slots[6:])  # type: ignore[arg-type]
        await fences.wait()
        assert updates == first  # the first look-up learnt every assigned topic
        assert [s.pair.fences for s in slots] == [[(n % 3, 0)] for n in range(TOPICS)]
    finally:
        await offsets.stop()
