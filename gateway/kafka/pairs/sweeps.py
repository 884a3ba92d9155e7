"""When pairs sweep: a pass over every ready pair each sweep interval, spread over rounds.

A sweep pass over a pair looks at its threads a slice per round (`Sweep`); this
plan decides when each pair's pass starts. Every `sweep_interval_s` each ready
pair is due one; passes start a few pairs a round (about `budget` threads'
worth, at least one pair), so a fleet's sweep is spread over rounds rather than
stalling one round (800 pairs in one round took up to 1.4 s).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

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
            budget -= PAIR_COST + min(slot.pair.sweep_size(), self.budget)
            starting.append(slot)
        return starting


class SweepTurns:
    """A round's sweeping: turns of `chunk` threads, round-robin over the pairs whose
    pass is under way, until `slice_` threads or the round's time share is spent.

    A round's share of time is `share` of the time since the last round swept, within
    [`min_s`, `max_s`]: under load, when rounds follow each other every few
    milliseconds, a pass goes on a millisecond a round, and while idle it may take up
    to `max_s` of each round. (Counted in threads alone, a slice of 1,000 threads a
    round at about 7 µs each, and more for larger states, held every round for the
    length of a pass: at 1,000 requests/s each pass raised the p99 from about 140 to
    270-400 ms.) A round takes at least one turn, a pair whose pass starts this round
    always gets its first, and the pairs take turns from a different one each round, so
    every pass moves on.
    The clock is the shell's, passed in.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        slice_: int,
        chunk: int,
        changes: int,
        share: float = 0.2,
        min_s: float = 0.001,
        max_s: float = 0.02,
    ) -> None:
        self.clock = clock
        self.slice = slice_
        self.chunk = chunk
        self.changes = changes  # at most this many changes per turn
        self.share, self.min_s, self.max_s = share, min_s, max_s
        self._first = 0  # which pair takes the first turn
        self._last: float | None = None  # when the last round's sweeping ended

    def run(self, sweeping: list[PairSlot], starting: set[PairKey], wall_ms: int) -> bool:
        """Sweep this round's share; True when any pass ended."""
        if not sweeping:
            self._last = None
            return False
        now = self.clock()
        since = 0.0 if self._last is None else now - self._last  # a pass's first: min_s
        deadline = now + min(self.max_s, max(self.min_s, self.share * since))
        first = self._first % len(sweeping)
        self._first += 1
        turns = sweeping[first:] + sweeping[:first]
        looked, ended = 0, False
        while turns:
            more = []
            for slot in turns:
                # a round's first turn, and a pass's first, are taken whatever the time
                opening = looked == 0 or (slot.key in starting and not slot.pair.sweeping)
                if not opening and (looked >= self.slice or self.clock() >= deadline):
                    continue
                looked += self.chunk
                if slot.pair.sweep(wall_ms, limit=self.chunk, max_changes=self.changes):
                    ended = True
                else:
                    more.append(slot)
            if looked >= self.slice or self.clock() >= deadline:
                break
            turns = more
        self._last = self.clock()
        return ended
