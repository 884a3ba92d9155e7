"""Findings and the one preview every finding's text renders values with."""

from __future__ import annotations

import pytest

from gateway.core.values.findings import CLIP_CHARS, PREVIEW_CHARS, Finding, clip, pointer, preview


def nested(depth: int, leaf: object = "x", kind: type = list) -> object:
    value = leaf
    for _ in range(depth):
        value = [value] if kind is list else {"type": value}
    return value


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("run-1", "'run-1'"),
        (None, "null"),
        (True, "true"),
        (3, "3"),
        (2.5, "2.5"),
        ([1, "a", None], "[1, 'a', null]"),
        ({"k": [False]}, "{'k': [false]}"),
        ([], "[]"),
        ({}, "{}"),
    ],
)
def test_small_values_are_shown_whole(value, shown):
    assert preview(value) == shown


@pytest.mark.parametrize(
    "value",
    [
        nested(1_000),
        nested(1_000, kind=dict),
        nested(100_000),  # far past the interpreter's recursion limit
        "x" * 1_000_000,
        list(range(1_000_000)),
        {str(n): n for n in range(100_000)},
        10**100_000,  # beyond the interpreter's int-to-text limit
        [10**5000, "\ud800"],
        object(),
    ],
    ids=[
        "list1000",
        "dict1000",
        "list100000",
        "long_str",
        "long_list",
        "wide_dict",
        "bigint",
        "bigint_in_list",
        "not_json",
    ],
)
def test_any_value_renders_bounded_without_raising(value):
    shown = preview(value)
    assert isinstance(shown, str)
    assert 0 < len(shown) <= PREVIEW_CHARS + 3
    assert "\n" not in shown


def test_a_cut_preview_says_so():
    assert preview("y" * 500).endswith("...")
    assert preview(nested(1_000)).startswith("[[[[")


def test_a_finding_and_pointer_round_trip_to_json():
    finding = Finding("protocol_violation", "d", "i", pointer("a/b", "c~d", 0), "rule")
    assert finding.to_json() == {
        "code": "protocol_violation",
        "interruptId": "i",
        "path": "/a~1b/c~0d/0",
        "rule": "rule",
        "detail": "d",
    }


def test_clip_keeps_short_text_and_cuts_long_text_saying_so():
    assert clip("/messages/0/role") == "/messages/0/role"
    assert clip("a" * CLIP_CHARS) == "a" * CLIP_CHARS
    assert clip("/" + "k" * 100_000) == "/" + "k" * (CLIP_CHARS - 1) + "..."
    assert clip("abcdef", 3) == "abc..."
