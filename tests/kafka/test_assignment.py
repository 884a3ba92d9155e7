"""The assignment's commit observers, with the fake Kafka clients of test_runner."""

from __future__ import annotations

from typing import Any

from gateway.kafka.pairs.round import Round
from gateway.kafka.pairs.slot import PairSlot
from tests.kafka.test_runner import (
    assign,
    decided_round,
    gw,
    run_round,
    tps,
    transactions,
)

__all__ = ["gw"]  # the fixture, used by name


async def test_commit_observers_see_each_committed_round_with_its_offsets(gw: Any) -> None:
    ev, rq = tps()
    await assign(gw, ev, rq)
    seen: list[tuple[dict[Any, int], int]] = []

    def broken(slot: PairSlot, done: Round) -> None:
        raise RuntimeError("an observer's defect")

    def observe(slot: PairSlot, done: Round) -> None:
        seen.append((dict(slot.committed), len(done.decided)))

    gw.assignment.observe_commits(broken)
    gw.assignment.observe_commits(observe)
    gw.offsets.ends = {ev: 2}
    gw.consumer.positions[ev] = 2
    await run_round(gw, decided_round(ev, rq))
    # the round committed once, the observer after the broken one still saw it
    assert seen == [({ev: 2, rq: 1}, 1)]
    assert transactions(gw, "committed") == 1
    assert gw.assignment.slots[("bot", 0)].ready  # the broken observer failed nothing
