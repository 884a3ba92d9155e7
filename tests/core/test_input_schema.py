"""The protocol's RunAgentInput schema as typed dicts, and the one pass along it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.core.reading.input_schema import REQUIRED, RULED_OUT, validator, walker
from tests.core.factories import entry, run_input


def _walk(raw: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    extras: list[Any] = []
    tags: list[Any] = []
    walker()(raw, (), extras, tags)
    return extras, [path for path, _ in tags]


def _error_paths(raw: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    with pytest.raises(ValidationError) as caught:
        validator().validate_python(raw, strict=True)
    return [(e["type"], e["loc"]) for e in caught.value.errors()]


def test_a_clean_input_has_nothing_to_find():
    raw = run_input([entry("int-1", payload={"any": {"thing": 1}})])
    validator().validate_python(raw, strict=True)
    assert _walk(raw) == ([], [])


def test_the_pass_finds_what_the_validator_reports_in_its_order():
    raw = run_input([entry("int-1", sig="s")], top=1)
    call = {"id": "c", "z": 1, "type": "function", "function": {"name": "f", "arguments": ""}}
    raw["messages"] = [
        {"id": "r", "role": "robot", "content": "x", "q": 1},  # unrecognised: not entered
        {"id": "a", "y": 2, "role": "assistant", "toolCalls": [call]},
        {"id": "u", "role": "user", "content": "x", "extra": 3},
    ]
    raw["state"] = {"open": {"objects": "are never walked"}}
    extras, tags = _walk(raw)
    assert tags == [("messages", 0)]
    assert extras == [
        ("messages", 1, "toolCalls", 0, "z"),  # a member's fields first, then its extras
        ("messages", 1, "y"),
        ("messages", 2, "extra"),
        ("resume", 0, "sig"),
        ("top",),
    ]
    kinds = [kind for kind, _ in _error_paths(raw)]
    assert kinds.count("extra_forbidden") == len(extras)
    assert kinds.count("union_tag_invalid") == len(tags)
    assert len(kinds) == len(extras) + len(tags)


def test_a_tag_that_is_not_a_string_is_left_to_the_validator():
    raw = run_input()
    raw["messages"] = [{"id": "m", "role": 5, "content": "x", "extra": 1}]
    assert _walk(raw) == ([], [])  # its error is not one the pass accounts for
    assert [kind for kind, _ in _error_paths(raw)] == ["union_tag_invalid"]


def test_an_unrecognised_required_source_is_listed_alike_with_or_without_extra_members():
    # the first part's is listed in the list's own loop, the second's (an extra member
    # beside it) by the part's own walk: the same entries, in the validator's order
    raw = run_input()
    s3 = {"type": "s3", "value": "v"}
    raw["messages"] = [
        {
            "id": "m",
            "role": "user",
            "content": [
                {"type": "image", "source": s3},
                {"type": "image", "source": s3, "q": 1},
                {"type": "image", "source": {"type": "url", "value": "https://x"}},
            ],
        }
    ]
    extras: list[Any] = []
    tags: list[Any] = []
    walker()(raw, (), extras, tags)
    content = ("messages", 0, "content")
    first, second = (*content, 0, "source"), (*content, 1, "source")
    kinds = [None if union is None else union.get("type", "required") for _, union in tags]
    assert [path for path, _ in tags] == [first, first, second, second, content]
    assert kinds == ["tagged-union", "required", "tagged-union", "required", None]
    assert tags[1][1] is REQUIRED and tags[3][1] is REQUIRED and tags[4][1] is RULED_OUT
    assert extras == [(*content, 1, "q")]
    errors = _error_paths(raw)
    assert [kind for kind, _ in errors].count("union_tag_invalid") == 2
    assert [loc for kind, loc in errors if kind == "extra_forbidden"] == [
        ("messages", 0, "user", "content", "alternative 1", 1, "image", "q")
    ]
