"""The preparer's reading of committed offsets: sweep when they stay pending.

The checkpoint here is a stand-in that records what it is asked (its real
counterpart runs against the broker in tests/kafka/test_hanging.py); what is
tested is the preparer's choice of partitions and what it does with each answer.
"""

from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from gateway.kafka.assign.prepare import Preparer
from gateway.kafka.exactly_once import hanging
from gateway.kafka.exactly_once.groupoffsets import OffsetsUnstable
from gateway.kafka.pairs.slot import PairSlot
from gateway.kafka.wire.topics import TopicNames
from gateway.settings import Settings
from tests.kafka.test_pair import TOPICS, make_pair

EVENTS, REQUESTS = TopicPartition("agui.bot.events", 0), TopicPartition("agui.bot.requests", 0)


class Checkpoint:
    def __init__(self, sweep: Any) -> None:
        self.asked: list[float | None] = []
        self.swept: list[list[TopicPartition]] = []
        self._sweep = sweep

    async def committed_offsets(self, tps, ours, timeout_s=None):
        self.asked.append(timeout_s)
        if len(self.asked) == 1:
            raise OffsetsUnstable("UNSTABLE_OFFSET_COMMIT on agui.bot.requests[0]")
        return {EVENTS: 4, REQUESTS: 2}

    async def sweep(self, key, partitions, offsets):
        self.swept.append(partitions)
        assert offsets == {EVENTS: 3, REQUESTS: 0}  # what is known committed, else 0
        return self._sweep(partitions)


def preparer(checkpoint: Checkpoint) -> Preparer:
    counts = {
        "agui.bot.run-requests": {0, 1, 2},
        "agui.rejections": {0, 1},
        "agui.warnings": {0},
        "agui.interrupts": {0, 1},
    }
    cluster = SimpleNamespace(partitions_for_topic=counts.get)
    consumer: Any = SimpleNamespace(_client=SimpleNamespace(cluster=cluster))
    return Preparer(TopicNames(Settings()), None, consumer, None, checkpoint, None)  # type: ignore[arg-type]


def slot() -> PairSlot:
    # a pair that writes the inbox's interrupts topic too (its rounds write it when set)
    pair, _ = make_pair(agent_topics=dataclasses.replace(TOPICS, interrupts="agui.interrupts"))
    return PairSlot(pair, EVENTS, REQUESTS, committed={EVENTS: 3})


def aborted(partitions: list[TopicPartition]) -> hanging.Settled:
    return hanging.Settled(partitions, committed=False, last_state="CompleteAbort")


def completed(partitions: list[TopicPartition]) -> hanging.Settled:
    return hanging.Settled(partitions, committed=True, last_state="CompleteCommit")


def refused(partitions: list[TopicPartition]) -> hanging.Settled:
    raise RuntimeError("TopicAuthorizationFailedError")


@pytest.mark.parametrize(
    ("sweep", "line"),
    [
        (aborted, "hanging transaction of this pair's transactional id; aborted it"),
        (completed, "which its coordinator committed; completed it as committed"),
        (lambda partitions: None, "held by a transaction this instance cannot abort"),
        (refused, "sweeping a hanging transaction failed"),
    ],
)
async def test_offsets_still_pending_are_swept_then_read_with_the_long_wait(
    sweep, line, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoint = Checkpoint(sweep)
    with caplog.at_level(logging.WARNING, logger="gateway.runner"):
        got = await preparer(checkpoint).committed_offsets(slot(), [EVENTS, REQUESTS])
    assert got == {EVENTS: 4, REQUESTS: 2}
    assert checkpoint.asked == [hanging.SUSPECT_AFTER_S, None]  # then the default, long wait
    (partitions,) = checkpoint.swept
    assert partitions == sorted(
        [TopicPartition("agui.bot.gateway-changelog", 0)]
        + [TopicPartition("agui.bot.run-requests", p) for p in (0, 1, 2)]
        + [TopicPartition("agui.rejections", p) for p in (0, 1)]
        + [TopicPartition("agui.warnings", 0)]
        + [TopicPartition("agui.interrupts", p) for p in (0, 1)]
    )
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if line in m], caplog.text
    assert any("aborted it" in m for m in messages) == (sweep is aborted), caplog.text
    assert any("completed it as committed" in m for m in messages) == (sweep is completed)
