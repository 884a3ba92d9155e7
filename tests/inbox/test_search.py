"""The joined search texts find what testing each text finds."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from gateway.inbox.search import JOINT, Haystack, searchable


def found(texts: list[str], needle: str, first: int = 0, stop: int | None = None) -> list[int]:
    stop = len(texts) if stop is None else stop
    haystack = Haystack([str(n) for n in range(len(texts))], texts)
    places = list(haystack.matching(needle, first, stop))
    assert haystack.count(needle, first, stop) == len(places)
    return places


def test_each_matching_item_once_in_order_within_the_places_asked() -> None:
    texts = ["approve the order", "order order order", "nothing", "", "the order"]
    assert found(texts, "order") == [0, 1, 4]
    assert found(texts, "order", 2) == [4]
    assert found(texts, "order", 1, 4) == [1]
    assert found(texts, "order", 5) == []
    assert found(texts, "order", 3, 1) == []
    assert found(texts, "absent") == []


def test_a_needle_is_found_as_written_not_as_a_pattern() -> None:
    assert found(["a.c", "abc", "(x)*"], "a.c") == [0]
    assert found(["a.c", "abc", "(x)*"], "(x)*") == [2]


def test_nothing_to_find_finds_nothing() -> None:
    assert found(["a", "b"], "") == []
    assert found([], "a") == []
    assert found(["ab", "cd"], "b" + JOINT + "c") == []  # no text holds the joint


def test_a_search_text_and_a_query_hold_no_joint() -> None:
    assert searchable("Line one\nLine TWO") == "line one line two"


@given(
    st.lists(st.text(alphabet="aAb \n", max_size=8).map(searchable), max_size=12),
    st.text(alphabet="ab \n", min_size=1, max_size=3),
    st.integers(0, 13),
    st.integers(0, 13),
)
def test_as_testing_every_text(texts: list[str], needle: str, first: int, stop: int) -> None:
    stop = min(stop, len(texts))
    expected = [n for n, text in enumerate(texts) if first <= n < stop and needle in text]
    assert found(texts, needle, first, stop) == expected


def test_at_size_as_testing_every_text() -> None:
    rng = random.Random(3)
    words = ["ab", "ba", "x", "thread-1"]
    texts = [" ".join(rng.choice(words) for _ in range(6)) for _ in range(5_000)]
    for needle in ("thread-1 x", "ab ba", "x x x", "zz"):
        assert found(texts, needle) == [n for n, t in enumerate(texts) if needle in t]
