"""A text search over every open interrupt, found by the regex engine in C rather than
tested item by item.

The index's search texts, in its order (oldest first), joined into one string by
`JOINT`, which no search text holds (an item's search text has its line breaks made
spaces, and so has a query's text). A search is one pattern, the query's text and then
the rest of its item's text, so each matching item is found once: `findall` counts
them without a Python step per item, and `finditer` gives a page's, each mapped to
its item by bisection of the items' starting offsets.

At 100,000 open interrupts (about 18 MB of search text) a count takes 11-20 ms whether
it matches no item or every one, where testing every item took 167 ms at p99. Building
the haystack costs about one such pass; the index builds it when a text search first
needs it after a change, so a burst of searches between changes pays once. It holds
one more copy of the search texts while it is current.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator

JOINT = "\n"


def searchable(text: str) -> str:
    """`text` as a search text or a query's text: lower case, no `JOINT`."""
    return text.lower().replace(JOINT, " ")


class Haystack:
    """The search texts of `keys`' items, in that order (none of them holds `JOINT`)."""

    __slots__ = ("keys", "_starts", "_joined")

    def __init__(self, keys: list[str], texts: list[str]) -> None:
        self.keys = keys
        # where each text starts in the joined string, and one past the last (+1: JOINT)
        self._starts = list(itertools.accumulate((len(t) + 1 for t in texts), initial=0))
        self._joined = JOINT.join(texts)

    def count(self, needle: str, first: int, stop: int) -> int:
        """How many of the items in places [first, stop) hold `needle`."""
        found = _pattern(needle)
        if found is None or first >= stop:
            return 0
        return len(found.findall(self._joined, self._starts[first], self._starts[stop]))

    def matching(self, needle: str, first: int, stop: int) -> Iterator[int]:
        """The places in [first, stop) of the items that hold `needle`, in order."""
        found = _pattern(needle)
        if found is None or first >= stop:
            return
        starts = self._starts
        for match in found.finditer(self._joined, starts[first], starts[stop]):
            yield bisect.bisect_right(starts, match.start()) - 1


def _pattern(needle: str) -> re.Pattern[str] | None:
    """The needle and the rest of its item's text (one empty group: `findall` then
    makes no copies); None when no item can hold it."""
    if not needle or JOINT in needle:
        return None
    return re.compile(re.escape(needle) + "[^" + JOINT + "]*()")
