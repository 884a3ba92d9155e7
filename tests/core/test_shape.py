"""Reading a RunAgentInput (gateway.core.reading.shape): unknown versus malformed, and
stripping by JSON Pointer without touching anything else."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.reading.shape import MANY_ERRORS, read_by_errors, read_input, remove_paths
from tests.core.factories import entry, run_input


def test_a_well_formed_input_reads_cleanly():
    raw = run_input([entry("int-1", payload={"x": 1})], state={"s": 1}, forwardedProps=[1])
    shape = read_input(raw)
    assert shape.model is not None
    assert shape.doc == raw
    assert (shape.malformed, shape.unknown, shape.stripped_unions) == ([], [], [])
    assert shape.model.ids() == ["int-1"]
    assert shape.model.entry(0) == ("int-1", "resolved", {"x": 1})
    assert shape.model.entry(0).payload == {"x": 1}


def test_unknown_members_are_located_at_every_level():
    raw = run_input([entry("int-1", sig="s")], newTopLevel=1)
    raw["messages"][0]["tone"] = "warm"
    raw["tools"] = [{"name": "t", "description": "d", "icon": "x"}]
    raw["context"] = [{"description": "d", "value": "v", "weight": 2}]
    shape = read_input(raw)
    assert shape.malformed == []
    assert sorted(shape.unknown) == sorted(
        [
            ("newTopLevel",),
            ("messages", 0, "tone"),
            ("resume", 0, "sig"),
            ("tools", 0, "icon"),
            ("context", 0, "weight"),
        ]
    )


@pytest.mark.parametrize("where", ["state", "forwardedProps"])
def test_open_objects_are_never_walked(where):
    raw = run_input(**{where: {"unknown": {"deeper": {"unknown": 1}}}})
    raw["resume"] = [entry(payload={"unknown": 1}, metadata={"unknown": 2})]
    raw["tools"] = [{"name": "t", "description": "d", "parameters": {"unknown": 3}}]
    shape = read_input(raw)
    assert shape.unknown == []
    assert shape.malformed == []


def test_an_unrecognised_union_member_is_stripped_not_malformed():
    raw = run_input()
    raw["messages"] = [
        {"id": "m-0", "role": "hologram", "content": "x"},
        {"id": "m-1", "role": "user", "content": "hi"},
        {"id": "m-2", "role": "telepathy"},
    ]
    shape = read_input(raw)
    assert shape.malformed == []
    # paths point into the raw input
    assert [path for path, _ in shape.stripped_unions] == [("messages", 0), ("messages", 2)]
    assert shape.doc is not None
    assert shape.doc["messages"] == [{"id": "m-1", "role": "user", "content": "hi"}]
    assert len(raw["messages"]) == 3  # the raw input is untouched


def test_a_missing_discriminator_is_malformed():
    raw = run_input()
    raw["messages"] = [{"id": "m-0", "content": "x"}]
    shape = read_input(raw)
    assert shape.model is None
    assert [where for where, _ in shape.malformed] == ["/messages/0"]


def test_malformed_locations_are_pointers_into_the_raw_input():
    raw = run_input([entry("int-1", status="done"), {"status": "cancelled"}])
    raw["messages"][0]["content"] = 7
    shape = read_input(raw)
    assert shape.model is None
    # content is a union (string or parts): pydantic reports each branch at one location
    assert sorted({where for where, _ in shape.malformed}) == [
        "/messages/0/content",
        "/resume/0/status",
        "/resume/1/interruptId",
    ]
    assert all(message.startswith(where) for where, message in shape.malformed)


# --- remove_paths ----------------------------------------------------------------------------


def test_remove_paths_removes_exactly_the_paths_and_copies_what_it_changes():
    doc = {"a": {"b": 1, "c": 2}, "l": [0, 1, 2, 3], "keep": {"deep": [1]}}
    pristine = copy.deepcopy(doc)
    out = remove_paths(doc, [("a", "b"), ("l", 1), ("l", 3)])
    assert out == {"a": {"c": 2}, "l": [0, 2], "keep": {"deep": [1]}}
    assert doc == pristine
    assert out["keep"] is doc["keep"]  # untouched branches are shared


def test_remove_paths_with_nothing_to_remove_returns_the_document():
    doc = {"a": 1}
    assert remove_paths(doc, []) is doc


def test_removing_a_member_and_its_parent_removes_the_parent():
    doc = {"resume": [{"interruptId": "a", "x": 1}, {"interruptId": "b"}]}
    for paths in ([("resume", 0, "x"), ("resume", 0)], [("resume", 0), ("resume", 0, "x")]):
        assert remove_paths(doc, paths) == {"resume": [{"interruptId": "b"}]}


def test_paths_that_do_not_exist_are_ignored():
    doc = {"a": [1], "b": {"c": 1}}
    assert remove_paths(doc, [("z",), ("a", 5), ("b", "q", "r"), ("a", 0, "x")]) == doc


def test_alternatives_failing_at_one_location_are_one_malformed_finding():
    raw = run_input()
    raw["messages"] = [{"id": "m", "role": "user", "content": 7}]
    shape = read_input(raw)
    assert [where for where, _ in shape.malformed] == ["/messages/0/content"]


@pytest.mark.parametrize("tag", [5, None, True, ["user"], {"r": 1}])
@pytest.mark.parametrize("where", ["role", "content_type"])
def test_a_union_tag_that_is_not_a_string_is_malformed_not_stripped(tag, where):
    raw = run_input()
    if where == "role":
        raw["messages"] = [{"id": "m-0", "role": tag, "content": "x"}]
        at = "/messages/0"
    else:
        raw["messages"] = [{"id": "m-0", "role": "user", "content": [{"type": tag, "text": "x"}]}]
        at = "/messages/0/content/0"
    shape = read_input(raw)
    assert shape.stripped_unions == []
    assert at in [where_ for where_, _ in shape.malformed]


def nested(depth: int, leaf: object) -> object:
    value = leaf
    for _ in range(depth):
        value = [value] if isinstance(value, str) or depth % 2 else {"a": value}
    return value


@pytest.mark.parametrize(
    ("message", "at"),
    [
        ({"id": "m", "role": "DEEP", "content": "x"}, "/messages/0"),
        (
            {"id": "m", "role": "user", "content": [{"type": "DEEP", "text": "x"}]},
            "/messages/0/content/0",
        ),
        (
            {"id": "m", "role": "user", "content": [{"type": "image", "source": {"type": "DEEP"}}]},
            "/messages/0/content/0/source",
        ),
    ],
)
@pytest.mark.parametrize("depth", [1, 1000])
def test_a_deeply_nested_union_tag_is_malformed_and_nothing_reaches_stderr(
    message, at, depth, capfd
):
    raw = run_input()
    deep = nested(depth, "user")
    message = copy.deepcopy(message)
    for holder in (message, *(message.get("content") or [])[:1]):
        if isinstance(holder, dict):
            for key in ("role", "type"):
                if holder.get(key) == "DEEP":
                    holder[key] = deep
            source = holder.get("source")
            if isinstance(source, dict) and source.get("type") == "DEEP":
                source["type"] = deep
    raw["messages"] = [message]
    shape = read_input(raw)
    assert [where for where, _ in shape.malformed] == [at]
    assert capfd.readouterr().err == ""


def test_stripping_thousands_of_members_maps_every_path_back_to_the_raw_input():
    raw = run_input()
    robots = [{"id": f"r{i}", "role": "robot", "content": "x"} for i in range(3000)]
    users = [{"id": f"u{i}", "role": "user", "content": "x", "extra": i} for i in range(3000)]
    raw["messages"] = [m for pair in zip(robots, users, strict=True) for m in pair]
    shape = read_input(raw)
    assert shape.model is not None
    assert [p for p, _ in shape.stripped_unions] == [("messages", 2 * i) for i in range(3000)]
    assert shape.unknown == [("messages", 2 * i + 1, "extra") for i in range(3000)]
    assert all(raw["messages"][p[1]]["extra"] == p[1] // 2 for p in shape.unknown)


def test_stripped_content_parts_map_back_within_each_message():
    raw = run_input()
    part = {"type": "text", "text": "x"}
    raw["messages"] = [
        {"id": f"u{i}", "role": "user", "content": [{"type": "hologram"}, {**part, "z": i}]}
        for i in range(2000)
    ]
    shape = read_input(raw)
    assert shape.model is not None
    assert [p for p, _ in shape.stripped_unions] == [
        ("messages", i, "content", 0) for i in range(2000)
    ]
    assert shape.unknown == [("messages", i, "content", 1, "z") for i in range(2000)]


AGREEMENT_CASES = [
    [
        {"id": "1", "role": "robot", "content": "x"},
        {"id": "2", "role": "user", "content": [{"type": "holo"}, {"type": "text", "text": "t"}]},
        {"id": "3", "role": "user", "content": [{"type": "image", "source": {"type": "ftp"}}]},
        {"id": "4", "role": "tool", "toolCallId": "c", "content": [{"type": "smell"}]},
        {"id": "5", "role": "assistant", "content": [{"type": "holo"}]},
    ],
    [{"id": "1", "role": "user", "content": [{"type": "text", "text": "t", "z": 1}], "y": 2}],
    # an extra member named like the tag: located by the schema, not by the name
    [{"id": "1", "role": "user", "content": "x", "user": {"z": 1}, "z": 2}],
    [{"id": "1", "role": "user", "content": 7}],
    [{"id": "1", "role": "user"}],
    [{"id": "1", "role": "assistant", "toolCalls": [{"id": "c", "type": "function"}]}],
    [{"role": "developer", "content": "x", "id": 5, "extra": []}],
]


@pytest.mark.parametrize("messages", AGREEMENT_CASES)
def test_the_typed_dict_reading_agrees_with_the_protocols_models(messages):
    """One validation without models finds what the protocol's models find: the same
    verdict, the same unknown members, the same unrecognised union members."""
    from ag_ui.core import RunAgentInput
    from pydantic import ValidationError

    from gateway.core.reading.strip import _raw_path, unknown_members

    raw = run_input([entry("int-1", sig="s")], newTopLevel=1)
    raw["messages"] = messages
    shape = read_input(raw)
    try:
        model = RunAgentInput.model_validate(raw, strict=True, by_alias=True, by_name=False)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        tags = [_raw_path(raw, e["loc"]) for e in errors if e["type"] == "union_tag_invalid"]
        if len(tags) == len(errors):  # only unrecognised members: valid once they are gone
            assert shape.model is not None
            assert [p for p, _ in shape.stripped_unions] == tags
        else:
            assert shape.model is None and shape.malformed
        return
    assert shape.model is not None and shape.malformed == [] and shape.stripped_unions == []
    found: list = []
    unknown_members(model, raw, (), found)
    assert sorted(shape.unknown, key=str) == sorted(found, key=str)


def _by_pass_and_by_errors(monkeypatch, raw):
    """The shape read through the one pass, and read error by error (the strict validator)."""
    from gateway.core.reading import shape as shape_module

    taken: list[bool] = []
    flood = shape_module._flood

    def recorded(*args):  # type: ignore[no-untyped-def]
        found = flood(*args)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(shape_module, "_flood", recorded)
    by_pass = read_input(raw)
    assert taken == [True]  # read by the one pass, not error by error
    assert len(by_pass.unknown) + len(by_pass.stripped_unions) > MANY_ERRORS
    monkeypatch.undo()
    return by_pass, read_by_errors(raw)


def test_a_flood_of_extra_members_is_found_by_one_pass_exactly_as_by_the_errors(monkeypatch):
    raw = run_input([entry("int-1", sig="s")], **{f"top{i}": i for i in range(200)})
    call = {"id": "c", "type": "function", "z": 1, "function": {"name": "f", "arguments": ""}}
    raw["messages"] = [
        {"id": f"m{i}", "y": 1, "role": "assistant", "toolCalls": [{**call, "z": i}]}
        for i in range(200)
    ]
    raw["tools"] = [{"name": "t", "description": "d", "icon": "x"}]
    by_pass, by_errors = _by_pass_and_by_errors(monkeypatch, raw)
    assert by_pass.model is not None and by_errors.model is not None
    # in the same order (a member's fields first, then its extra members): 50 are listed
    assert by_pass.unknown == by_errors.unknown
    assert by_pass.unknown[:3] == [
        ("messages", 0, "toolCalls", 0, "z"),
        ("messages", 0, "y"),
        ("messages", 1, "toolCalls", 0, "z"),
    ]
    assert by_pass.stripped_unions == by_errors.stripped_unions == []


def test_extra_members_in_content_parts_are_read_error_by_error_alike():
    """A content part's extra member fails the string alternative of `content` too: the
    pass does not count that error, so such a flood is read error by error."""
    raw = run_input([entry("int-1", sig="s")])
    raw["messages"] = [
        {"id": f"m{i}", "role": "user", "content": [{"type": "text", "z": i, "text": "t"}]}
        for i in range(300)
    ]
    shape = read_input(raw)
    assert shape.model is not None
    assert shape.unknown[:300] == [("messages", i, "content", 0, "z") for i in range(300)]


def test_a_flood_of_unrecognised_roles_and_extra_members_is_read_by_one_pass(monkeypatch):
    raw = run_input([entry("int-1", sig="s")], top=1)
    robots = [{"id": f"r{i}", "role": "robot", "content": "x", "q": 1} for i in range(300)]
    users = [{"id": f"u{i}", "role": "user", "extra": i, "content": "x"} for i in range(300)]
    raw["messages"] = [m for pair in zip(robots, users, strict=True) for m in pair]
    raw["messages"].append({"id": "s", "role": "robot", "content": "y"})
    by_pass, by_errors = _by_pass_and_by_errors(monkeypatch, raw)
    assert by_pass.model is not None and by_errors.model is not None
    assert by_pass.unknown == by_errors.unknown
    assert by_pass.stripped_unions == by_errors.stripped_unions
    assert (
        by_pass.removed
        == by_errors.removed
        == [("messages", 2 * i) for i in range(300)] + [("messages", 600)]
    )
    assert by_pass.unknown[0] == ("messages", 1, "extra") and by_pass.unknown[-1] == ("top",)


def test_a_flood_the_pass_does_not_account_for_is_read_error_by_error():
    raw = run_input([entry("int-1", sig="s")])
    raw["messages"] = [{"id": f"u{i}", "role": "user", "extra": i} for i in range(300)]
    shape = read_input(raw)  # every message lacks its content, and has an extra member
    assert shape.model is None and shape.unknown == []
    # the first 50 locations listed, the validator's other errors counted
    assert [w for w, _ in shape.malformed] == [f"/messages/{i}/content" for i in range(50)]
    assert shape.unlisted == 250
    raw["messages"][5]["role"] = 5  # one tag that is no string among extra members
    for message in raw["messages"]:
        message["content"] = "x"
    shape = read_input(raw)
    assert shape.model is None and [w for w, _ in shape.malformed] == ["/messages/5"]


_TAGS = st.one_of(
    st.sampled_from(["user", "assistant", "text", "image", "url"]),
    st.lists(st.just("user"), max_size=2),
    st.dictionaries(st.sampled_from(["role", "type"]), st.just("x"), max_size=1),
    st.integers(),
)
_PARTS = st.lists(
    st.fixed_dictionaries(
        {"type": _TAGS},
        optional={
            "text": st.just("role"),
            "source": st.fixed_dictionaries({"type": _TAGS}),
            "data": st.fixed_dictionaries({"role": _TAGS}),  # a `role` that is no union tag
        },
    ),
    max_size=3,
)
_MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"id": st.just("m"), "role": _TAGS},
        optional={"content": st.one_of(st.just('"role":['), _PARTS)},
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(_MESSAGES, st.booleans())
def test_the_text_of_the_messages_rules_out_non_text_tags_only_when_there_are_none(messages, big):
    from gateway.core.reading.shape import _container_tags_possible, _non_text_tags

    raw = {"threadId": "t", "runId": "r", "messages": messages}
    if big:
        raw["state"] = {"n": 10**30}  # not written by orjson: never shallow
    found = _non_text_tags(raw)
    assert _container_tags_possible(messages) or not found
    if big and found:  # found before any validator meets the input, as before
        assert read_input(raw).malformed == found


def test_the_validators_errors_read_from_its_json_are_its_errors():
    """A flood of errors is read from the validator's JSON a slice at a time: the same
    errors, in the same order, whatever the member names hold."""
    from pydantic import ValidationError

    from gateway.core.reading import shape as shape_module
    from gateway.core.reading.input_schema import validator

    raw = run_input([entry("int-1")])
    odd = ['a"},{"type":"x', "\\", "é\u0001", "}", '{"type":"extra_forbidden"']
    raw["messages"] = [
        {"id": i, "role": "user", "content": "x", odd[i % len(odd)]: i} for i in range(700)
    ]
    with pytest.raises(ValidationError) as caught:
        validator().validate_python(raw, strict=True)
    errors = shape_module._Errors(caught.value)
    assert errors.count > shape_module.ERRORS_AT_ONCE
    read = [(at, e["type"], tuple(e["loc"]), e["msg"]) for at, e in errors.read()]
    expected = caught.value.errors(include_url=False, include_input=False, include_context=False)
    assert read == [(n, e["type"], e["loc"], e["msg"]) for n, e in enumerate(expected)]
    # a slice of skipped kinds alone is not parsed, and every index stays the validator's
    kept = [at for at, _ in errors.read(frozenset({"extra_forbidden"}))]
    assert set(kept) >= {n for n, e in enumerate(expected) if e["type"] != "extra_forbidden"}
    # errors from one in the slice read last on, extra members not counted
    last = max(n for n, e in enumerate(expected) if e["type"] != "extra_forbidden")
    assert errors.rest(last) == 1 and errors.rest(len(expected) - 1) == 0


def test_a_flood_of_unrecognised_sources_is_malformed_read_by_the_one_pass(monkeypatch):
    """Each image part's source is of a type the protocol does not define: stripping it
    would leave the part without its required source. The one pass says so without
    validating the stripped input, as reading every error does."""
    from gateway.core.reading import shape as shape_module

    raw = run_input([entry("int-1")])
    part = {"type": "image", "source": {"type": "s3", "value": "v"}}
    raw["messages"] = [
        {"id": "r", "role": "robot"},
        {"id": "m", "role": "user", "content": [{"type": "holo"}, *[part] * 400]},
    ]
    checked: list[object] = []
    monkeypatch.setattr(shape_module, "conforms", lambda *args, **kw: checked.append(args))
    shape = read_input(raw)
    assert checked == []  # the pass found it
    monkeypatch.undo()
    assert shape.model is None and shape.unlisted == 350
    assert [w for w, _ in shape.malformed] == [
        f"/messages/1/content/{i}/source" for i in range(1, 51)
    ]
    assert "'s3'" in shape.malformed[0][1] and "required" in shape.malformed[0][1]
    assert shape.malformed == read_by_errors(raw).malformed


def test_a_flood_of_unrecognised_roles_with_one_malformed_message_is_malformed():
    raw = run_input([entry("int-1")])
    raw["messages"] = [{"id": "r", "role": "robot"}] * 600 + [{"id": 1, "role": "user"}]
    shape = read_input(raw)
    assert shape.model is None and shape.unlisted == 0
    assert [w for w, _ in shape.malformed] == ["/messages/600/id", "/messages/600/content"]
    assert shape.malformed == read_by_errors(raw).malformed
    raw["messages"][3] = {"id": "r", "role": 7}  # a tag that is no string: located
    assert [w for w, _ in read_input(raw).malformed][0] == "/messages/3"
