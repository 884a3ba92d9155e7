"""When pairs' sweep passes start: every ready pair once per interval, a few a round."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gateway.kafka.pairs.sweeps import PAIR_COST, SweepPlan


def slot(key: tuple[str, int], threads: int = 0, ready: bool = True) -> SimpleNamespace:
    pair = SimpleNamespace(store=[None] * threads, sweeping=False)
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
    """A pair whose pass is under way, recording the slices it is given."""

    sweeping = True

    def __init__(self) -> None:
        self.limits: list[int] = []

    def sweep(self, now_ms: int, limit: int | None = None, max_changes: int | None = None) -> bool:
        assert limit is not None
        self.limits.append(limit)
        return False


class _Slot:
    def __init__(self, n: int) -> None:
        self.pair = _Sweeping()
        self.key = ("team", n)


@pytest.mark.parametrize("pairs", [1, 3, 8, 40])
def test_a_round_sweeps_one_slice_in_all_however_many_pairs_sweep(pairs):
    from gateway.kafka.runner import SWEEP_SLICE, SWEEP_SLICE_MIN, Gateway

    slots = [_Slot(n) for n in range(pairs)]
    Gateway._sweep(None, slots, set(), 0)  # type: ignore[arg-type]
    looked_at = sum(slot.pair.limits[0] for slot in slots)
    assert looked_at <= max(SWEEP_SLICE, SWEEP_SLICE_MIN * pairs)
    assert all(slot.pair.limits[0] >= SWEEP_SLICE_MIN for slot in slots)  # every pass moves
