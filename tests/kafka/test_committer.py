"""The committer: a floor on each pair's commits, with the fake Kafka clients of test_runner."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import TopicPartition

from gateway.kafka.exactly_once.checkpoint import Outcome, Result, Work
from gateway.kafka.exactly_once.committer import Committer
from gateway.kafka.exactly_once.pacing import CommitPacing
from gateway.kafka.pairs.slot import PairKey, PairSlot
from gateway.kafka.wire.denials import Denials
from tests.kafka.test_runner import (
    answer_for,
    assign,
    decided_round,
    gw,
    holding_a_pending_forward,
    producer,
    rec,
    run_round,
    tps,
    transactions,
)

__all__ = ["gw"]  # the fixture, used by name


# --- what a failed commit asks of the holder ------------------------------------------------


class Holder:
    """Records what the committer asks of the pairs' holder."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, PairKey]] = []

    def holds(self, slot: PairSlot) -> bool:
        return True

    def pause(self, slot: PairSlot) -> None:
        self.asked.append(("pause", slot.key))

    async def fenced(self, slot: PairSlot) -> None:
        self.asked.append(("fenced", slot.key))

    def retry(self, slot: PairSlot) -> None:
        self.asked.append(("retry", slot.key))


class ScriptedCheckpoint:
    """Answers every commit with one outcome; records closes and rewinds."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.done: list[str] = []

    def holds(self, key: PairKey) -> bool:
        return True

    async def commit(self, works: list[Work]) -> list[Result]:
        error = None if self.outcome is Outcome.COMMITTED else RuntimeError("refused")
        return [Result(self.outcome, error) for _ in works]

    async def close(self, key: PairKey) -> None:
        self.done.append("close")

    async def rewind(self, tps: list[TopicPartition], ours: dict[TopicPartition, int]) -> None:
        self.done.append("rewind")


def committer_for(outcome: Outcome) -> tuple[Committer, Holder, ScriptedCheckpoint]:
    holder, checkpoint = Holder(), ScriptedCheckpoint(outcome)
    return Committer(checkpoint, Denials(), holder), holder, checkpoint  # type: ignore[arg-type]


async def test_a_fenced_commit_asks_the_holder_to_give_the_pair_up(gw: Any) -> None:
    slot = await holding_a_pending_forward(gw)
    committer, holder, checkpoint = committer_for(Outcome.FENCED)
    assert await committer.commit([slot]) == ([], [])
    assert holder.asked == [("pause", slot.key), ("fenced", slot.key)]
    assert checkpoint.done == [] and not slot.ready and slot.pair.round.empty()


async def test_a_failed_commit_rewinds_and_the_pair_is_to_be_prepared_again(gw: Any) -> None:
    slot = await holding_a_pending_forward(gw)
    committer, holder, checkpoint = committer_for(Outcome.FAILED)
    assert await committer.commit([slot]) == ([], [slot])
    assert holder.asked == [("pause", slot.key)]  # the caller prepares it again
    assert checkpoint.done == ["close", "rewind"] and not slot.ready


async def test_a_failed_commit_in_the_background_asks_the_holder_to_retry(gw: Any) -> None:
    slot = await holding_a_pending_forward(gw)
    committer, holder, checkpoint = committer_for(Outcome.FAILED)
    committer.launch([slot])
    assert committer.in_flight(slot)
    await committer.drain()
    assert not committer.in_flight(slot)
    assert holder.asked == [("pause", slot.key), ("retry", slot.key)]
    assert checkpoint.done == ["close", "rewind"]


async def test_a_committed_round_asks_nothing_of_the_holder(gw: Any) -> None:
    slot = await holding_a_pending_forward(gw)
    committer, holder, _ = committer_for(Outcome.COMMITTED)
    seen: list[int] = []
    committer.observe(lambda s, done: seen.append(len(done.decided)))
    done, retry = await committer.commit([slot])
    assert len(done) == 1 and retry == [] and seen == [1]
    assert holder.asked == [] and slot.ready and not slot.pair.has_pending()


# --- the floor on a pair's commits (commit_min_interval_ms, commit_min_records) ------------


async def test_under_the_floor_the_next_round_waits_and_its_records_stay_unseen(gw: Any) -> None:
    ev, rq = tps()
    await assign(gw, ev, rq)
    gw.assignment.committer.pacing = CommitPacing(3600.0)  # never reached in this test
    made = producer(gw)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq))  # the pair's first commit: at once
    assert transactions(gw, "committed") == 1
    await run_round(gw, {rq: [rec(rq, 1, 6, answer_for("a", "r3"))]})
    slot = gw.assignment.slots[("bot", 0)]
    # decided, but its commit waits for the floor: nothing of it is visible
    assert transactions(gw, "committed") == 1 and not gw.assignment.committer.in_flight(slot)
    assert [r.topic for r in slot.pair.round.out] == ["agui.rejections"]
    assert gw.consumer.committed_offsets[rq] == 1
    assert "agui.rejections" not in [t for t, _ in made.sent]
    await gw.assignment.close(commit=True)  # a clean stop commits it
    assert transactions(gw, "committed") == 2 and gw.consumer.committed_offsets[rq] == 2
    assert "agui.rejections" in [t for t, _ in made.sent]


async def test_the_floor_passes_and_the_waiting_round_commits_by_itself(gw: Any) -> None:
    ev, rq = tps()
    await assign(gw, ev, rq)
    gw.assignment.committer.pacing = CommitPacing(0.01)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq))
    await run_round(gw, {rq: [rec(rq, 1, 6, answer_for("a", "r3"))]})
    while transactions(gw, "committed") < 2:  # no further round: the timer starts it
        await asyncio.sleep(0.005)
    await gw.assignment.committer.drain()
    assert gw.consumer.committed_offsets == {ev: 2, rq: 2}


async def test_enough_pending_records_commit_before_the_floor(gw: Any) -> None:
    ev, rq = tps()
    await assign(gw, ev, rq)
    gw.assignment.committer.pacing = CommitPacing(3600.0, min_records=1)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq))
    await run_round(gw, {rq: [rec(rq, 1, 6, answer_for("a", "r3"))]})
    assert transactions(gw, "committed") == 2
    assert gw.consumer.committed_offsets == {ev: 2, rq: 2}


# --- healing after the broker was lost (see gateway.kafka.exactly_once.hanging) ----------------------------


async def test_a_heal_commits_at_once_adding_every_written_partition_and_the_offsets(
    gw: Any,
) -> None:
    ev, rq = tps()
    gw.consumer.topics |= {"agui.bot.run-requests", "agui.rejections"}
    await assign(gw, ev, rq)
    slot = gw.assignment.slots[("bot", 0)]
    slot.committed = {ev: 4, rq: 2}  # what it committed before the broker went
    before = transactions(gw, "committed")
    await gw.assignment.heal()  # nothing decided since: it commits all the same
    assert gw.assignment.committer.healing(slot)
    await gw.assignment.committer.drain()
    assert transactions(gw, "committed") == before + 1
    assert not gw.assignment.committer.healing(slot)
    assert producer(gw)._txn_manager.added == [
        TopicPartition("agui.bot.gateway-changelog", 0),
        TopicPartition("agui.bot.run-requests", 0),
        TopicPartition("agui.rejections", 0),
    ]
    assert gw.consumer.committed_offsets == {ev: 4, rq: 2}  # the same, marked again
    gw.assignment.committer.launch([slot])  # healed: nothing more to commit
    assert not gw.assignment.committer.in_flight(slot)


async def test_a_heal_also_carries_what_the_pair_decided_meanwhile(gw: Any) -> None:
    slot = await holding_a_pending_forward(gw)
    await gw.assignment.heal()
    await gw.assignment.committer.drain()
    assert not slot.pair.has_pending() and not gw.assignment.committer.healing(slot)
    assert producer(gw).sent != [] and producer(gw)._txn_manager.added


async def test_a_heal_that_fails_is_asked_again_until_one_commits(gw: Any) -> None:
    slot = await holding_a_pending_forward(gw)
    committer, holder, _ = committer_for(Outcome.FAILED)
    committer.heal(slot, [TopicPartition("agui.rejections", 0)])
    await committer.drain()
    assert holder.asked == [("pause", slot.key), ("retry", slot.key)]
    assert committer.healing(slot)  # the pair heals once prepared again
    committer.checkpoint.outcome = Outcome.COMMITTED  # type: ignore[attr-defined]
    slot.ready = True
    committer.launch([slot])
    await committer.drain()
    assert not committer.healing(slot)


async def test_a_pair_prepared_again_heals_without_waiting_for_work(gw: Any) -> None:
    ev, rq = tps()
    await assign(gw, ev, rq)
    slot = gw.assignment.slots[("bot", 0)]
    slot.ready = False  # as while it is prepared again after a failed commit
    await gw.assignment.heal()
    assert gw.assignment.committer.healing(slot) and not gw.assignment.committer.in_flight(slot)
    before = transactions(gw, "committed")
    gw.assignment.start_prepare([slot])
    await gw.assignment.settled()
    await gw.assignment.committer.drain()
    assert slot.ready and transactions(gw, "committed") == before + 1
    assert not gw.assignment.committer.healing(slot)


async def test_a_heal_asked_again_while_one_commits_is_committed_again(gw: Any) -> None:
    ev, rq = tps()
    await assign(gw, ev, rq)
    slot = gw.assignment.slots[("bot", 0)]
    gate = producer(gw).commit_gate = asyncio.Event()
    await gw.assignment.heal()
    assert gw.assignment.committer.in_flight(slot)
    await gw.assignment.heal()  # the broker lost again while the first heal commits
    before = transactions(gw, "committed")
    gate.set()
    await gw.assignment.committer.drain()
    assert transactions(gw, "committed") == before + 2  # the second heal committed too
    assert not gw.assignment.committer.healing(slot)
