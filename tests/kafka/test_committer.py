"""The committer: a floor on each pair's commits, with the fake Kafka clients of test_runner."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.kafka.pacing import CommitPacing
from tests.kafka.test_runner import (
    answer_for,
    assign,
    decided_round,
    gw,
    producer,
    rec,
    run_round,
    tps,
    transactions,
)

__all__ = ["gw"]  # the fixture, used by name


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
