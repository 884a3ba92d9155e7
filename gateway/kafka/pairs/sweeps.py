"""When pairs sweep: a pass over every ready pair each sweep interval, spread over rounds.

A sweep pass over a pair looks at its threads a slice per round (`Sweep`); this
plan decides when each pair's pass starts. Every `sweep_interval_s` each ready
pair is due one; passes start a few pairs a round (about `budget` threads'
worth, at least one pair), so a fleet's sweep is spread over rounds rather than
stalling one round (800 pairs in one round took up to 1.4 s).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from gateway.kafka.pairs.slot import PairKey, PairSlot

PAIR_COST = 20  # a pair's pass counted as this many threads on top of its own


class SweepPlan:
    def __init__(self, interval_s: float, budget: int) -> None:
        self.interval_s = interval_s
        self.budget = budget  # threads' worth of passes started per round
        self._last = float("-inf")
        self._due: deque[PairKey] = deque()  # pairs whose pass is still to start

    def starting(self, slots: Mapping[PairKey, PairSlot], mono: float) -> list[PairSlot]:
        """The ready pairs whose pass starts this round."""
        due = self._due
        if mono - self._last >= self.interval_s:
            self._last = mono
            if not due:  # a pass over the fleet still under way is not started twice
                due.extend(key for key, slot in slots.items() if slot.ready)
        starting: list[PairSlot] = []
        budget = self.budget
        while due and budget > 0:
            slot = slots.get(due.popleft())
            if slot is None or not slot.ready or slot.pair.sweeping:
                continue
            budget -= PAIR_COST + min(len(slot.pair.store), self.budget)
            starting.append(slot)
        return starting
