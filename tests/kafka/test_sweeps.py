"""When pairs' sweep passes start: every ready pair once per interval, a few a round."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gateway.kafka.pairs.sweeps import PAIR_COST, SweepPlan, SweepTurns


def slot(key: tuple[str, int], threads: int = 0, ready: bool = True) -> SimpleNamespace:
    """A pair whose next pass looks at `threads` threads."""
    pair = SimpleNamespace(sweep_size=lambda: threads, sweeping=False)
    return SimpleNamespace(key=key, ready=ready, pair=pair)


def test_a_fleets_passes_start_spread_over_rounds_each_pair_once_per_interval() -> None:
    """All 800 pairs' passes started in one round, which then took up to 1.4 s."""
    slots = {(f"a{n}", p): slot((f"a{n}", p)) for n in range(200) for p in range(4)}
    plan = SweepPlan(interval_s=10.0, budget=1000)
    rounds = [plan.starting(slots, 100.0 + r * 0.1) for r in range(20)]
    per_round = 1000 // PAIR_COST
    assert len(rounds[0]) == per_round and all(len(r) <= per_round for r in rounds)
    started = [s.key for r in rounds for s in r]
    assert sorted(started) == sorted(slots)  # each ready pair once
    assert plan.starting(slots, 105.0) == []  # not again before the interval
    assert len(plan.starting(slots, 110.1)) == per_round  # the next interval begins


def test_pairs_not_ready_or_still_sweeping_are_skipped_and_a_large_one_goes_alone() -> None:
    big = slot(("big", 0), threads=5000)
    busy = slot(("busy", 0))
    busy.pair.sweeping = True
    slots = {
        ("big", 0): big,
        ("off", 0): slot(("off", 0), ready=False),
        ("busy", 0): busy,
        ("small", 0): slot(("small", 0)),
    }
    plan = SweepPlan(interval_s=10.0, budget=1000)
    assert plan.starting(slots, 50.0) == [big]  # its slice alone fills the round
    assert plan.starting(slots, 50.1) == [slots[("small", 0)]]  # busy one skipped
    assert plan.starting(slots, 50.2) == []


class _Sweeping:
    """A pair whose pass is under way (or starts), recording the turns it is given."""

    def __init__(self, sweeping: bool = True, length: int = 10**9) -> None:
        self.sweeping = sweeping
        self.limits: list[int] = []
        self.left = length  # threads its pass has still to look at

    def sweep(self, now_ms: int, limit: int | None = None, max_changes: int | None = None) -> bool:
        assert limit is not None and max_changes is not None
        self.sweeping = True
        self.limits.append(limit)
        self.left -= limit
        if self.left <= 0:
            self.sweeping = False
            return True
        return False


class _Slot:
    def __init__(self, n: int, **kw: object) -> None:
        self.pair = _Sweeping(**kw)  # type: ignore[arg-type]
        self.key = ("team", n)


class _Clock:
    """Moves on `step` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 100.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def turns(clock: _Clock) -> SweepTurns:
    from gateway.kafka.runner import SWEEP_CHANGES, SWEEP_CHUNK, SWEEP_SLICE

    return SweepTurns(clock, SWEEP_SLICE, SWEEP_CHUNK, SWEEP_CHANGES)


@pytest.mark.parametrize("pairs", [1, 3, 8, 40])
def test_a_round_sweeps_one_slice_at_most_however_many_pairs_sweep(pairs):
    from gateway.kafka.runner import SWEEP_CHUNK, SWEEP_SLICE

    slots = [_Slot(n) for n in range(pairs)]
    turns(_Clock(0.0)).run(slots, set(), 0)  # type: ignore[arg-type]
    looked_at = sum(sum(slot.pair.limits) for slot in slots)
    assert looked_at == SWEEP_SLICE  # time stood still: the slice bounds it
    assert all(limit == SWEEP_CHUNK for slot in slots for limit in slot.pair.limits)


def test_a_round_sweeps_its_share_of_time_and_a_pass_that_starts_gets_its_first_turn():
    """Counted in threads alone, 1,000 a round held every round of a pass under load."""
    clock = _Clock(0.0001)  # 0.1 ms each time it is read: about a turn
    sweeper = turns(clock)
    slots = [_Slot(n) for n in range(4)]
    sweeper.run(slots, set(), 0)  # type: ignore[arg-type]
    first = sum(len(slot.pair.limits) for slot in slots)
    assert 2 <= first <= 12  # the pass's first round: min_s (1 ms)
    clock.now += 0.1  # an idle spell: a round 100 ms later may sweep 20 ms
    sweeper.run(slots, set(), 0)  # type: ignore[arg-type]
    second = sum(len(slot.pair.limits) for slot in slots) - first
    assert second == 1000 // 50  # the slice, reached before its 20 ms
    # a pass that starts now gets its first turn, though the round's share is spent
    opening = _Slot(9, sweeping=False)
    spent = turns(_Clock(1.0))  # every read a second later: no time at all
    spent.run([*slots, opening], {opening.key}, 0)  # type: ignore[arg-type]
    assert opening.pair.limits == [50] and opening.pair.sweeping


def test_with_one_turn_a_round_every_pair_sweeping_gets_turns_in_rotation():
    slots = [_Slot(n) for n in range(5)]
    sweeper = turns(_Clock(0.01))  # each turn overruns the round's share
    for _ in range(10):
        sweeper.run(slots, set(), 0)  # type: ignore[arg-type]
    assert [len(slot.pair.limits) for slot in slots] == [2, 2, 2, 2, 2]


def test_a_pass_that_ends_says_so():
    slots = [_Slot(0, length=120), _Slot(1)]
    sweeper = turns(_Clock(0.0))
    assert sweeper.run(slots, set(), 0)  # type: ignore[arg-type]
    assert slots[0].pair.limits == [50, 50, 50] and not slots[0].pair.sweeping
