"""The inbox's in-memory index: filters, order, paging under churn, bounds."""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest

from gateway.codec import interrupts as records
from gateway.inbox.index import Index, cost
from gateway.inbox.items import Item
from gateway.inbox.query import Query, QueryError, parse
from tests.inbox.support import opened


def item(agent="bot", thread="t1", interrupt="a", at_ms=1_000, **kw) -> Item:
    _, value = opened(agent, thread, interrupt, at_ms, **kw)
    return Item(records.Opened.from_json(value), value)


def keys(index: Index, query: Query, now_ms: int = 10_000) -> list[tuple[str, str, str]]:
    return [(i.agent, i.thread, i.interrupt) for i in index.query(query, now_ms).items]


@pytest.fixture
def index() -> Index:
    index = Index(1_000)
    index.put(item("bot", "t1", "a", 3_000, reason="approve", message="Ship the Order?"))
    index.put(item("bot", "t2", "a", 1_000, reason="input", expires_at_ms=5_000))
    index.put(item("cat", "t1", "x", 2_000, reason="approve", group="team"))
    index.put(item("dog", "t9", "y", 4_000, reason=None, group="team", expires_at_ms=9_000))
    return index


def test_everything_oldest_first(index: Index) -> None:
    page = index.query(Query(), 10_000)
    assert [i.opened_at_ms for i in page.items] == [1_000, 2_000, 3_000, 4_000]
    assert page.total == 4 and page.next is None


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"agent": ["bot"]}, [("bot", "t2", "a"), ("bot", "t1", "a")]),
        ({"agent": ["dog", "cat"]}, [("cat", "t1", "x"), ("dog", "t9", "y")]),
        ({"group": ["team"]}, [("cat", "t1", "x"), ("dog", "t9", "y")]),
        ({"group": ["team"], "agent": ["bot", "dog"]}, [("dog", "t9", "y")]),
        ({"reason": ["approve"]}, [("cat", "t1", "x"), ("bot", "t1", "a")]),
        ({"olderThan": ["7.5"]}, [("bot", "t2", "a"), ("cat", "t1", "x")]),  # opened <= 2,500
        ({"expiringBefore": ["6000"]}, [("bot", "t2", "a")]),
        ({"expiringBefore": ["1970-01-01T00:00:10Z"]}, [("bot", "t2", "a"), ("dog", "t9", "y")]),
        ({"q": ["ORDER"]}, [("bot", "t1", "a")]),
        ({"q": ["t9"], "agent": ["dog"]}, [("dog", "t9", "y")]),
        ({"agent": ["nobody"]}, []),
    ],
)
def test_filters(index: Index, params: dict[str, list[str]], expected) -> None:
    query = parse(params)
    assert keys(index, query) == expected
    assert index.query(query, 10_000).total == len(expected)


@pytest.mark.parametrize(
    "params",
    [
        {"limit": ["0"]},
        {"limit": ["501"]},
        {"limit": ["x"]},
        {"olderThan": ["-1"]},
        {"olderThan": ["soon"]},
        {"expiringBefore": ["tomorrow"]},
        {"cursor": ["!!"]},
        {"cursor": ["WzFd"]},  # [1]: not a cursor
        {"reason": ["a", "b"]},
        {"sort": ["newest"]},
        {"q": ["x" * 300]},
    ],
)
def test_a_parameter_it_cannot_read_is_refused_naming_it(params) -> None:
    with pytest.raises(QueryError, match=next(iter(params))):
        parse(params)


def test_pages_follow_each_other_with_a_cursor(index: Index) -> None:
    first = index.query(parse({"limit": ["3"]}), 10_000)
    assert first.total == 4 and len(first.items) == 3 and first.next is not None
    second = index.query(parse({"limit": ["3"], "cursor": [first.next.encode()]}), 10_000)
    assert [i.opened_at_ms for i in second.items] == [4_000] and second.next is None
    assert second.total == 4  # the total counts every match, not what follows the cursor


@pytest.mark.parametrize("filtered", [None, "reason", "q"])
def test_paging_under_churn_lists_each_item_present_throughout_once_in_order(filtered) -> None:
    rng = random.Random(7)
    index = Index(100_000)
    live: dict[str, Item] = {}

    def add(n: int) -> None:
        at = rng.randrange(0, 100_000)
        new = item(f"a{n % 5}", f"t{n}", "i", at, reason=rng.choice(["x", "y"]))
        index.put(new)
        live[new.key] = new

    for n in range(2_000):
        add(n)
    steady = set(live)  # present from start to end unless removed below
    seen: list[Item] = []
    params = {"limit": ["37"], **({"reason": ["x"]} if filtered == "reason" else {})}
    params |= {"q": ["t1"]} if filtered == "q" else {}
    cursor = None
    n = 2_000
    while True:
        page = index.query(parse({**params, **({"cursor": [cursor]} if cursor else {})}), 0)
        seen += page.items
        # churn between pages: some close (seen or not), some open (older or newer)
        for key in rng.sample(sorted(live), 5):
            index.remove(key)
            del live[key]
            steady.discard(key)
        for _ in range(5):
            add(n)
            n += 1
        if page.next is None:
            break
        cursor = page.next.encode()
    seen_keys = [i.key for i in seen]
    assert len(seen_keys) == len(set(seen_keys)), "an item was listed twice"
    order = [(i.opened_at_ms, i.key) for i in seen]
    assert order == sorted(order)
    wanted = {
        k
        for k in steady
        if filtered is None
        or (filtered == "reason" and live[k].reason == "x")
        or (filtered == "q" and "t1" in live[k].text)
    }
    assert len(wanted) > 100
    assert wanted <= set(seen_keys), "an item present throughout was skipped"


def test_past_the_cap_a_new_interrupt_is_not_held_and_is_counted() -> None:
    index = Index(2)
    assert index.put(item(thread="t1")) and index.put(item(thread="t2"))
    assert not index.put(item(thread="t3"))
    assert len(index) == 2 and index.dropped == 1
    assert index.put(item(thread="t2", at_ms=5))  # one already held is still replaced
    assert index.dropped == 1 and index.get(item(thread="t2").key).opened_at_ms == 5
    index.remove(item(thread="t1").key)
    assert index.put(item(thread="t3")) and len(index) == 2


def test_removing_forgets_an_item_everywhere(index: Index) -> None:
    gone = item("cat", "t1", "x", 2_000, group="team")
    assert index.remove(gone.key) is not None and index.remove(gone.key) is None
    assert keys(index, parse({"group": ["team"]})) == [("dog", "t9", "y")]
    assert index.thread("cat", "t1") == [] and "cat" not in set(index.agents())
    assert index.reasons_of("bot") == {"approve": 1, "input": 1}


def test_a_replaced_item_is_listed_once_at_its_new_place(index: Index) -> None:
    index.put(item("bot", "t2", "a", 9_000, reason="input"))
    assert keys(index, Query())[-1] == ("bot", "t2", "a") and len(index) == 4
    assert index.reasons_of("bot") == {"approve": 1, "input": 1}


def test_past_the_byte_cap_a_new_interrupt_is_not_held_either() -> None:
    small, large = item(thread="t1"), item(thread="t2", message="m" * 4_000)
    index = Index(100, max_bytes=cost(small) + cost(large) - 1)
    assert index.put(small) and not index.put(large) and index.dropped == 1
    assert index.bytes == cost(small)
    index.remove(small.key)
    assert index.bytes == 0 and index.put(large)


def test_what_an_item_is_counted_as_holding_is_at_least_what_it_holds() -> None:
    """The byte cap is only a bound if `cost` does not understate: measured here."""
    from bench.inboxprobe import record

    rng = random.Random(3)
    made = [record(rng, n, 10**12) for n in range(2_000)]
    index = Index(10_000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _, value in made:
            index.put(Item(records.Opened.from_json(value), value))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    values = sum(len(value) for _, value in made)  # allocated before: counted, not traced
    assert held + values <= index.bytes, (held + values) / len(made)


@pytest.mark.parametrize(
    "params",
    [
        {"reason": ["x"]},
        {"expiringBefore": ["50000"]},
        {"expiringBefore": ["50000"], "q": ["t1"]},
        {"q": ["t1"]},
        {"q": ["1 i"]},  # across the thread and the interrupt id
        {"q": ["t1"], "reason": ["y"]},
    ],
)
def test_the_filters_read_from_their_own_lists_answer_as_reading_every_item(params) -> None:
    """A reason filter reads its own list, an expiring-before filter counts by bisection,
    a text search finds its matches in the joined search texts: through opens and closes
    (and replaced items), each page and total is what testing every open interrupt gives."""
    rng = random.Random(11)
    index = Index(100_000)
    live: dict[str, Item] = {}
    for n in range(3_000):
        expires = rng.choice([None, rng.randrange(0, 100_000)])
        new = item(
            f"a{n % 4}",
            f"t{n % 1_500}",  # half the threads are opened again: items replaced
            "i",
            rng.randrange(0, 100_000),
            reason=rng.choice(["x", "y", None]),
            expires_at_ms=expires,
        )
        index.put(new)
        live[new.key] = new
        if n % 7 == 0:
            gone = rng.choice(sorted(live))
            index.remove(gone)
            del live[gone]
    query = parse({**params, "limit": ["50"]})

    def wanted(i: Item) -> bool:
        if query.reason is not None and i.reason != query.reason:
            return False
        if query.expiring_before_ms is not None and (
            i.expires_at_ms is None or i.expires_at_ms >= query.expiring_before_ms
        ):
            return False
        return query.text is None or query.text in i.text

    expected = sorted(
        (i for i in live.values() if wanted(i)), key=lambda i: (i.opened_at_ms, i.key)
    )
    page = index.query(query, 0)
    assert page.total == len(expected) > 50
    assert [i.key for i in page.items] == [i.key for i in expected[:50]]
    later = index.query(parse({**params, "limit": ["50"], "cursor": [page.next.encode()]}), 0)
    assert [i.key for i in later.items] == [i.key for i in expected[50:100]]


def test_a_text_search_sees_what_opened_or_closed_since_the_last_one(index: Index) -> None:
    assert index.query(parse({"q": ["later"]}), 10_000).total == 0
    index.put(item("bot", "t9", "z", 9_000, message="found later"))
    assert keys(index, parse({"q": ["later"]})) == [("bot", "t9", "z")]
    index.put(item("bot", "t9", "z", 9_000, message="replaced"))
    assert keys(index, parse({"q": ["later"]})) == []
    index.put(item("bot", "t8", "y", 8_000, message="later again"))
    index.remove(index.query(parse({"q": ["t8"]}), 10_000).items[0].key)
    assert keys(index, parse({"q": ["later"]})) == []
