"""The answer form generated from a responseSchema, and read back into a payload."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.reading import response_schema
from gateway.inbox.page import form, render
from gateway.inbox.page.form import ABSENT, widget

# --- which widget for which schema ---------------------------------------------------------


def test_no_schema_is_approve_or_deny_with_an_optional_json_payload():
    w = widget(None)
    assert w.kind == "approval"
    assert form.payload(w, {"": "approve"}) == (True, [])
    assert form.payload(w, {"": "deny"}) == (False, [])
    assert form.payload(w, {"": "approve", "/json": '{"note": "ok"}'}) == ({"note": "ok"}, [])
    value, problems = form.payload(w, {})
    assert value is ABSENT and [p.message for p in problems] == ["choose approve or deny"]


def test_a_boolean_is_approve_or_deny():
    w = widget({"type": "boolean", "title": "Go ahead?"})
    assert (w.kind, w.label) == ("boolean", "Go ahead?")
    assert form.payload(w, {"": "approve"}) == (True, [])
    assert form.payload(w, {"": "deny"}) == (False, [])
    assert form.payload(w, {"": "maybe"})[1][0].message == "choose approve or deny"


def test_an_enum_is_a_choice_read_back_by_index():
    w = widget({"enum": ["low", 2, None, True]})
    assert w.kind == "choice" and w.choices == ("low", 2, None, True)
    assert form.payload(w, {"": "1"}) == (2, [])
    assert form.payload(w, {"": "2"}) == (None, [])
    assert form.payload(w, {"": "9"})[1][0].message == "not one of the choices"
    assert form.payload(w, {"": "-1"})[1][0].message == "not one of the choices"
    assert form.payload(w, {"": ""})[1][0].message == "choose one"


def test_an_enum_of_objects_or_too_many_values_is_json():
    assert widget({"enum": [{"a": 1}]}).kind == "json"
    assert widget({"enum": list(range(form.MAX_CHOICES + 1))}).kind == "json"
    assert widget({"enum": []}).kind == "json"


@pytest.mark.parametrize("kind", ["string", "number", "integer"])
def test_scalars_are_fields_with_their_constraints(kind):
    constraints = (
        {"minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"}
        if kind == "string"
        else {"minimum": 1, "maximum": 10}
    )
    w = widget({"type": kind, **constraints, "description": "how much"})
    assert w.kind == kind
    assert dict(w.constraints) == constraints
    assert w.description == "how much"


def test_numbers_read_as_json_numbers_only():
    number = widget({"type": "number"})
    assert form.payload(number, {"": "2.5"}) == (2.5, [])
    assert form.payload(number, {"": " 7 "}) == (7, [])
    for bad in ("1_000", "inf", "NaN", "0x10", "true", "", "1e999"):
        value, problems = form.payload(number, {"": bad})
        assert value is ABSENT and problems, bad
    integer = widget({"type": "integer"})
    assert form.payload(integer, {"": "3"}) == (3, [])
    assert form.payload(integer, {"": "3.0"}) == (3, [])
    assert form.payload(integer, {"": "3.5"})[1][0].message == "not an integer"


def test_an_object_of_fields_is_a_fieldset():
    schema = {
        "type": "object",
        "title": "Refund",
        "properties": {
            "amount": {"type": "integer", "minimum": 1},
            "reason": {"enum": ["damaged", "late"]},
            "note": {"type": "string"},
            "notify": {"type": "boolean"},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
        "required": ["amount", "reason"],
        "additionalProperties": False,
    }
    w = widget(schema)
    assert w.kind == "object"
    assert [(c.kind, c.path, c.required) for c in w.children] == [
        ("integer", "/amount", True),
        ("choice", "/reason", True),
        ("string", "/note", False),
        ("yesno", "/notify", False),
        ("object", "/address", False),
    ]
    assert [i.path for i in form.inputs(w)] == [
        "/amount",
        "/reason",
        "/note",
        "/notify",
        "/address/city",
    ]
    fields = {
        "/amount": "12",
        "/reason": "1",
        "/note": "",
        "/notify": "yes",
        "/address/city": "Oslo",
    }
    value, problems = form.payload(w, fields)
    assert problems == []
    assert value == {"amount": 12, "reason": "late", "notify": True, "address": {"city": "Oslo"}}
    assert response_schema.check(schema, value).ok
    # optional members left empty are left out; a required choice left empty is a problem
    value, problems = form.payload(w, {"/amount": "3", "/address/city": ""})
    assert value == {"amount": 3, "address": {"city": ""}}
    assert [(p.path, p.message) for p in problems] == [("/reason", "choose one")]


def test_member_names_are_escaped_as_json_pointers():
    w = widget(
        {"type": "object", "properties": {"a/b": {"type": "string"}, "c~d": {"type": "string"}}}
    )
    assert [c.path for c in w.children] == ["/a~1b", "/c~0d"]
    assert form.payload(w, {"/a~1b": "x", "/c~0d": "y"}) == ({"a/b": "x", "c~d": "y"}, [])


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}},
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        {"type": ["string", "null"]},
        {"$ref": "#/$defs/x", "$defs": {"x": {"type": "string"}}},
        {"type": "object", "properties": {"tags": {"type": "array"}}},
        {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
        {"type": "object", "properties": {}, "required": ["missing"]},
        {"type": "string", "const": "x"},
        {"type": "object", "properties": {"a": {"type": "string", "if": {}}}},
        {"type": "boolean", "const": True},
        {},
        True,
        "not a schema",
    ],
)
def test_anything_else_is_a_json_editor(schema):
    w = widget(schema)
    assert w.kind == "json"
    assert form.payload(w, {"": '["a", 1]'}) == (["a", 1], [])
    assert form.payload(w, {"": "  "}) == (ABSENT, [])
    value, problems = form.payload(w, {"": "{not json"})
    assert value is ABSENT and problems[0].message.startswith("not JSON")


def test_deep_or_wide_objects_fall_back_to_json():
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(form.MAX_DEPTH + 1):
        deep = {"type": "object", "properties": {"x": deep}}
    assert widget(deep).kind == "json"
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(100)}}
    assert widget(wide).kind == "json"


def test_annotations_do_not_stop_a_field():
    w = widget({"type": "string", "format": "email", "default": "a@b", "examples": ["x"]})
    assert w.kind == "string"


# --- rendering: every input the HTML has is one the reader reads ---------------------------


class _Inputs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("input", "select", "textarea"):
            name = dict(attrs).get("name")
            if name is not None:
                self.names.append(name)


def names_in(html: str) -> list[str]:
    parser = _Inputs()
    parser.feed(html)
    return parser.names


def test_rendered_inputs_are_named_by_prefix_and_pointer():
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "number"}, "ok": {"type": "boolean"}},
    }
    html = render.widget_html(widget(schema), "3:")
    assert names_in(html) == ["3:/amount", "3:/ok"]
    assert names_in(render.widget_html(widget(None), "0:")) == ["0:", "0:", "0:/json"]
    assert names_in(render.widget_html(widget({"type": "array"}), "1:")) == ["1:"]


def test_rendered_text_is_escaped():
    evil = '"><script>alert(1)</script>'
    schema = {
        "type": "object",
        "title": evil,
        "properties": {evil: {"enum": [evil], "description": evil}},
    }
    html = render.widget_html(widget(schema), "0:")
    assert "<script>" not in html and "&lt;script&gt;" in html
    html = render.widget_html(widget({"type": "array", "description": evil}), "0:")
    assert "<script>" not in html


# --- property: what a valid payload's fields say reads back as that payload ---------------

scalar_schemas = st.one_of(
    st.just({"type": "string"}),
    st.just({"type": "integer"}),
    st.just({"type": "number"}),
    st.lists(
        st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.none()),
        min_size=1,
        max_size=5,
        unique_by=lambda v: (type(v), v),
    ).map(lambda values: {"enum": values}),
)
names = st.text(alphabet="ab/~c", min_size=1, max_size=4)


def objects(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(names, children, min_size=1, max_size=4).map(
        lambda props: {"type": "object", "properties": props}
    )


schemas = st.recursive(scalar_schemas, objects, max_leaves=8).filter(
    lambda s: s.get("type") == "object"
)


@st.composite
def schema_and_value(draw: st.DrawFn) -> tuple[dict[str, Any], Any]:
    schema = draw(schemas)

    def value_of(s: dict[str, Any]) -> Any:
        if "enum" in s:
            return draw(st.sampled_from(s["enum"]))
        if s["type"] == "string":  # an optional string left empty is left out
            return draw(st.text(min_size=1, max_size=8))
        if s["type"] == "integer":
            return draw(st.integers(-(10**12), 10**12))
        if s["type"] == "number":
            return draw(st.floats(allow_nan=False, allow_infinity=False, width=32))
        return {
            k: value_of(v)
            for k, v in s["properties"].items()
            if v.get("type") == "object" or draw(st.booleans())
        }

    return schema, value_of(schema)


def fields_for(w: form.Widget, value: Any) -> dict[str, str]:
    """What a person types into the widget's inputs to mean `value`."""
    if w.kind == "object":
        fields: dict[str, str] = {}
        for child in w.children:
            member = form._member(child.path)
            if isinstance(value, dict) and member in value:
                fields.update(fields_for(child, value[member]))
        return fields
    if w.kind == "choice":
        index = next(i for i, c in enumerate(w.choices) if type(c) is type(value) and c == value)
        return {w.path: str(index)}
    if w.kind in ("number", "integer"):
        return {w.path: repr(value)}
    return {w.path: value}


@settings(max_examples=300, deadline=None)
@given(schema_and_value())
def test_valid_payloads_read_back_from_their_fields(pair):
    schema, value = pair
    w = widget(schema)
    assert w.kind == "object"
    got, problems = form.payload(w, fields_for(w, value))
    assert problems == []
    assert got == value
    assert response_schema.check(schema, got).ok


@settings(max_examples=300, deadline=None)
@given(schemas, st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=6))
def test_any_submitted_text_reads_without_raising(schema, fields):
    value, problems = form.payload(widget(schema), fields)
    assert (value is ABSENT) or not problems or isinstance(value, dict)
    for problem in problems:
        assert problem.message
