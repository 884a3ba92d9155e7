"""The open interrupts, in memory: filters, oldest first, cursor paging, a summary.

Pure: no Kafka, no clock (times are arguments), no metrics. The view feeds it the
interrupts topic's records as `put` (opened) and `remove` (closed).

Order is (opened at, key), held in sorted lists: one of every item, one per agent and
one per group, so a filter on agents or a group reads only their items and
`olderThan` is a bisection. A cursor is a place in that order, not an offset: a page
after it starts right after that place, whatever opened or closed meanwhile, so an
item present throughout is listed exactly once across pages.

Bounded: at most `max_open` items and `max_bytes` of them (an item's size is its
record, its search text twice (its own, and its part of the joined texts a text search
keeps) and `ITEM_OVERHEAD`, measured: see the inbox guide); past
either a newly opened one is not held and is counted in `dropped` (one already held is
still replaced). The closes and warnings kept for the summary are bounded windows
(`MAX_CLOSES`, `MAX_WARNINGS`, the last hour).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from gateway.inbox.items import Item
from gateway.inbox.query import Cursor, Query
from gateway.inbox.search import Haystack

HOUR_MS = 3_600_000
MAX_CLOSES = 100_000  # answered interrupts remembered for the latency percentiles
MAX_WARNINGS = 100_000  # unrecognised entries and uncovered interrupts remembered
_AFTER_EVERY_KEY = "\U0010ffff"  # sorts after any key (keys are base64url)
ANSWERED = ("resolved", "cancelled")  # closes that count towards response latency
# What an item costs beyond its record's value and its search texts: the Item, its key
# and parsed strings, its places in the sorted lists and its entries in the dicts
# (tracemalloc over 2,000 typical items: about 850-900 bytes; tests/inbox holds it under).
ITEM_OVERHEAD = 1_000

Place = tuple[int, str]  # (opened at ms, key)


@dataclass(frozen=True, slots=True)
class Closure:
    agent: str
    status: str
    closed_at_ms: int
    latency_s: float | None  # None: when it opened is not known


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Item]
    next: Cursor | None
    total: int


def cost(item: Item) -> int:
    """The bytes an item is counted as holding."""
    return len(item.value) + 2 * len(item.text) + ITEM_OVERHEAD


class Index:
    def __init__(self, max_open: int, max_bytes: int = 1 << 62) -> None:
        self.max_open = max_open
        self.max_bytes = max_bytes
        self.bytes = 0  # what the items held are counted as (`cost`)
        self.dropped = 0  # opened interrupts not held: the index was full
        self._items: dict[str, Item] = {}
        self._all: list[Place] = []
        self._by_agent: dict[str, list[Place]] = {}
        self._by_group: dict[str, list[Place]] = {}
        # by reason: a reason filter reads only its own, not every open interrupt
        self._by_reason: dict[str, list[Place]] = {}
        # (expires at, key): an expiring-before filter counts its matches by bisection
        self._by_expiry: list[Place] = []
        # a thread's keys: one key (most threads), or a set of them
        self._by_thread: dict[tuple[str, str], str | set[str]] = {}
        self._reasons: dict[str, Counter[str]] = {}
        self._closes: deque[Closure] = deque(maxlen=MAX_CLOSES)
        # every search text in one string, for a text search over every open interrupt;
        # None: changed since it was built (built again by the next such search)
        self._haystack: Haystack | None = None
        self._warnings: deque[tuple[int, str, str]] = deque(maxlen=MAX_WARNINGS)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> Item | None:
        return self._items.get(key)

    # --- changes ------------------------------------------------------------------------

    def put(self, item: Item) -> bool:
        """Hold an opened interrupt (replacing the one under its key); False when the
        index is full and it is not held."""
        old = self._items.get(item.key)
        freed = 0 if old is None else cost(old)
        if (
            old is None
            and len(self._items) >= self.max_open
            or (self.bytes - freed + cost(item) > self.max_bytes)
        ):
            self.dropped += 1
            return False
        if old is not None:
            self._unlink(old)
        self._haystack = None
        self._items[item.key] = item
        self.bytes += cost(item)
        place = (item.opened_at_ms, item.key)
        bisect.insort(self._all, place)
        bisect.insort(self._by_agent.setdefault(item.agent, []), place)
        if item.group is not None:
            bisect.insort(self._by_group.setdefault(item.group, []), place)
        if item.reason is not None:
            bisect.insort(self._by_reason.setdefault(item.reason, []), place)
        if item.expires_at_ms is not None:
            bisect.insort(self._by_expiry, (item.expires_at_ms, item.key))
        thread = (item.agent, item.thread)
        held = self._by_thread.get(thread)
        if held is None or held == item.key:
            self._by_thread[thread] = item.key
        elif isinstance(held, str):
            self._by_thread[thread] = {held, item.key}
        else:
            held.add(item.key)
        self._reasons.setdefault(item.agent, Counter())[item.reason or ""] += 1
        return True

    def remove(self, key: str) -> Item | None:
        """Forget a closed interrupt; the item, or None when it was not held."""
        item = self._items.pop(key, None)
        if item is not None:
            self._unlink(item)
        return item

    def closed(self, closure: Closure) -> None:
        """Remember a close for the summary's latency (kept an hour, bounded)."""
        self._closes.append(closure)

    def warned(self, at_ms: int, agent: str, code: str) -> None:
        """Remember a warning the summary counts (unrecognised entries, uncovered
        interrupts)."""
        self._warnings.append((at_ms, agent, code))

    def forget_warnings(self) -> None:
        """Forget the counted warnings (their reader starts again, an hour back)."""
        self._warnings.clear()

    def _unlink(self, item: Item) -> None:
        self._haystack = None
        self.bytes -= cost(item)
        place = (item.opened_at_ms, item.key)
        _discard(self._all, place)
        _discard_in(self._by_agent, item.agent, place)
        if item.group is not None:
            _discard_in(self._by_group, item.group, place)
        if item.reason is not None:
            _discard_in(self._by_reason, item.reason, place)
        if item.expires_at_ms is not None:
            _discard(self._by_expiry, (item.expires_at_ms, item.key))
        thread = (item.agent, item.thread)
        keys = self._by_thread.get(thread)
        if keys == item.key:
            del self._by_thread[thread]
        elif isinstance(keys, set):
            keys.discard(item.key)
            if len(keys) == 1:
                self._by_thread[thread] = keys.pop()
        reasons = self._reasons.get(item.agent)
        if reasons is not None:
            reasons[item.reason or ""] -= 1
            if reasons[item.reason or ""] <= 0:
                del reasons[item.reason or ""]
            if not reasons:
                del self._reasons[item.agent]

    # --- answers ------------------------------------------------------------------------

    def query(self, query: Query, now_ms: int) -> Page:
        """The items matching `query`, oldest first, a page after its cursor."""
        lists, by_reason = self._candidates(query)
        cutoff = None if query.older_than_ms is None else now_ms - query.older_than_ms
        bounds = [
            len(lst) if cutoff is None else bisect.bisect_right(lst, (cutoff, _AFTER_EVERY_KEY))
            for lst in lists
        ]
        start = query.cursor
        starts = [
            0 if start is None else bisect.bisect_right(lst, (start.opened_at_ms, start.key))
            for lst in lists
        ]
        if query.text is not None and lists[0] is self._all:
            items, total = self._searched(query, starts[0], bounds[0])
        elif (matches := self._matcher(query, by_reason)) is None:  # no test of each item
            total = sum(bounds)
            after = _merged(lists, starts, bounds)
            places = list(itertools.islice(after, query.limit + 1))
            items = [self._items[key] for _, key in places]
        elif self._expiry_only(query, lists, cutoff):
            # every open interrupt is a candidate: the expiry list counts them, and the
            # page is read in order until it is full
            assert query.expiring_before_ms is not None
            total = bisect.bisect_left(self._by_expiry, (query.expiring_before_ms, ""))
            items = []
            for _, key in _merged(lists, starts, bounds):
                item = self._items[key]
                if matches(item):
                    items.append(item)
                    if len(items) > query.limit:
                        break
        else:
            total = 0
            items = []
            before = _merged(lists, [0] * len(lists), starts)
            total += sum(1 for _, key in before if matches(self._items[key]))
            for _, key in _merged(lists, starts, bounds):
                item = self._items[key]
                if matches(item):
                    total += 1
                    if len(items) <= query.limit:
                        items.append(item)
        more = len(items) > query.limit
        items = items[: query.limit]
        last = items[-1] if more else None
        return Page(items, None if last is None else Cursor(last.opened_at_ms, last.key), total)

    def _searched(self, query: Query, start: int, bound: int) -> tuple[list[Item], int]:
        """A text search over every open interrupt: the matches from `start` (up to one
        more than a page) and the count of all of them before `bound`."""
        assert query.text is not None
        if self._haystack is None:
            keys = [key for _, key in self._all]
            self._haystack = Haystack(keys, [self._items[key].text for key in keys])
        haystack, text = self._haystack, query.text
        rest = self._matcher(replace(query, text=None), False)
        if rest is None:  # one pass: the page's matches, then a count of the others
            places = list(itertools.islice(haystack.matching(text, start, bound), query.limit + 1))
            after = places[-1] + 1 if len(places) > query.limit else bound
            total = (
                haystack.count(text, 0, start) + len(places) + haystack.count(text, after, bound)
            )
            return [self._items[haystack.keys[p]] for p in places], total
        items: list[Item] = []
        total = 0
        for place in haystack.matching(text, 0, bound):
            item = self._items[haystack.keys[place]]
            if rest(item):
                total += 1
                if place >= start and len(items) <= query.limit:
                    items.append(item)
        return items, total

    def _expiry_only(self, query: Query, lists: list[list[Place]], cutoff: int | None) -> bool:
        """Whether expiring-before is the query's only filter (over every open interrupt)."""
        return (
            query.expiring_before_ms is not None
            and cutoff is None
            and query.text is None
            and len(lists) == 1
            and lists[0] is self._all
            and query.reason is None
        )

    def _candidates(self, query: Query) -> tuple[list[list[Place]], bool]:
        """The sorted lists to read, and whether they hold only the query's reason."""
        if query.agents:
            return [self._by_agent.get(a, []) for a in dict.fromkeys(query.agents)], False
        if query.group is not None:
            return [self._by_group.get(query.group, [])], False
        if query.reason is not None:
            return [self._by_reason.get(query.reason, [])], True
        return [self._all], False

    def _matcher(self, query: Query, by_reason: bool) -> Callable[[Item], bool] | None:
        tests: list[Callable[[Item], bool]] = []
        if query.group is not None and query.agents:
            group = query.group
            tests.append(lambda i: i.group == group)
        if query.reason is not None and not by_reason:
            reason = query.reason
            tests.append(lambda i: i.reason == reason)
        if query.expiring_before_ms is not None:
            before = query.expiring_before_ms
            tests.append(lambda i: i.expires_at_ms is not None and i.expires_at_ms < before)
        if query.text is not None:
            text = query.text
            tests.append(lambda i: text in i.text)
        if not tests:
            return None
        if len(tests) == 1:
            return tests[0]
        return lambda i: all(t(i) for t in tests)

    def thread(self, agent: str, thread: str) -> list[Item]:
        """A thread's open interrupts, oldest first (one run's in the run's order)."""
        keys = self._by_thread.get((agent, thread), ())
        found = [self._items[keys]] if isinstance(keys, str) else [self._items[k] for k in keys]
        return sorted(found, key=lambda i: (i.opened_at_ms, i.position, i.key))

    def agents(self) -> Iterable[str]:
        return self._by_agent.keys()

    def open_of(self, agent: str) -> int:
        return len(self._by_agent.get(agent, ()))

    def reasons_of(self, agent: str) -> dict[str, int]:
        return dict(self._reasons.get(agent, {}))

    def closes(self, now_ms: int) -> list[Closure]:
        """The closes of the last hour (older ones are dropped)."""
        while self._closes and self._closes[0].closed_at_ms < now_ms - HOUR_MS:
            self._closes.popleft()
        return [c for c in self._closes if c.closed_at_ms >= now_ms - HOUR_MS]

    def warnings(self, now_ms: int) -> list[tuple[int, str, str]]:
        """The counted warnings of the last hour (older ones are dropped)."""
        while self._warnings and self._warnings[0][0] < now_ms - HOUR_MS:
            self._warnings.popleft()
        return [w for w in self._warnings if w[0] >= now_ms - HOUR_MS]


def _merged(lists: list[list[Place]], starts: list[int], stops: list[int]) -> Iterator[Place]:
    slices = [itertools.islice(lst, a, b) for lst, a, b in zip(lists, starts, stops, strict=True)]
    if len(slices) == 1:
        return iter(slices[0])
    return heapq.merge(*slices)


def _discard(places: list[Place], place: Place) -> None:
    at = bisect.bisect_left(places, place)
    if at < len(places) and places[at] == place:
        del places[at]


def _discard_in(lists: dict[str, list[Place]], name: str, place: Place) -> None:
    places = lists.get(name)
    if places is None:
        return
    _discard(places, place)
    if not places:
        del lists[name]


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of `values` (None when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * fraction // 1))
    return ordered[int(rank) - 1]
