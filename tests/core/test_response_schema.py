"""Checking resolved payloads against `responseSchema` (gateway.core.response_schema)."""

from __future__ import annotations

import socket

import pytest

from gateway.core.response_schema import MAX_ERRORS, check

APPROVAL = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("payload", [{"approved": True}, {"approved": False, "note": "careful"}])
def test_a_matching_payload_is_ok(payload):
    result = check(APPROVAL, payload)
    assert (result.ok, result.usable, result.problems) == (True, True, ())


@pytest.mark.parametrize(
    ("payload", "pointers"),
    [
        ({"approved": "yes"}, ["/approved"]),
        ({}, [""]),
        ({"approved": True, "extra": 1}, [""]),
        ({"approved": 1, "note": 2}, ["/approved", "/note"]),
        ([True], [""]),
        (None, [""]),
    ],
)
def test_a_breaking_payload_names_every_location(payload, pointers):
    result = check(APPROVAL, payload)
    assert (result.ok, result.usable) == (False, True)
    assert [where for where, _ in result.problems] == pointers
    assert all(message for _, message in result.problems)


def test_pointers_into_arrays_and_escaped_keys():
    schema = {
        "type": "object",
        "properties": {"a/b": {"type": "array", "items": {"type": "integer"}}},
    }
    result = check(schema, {"a/b": [1, "two", 3]})
    assert [where for where, _ in result.problems] == ["/a~1b/1"]


def test_problems_are_capped():
    schema = {"type": "array", "items": {"type": "string"}}
    result = check(schema, list(range(MAX_ERRORS + 10)))
    assert not result.ok
    assert len(result.problems) == MAX_ERRORS


def test_the_dialect_named_by_the_schema_is_used():
    # draft-04 reads exclusiveMaximum as a boolean; 2020-12 would reject that schema
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "maximum": 5,
        "exclusiveMaximum": True,
    }
    assert check(draft4, 5).ok is False
    assert check(draft4, 4).ok is True
    assert check({"maximum": 5, "exclusiveMaximum": True}, 4).usable is False


@pytest.mark.parametrize(
    "schema",
    [
        True,
        None,
        "string",
        [{"type": "string"}],
        {"type": "strnig"},
        {"type": 12},
        {"required": "approved"},
        {"$ref": "#/$defs/nowhere"},
        {"properties": {"a": {"$ref": "#/definitions/missing"}}},
    ],
)
def test_an_unusable_schema_is_reported_not_raised(schema):
    result = check(schema, {"a": 1})
    assert (result.ok, result.usable) == (True, False)
    assert result.detail


def test_remote_references_are_never_fetched(monkeypatch):
    attempts = []

    def refuse(self, address):
        attempts.append(address)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: refuse(None, a))
    schema = {"$ref": "http://127.0.0.1:9/answer.schema.json"}
    result = check(schema, {"approved": True})
    assert (result.ok, result.usable) == (True, False)
    assert attempts == []


def test_the_same_schema_in_another_key_order_gives_the_same_answer():
    reordered = dict(reversed(list(APPROVAL.items())))
    assert check(reordered, {"approved": "no"}) == check(APPROVAL, {"approved": "no"})


def test_several_failures_at_one_location_are_one_problem():
    schema = {"type": "object", "required": ["a", "b"], "minProperties": 3}
    result = check(schema, {})
    [(where, message)] = result.problems
    assert where == ""
    assert "'a' is a required property" in message and "'b' is a required property" in message
    assert "does not have enough properties" in message or "minProperties" in message
