"""A least-recently-used cache bounded by the bytes its entries hold, not their number.

An entry count bounds nothing when one entry can be a kilobyte or a megabyte;
each entry here is charged a weight (its caller's estimate of the bytes it
keeps alive) and the oldest entries go until the total fits the budget. An
entry heavier than the whole budget is not kept at all.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def get(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries.move_to_end(key)
        return found[0]

    def put(self, key: K, value: V, weight: int) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.used -= old[1]
        if weight > self.budget:
            return
        self._entries[key] = (value, weight)
        self.used += weight
        while self.used > self.budget:
            _, (_, gone) = self._entries.popitem(last=False)
            self.used -= gone

    def clear(self) -> None:
        self._entries.clear()
        self.used = 0

    def __len__(self) -> int:
        return len(self._entries)
