"""Checking resolved payloads against `responseSchema` (gateway.core.reading.response_schema)."""

from __future__ import annotations

import socket

import pytest

from gateway.core.reading.response_schema import MAX_ERRORS, check, prepare

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
    assert '"a" is a required property' in message and '"b" is a required property' in message
    assert "less than 3 properties" in message


# --- usable is decided from the schema alone; a payload never turns the check off ----------


def nested_array(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [10, 300, 1000])
def test_a_deep_payload_never_makes_a_usable_schema_unusable(depth):
    result = check(APPROVAL, nested_array(depth))
    assert result.usable is True
    assert result.ok is False


@pytest.mark.parametrize("depth", [300, 1000])
def test_a_payload_the_checker_cannot_read_is_not_checked_and_not_passed(depth):
    result = check({"uniqueItems": True, "items": {"uniqueItems": True}}, nested_array(depth))
    assert (result.ok, result.usable, result.could_not_check) == (False, True, True)
    assert "could not be checked" in result.detail


def chain(keyword: str, depth: int) -> dict:
    defs: dict = {
        f"a{i}": {keyword: [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]}
        for i in range(depth)
    }
    defs[f"a{depth}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/a0"}


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (chain("anyOf", 16), "expansion"),
        (chain("allOf", 18), "expansion"),
        ({"$defs": {"t": {"items": {"$ref": "#/$defs/t"}}}, "$ref": "#/$defs/t"}, "recursive"),
        ({"$ref": "#"}, "recursive"),
        ({"pattern": "^(?=a)a$"}, "usable JSON Schema"),  # lookaround: not linear-time
        ({"$anchor": "x", "$ref": "#x"}, "not supported"),
        ({"$ref": "file:///etc/passwd"}, "not a local JSON Pointer"),
        ({"enum": ["x" * 70_000]}, "over 65,536"),
        ({"allOf": [{}] * 5000}, "expansion"),
    ],
)
def test_schemas_beyond_the_limits_are_unusable_whatever_the_payload(schema, why):
    for payload in ({"approved": True}, 5, nested_array(1000)):
        result = check(schema, payload)
        assert (result.ok, result.usable) == (True, False)
        assert why in result.detail


def test_a_schema_nested_deeper_than_the_limit_is_unusable():
    schema: dict = {"type": "object"}
    for _ in range(80):
        schema = {"properties": {"a": schema}}
    assert "deeper than" in check(schema, {}).detail


def test_a_backtracking_pattern_is_matched_in_linear_time():
    result = check({"pattern": "^(a+)+$"}, "a" * 200_000 + "!")
    assert (result.ok, result.usable) == (False, True)


def test_a_shared_subschema_is_sized_once_per_reference():
    # a diamond, not a tree: four references to one 3-value subschema
    schema = {"$defs": {"s": {"type": "string"}}, "allOf": [{"$ref": "#/$defs/s"}] * 4}
    assert prepare(schema).validator is not None
    assert check(schema, "x").ok and not check(schema, 1).ok


def test_the_verdict_on_a_schema_is_cached_and_the_cache_is_bounded_by_bytes():
    from gateway.core.reading import response_schema

    schema = {"enum": ["y" * 60_000]}
    first = prepare(schema)
    assert prepare(schema) is first
    assert prepare(dict(schema)) is first  # another object, same bytes
    for n in range(400):
        prepare({"enum": [str(n) * 1000, "z" * 40_000]})
    assert response_schema._by_text.used <= response_schema.CACHE_BYTES


def test_errors_are_capped_and_never_embed_the_payload():
    schema = {"items": {"type": "string"}}
    payload = [n + 1000 for n in range(300)]
    result = check(schema, payload)
    assert len(result.problems) == MAX_ERRORS
    assert all("100" not in message for _, message in result.problems)


def test_a_large_breaking_payload_is_reported_without_details():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    result = check(schema, {"a": 1, "pad": "x" * 200_000})
    assert (result.ok, result.usable, result.could_not_check) == (False, True, False)
    assert [where for where, _ in result.problems] == [""]


def test_a_payload_over_the_checking_budget_is_not_checked():
    schema = {"items": {"allOf": [{"type": "integer"}] * 500}}
    result = check(schema, list(range(20_000)))
    assert (result.ok, result.could_not_check) == (False, True)
    assert "budget" in result.detail
    assert check(schema, list(range(10))).ok


def test_the_verdict_is_decided_when_the_interrupt_is_recorded_not_on_first_use():
    from gateway.core import apply_event, judge
    from gateway.core.reading import response_schema

    response_schema._by_text.clear()
    schema = {"type": "object", "properties": {"recorded": {"type": "integer"}}}
    unusable = {"$ref": "#/missing"}
    started = {"type": "RUN_STARTED", "threadId": "t", "runId": "r1"}
    state = apply_event(None, "t", started, 1).state
    interrupts = [
        {"id": "a", "reason": "r", "responseSchema": schema},
        {"id": "b", "reason": "r", "responseSchema": unusable},
    ]
    finished = {
        "type": "RUN_FINISHED",
        "threadId": "t",
        "runId": "r1",
        "outcome": {"type": "interrupt", "interrupts": interrupts},
    }
    state = apply_event(state, "t", finished, 2).state
    assert state is not None
    a, b = state.interrupts
    assert a.response_schema is not None
    assert response_schema.known(a.response_schema) is a.response_schema  # compiled already
    assert b.response_schema is None and "points nowhere" in (b.response_schema_unusable or "")
    resume = [
        {"interruptId": "a", "status": "resolved", "payload": {"recorded": "no"}},
        {"interruptId": "b", "status": "resolved", "payload": 1},
    ]
    raw = {"threadId": "t", "runId": "r2", "messages": [], "resume": resume}
    decision, _ = judge(state, raw, 3, thread_id="t")
    assert [r.code for r in decision.reasons] == ["payload_schema_mismatch"]
    assert [w.code for w in decision.warnings] == ["response_schema_unusable"]
    response_schema._by_text.clear()  # a restart: compiled again from the kept bytes
    assert judge(state, raw, 3, thread_id="t")[0] == decision


def test_one_run_judges_at_most_its_schema_budget_anew():
    from gateway.core import apply_event
    from gateway.core.reading import response_schema

    response_schema._by_text.clear()

    def schema(n: int) -> dict:
        props = {f"p{n}_{k}": {"type": "string", "maxLength": k} for k in range(450)}
        return {"type": "object", "properties": props}  # ~18 KB of JSON each

    started = {"type": "RUN_STARTED", "threadId": "t", "runId": "r1"}
    state = apply_event(None, "t", started, 1).state
    interrupts = [{"id": f"i{n}", "reason": "r", "responseSchema": schema(n)} for n in range(32)]
    interrupts.append({"id": "again", "reason": "r", "responseSchema": schema(0)})  # cached
    finished = {
        "type": "RUN_FINISHED",
        "threadId": "t",
        "runId": "r1",
        "outcome": {"type": "interrupt", "interrupts": interrupts[:31] + interrupts[32:]},
    }
    state = apply_event(state, "t", finished, 2).state
    assert state is not None
    kept = [i for i in state.interrupts if i.response_schema is not None]
    judged = sum(len(i.response_schema or b"") for i in kept if i.id != "again")
    assert judged <= response_schema.MAX_SCHEMA_BYTES_PER_RUN
    assert len(kept) >= 7 and state.interrupts[-1].response_schema is not None
    over = [i for i in state.interrupts if i.response_schema is None]
    assert over and all("schemas total over" in (i.response_schema_unusable or "") for i in over)
