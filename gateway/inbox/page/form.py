"""The answer form of one interrupt, generated from its `responseSchema` (pure).

`widget(schema)` says what to ask for; `payload(widget, fields)` reads the submitted
form fields back into the JSON payload of a `resolved` resume entry. Nothing here
renders HTML or checks the payload against the schema (the gateway's own check does
that, `gateway.core.reading.response_schema`): a widget only decides which inputs can
express the schema, and reading them back only converts text to JSON values.

- no schema: approve or deny (true or false), or a JSON payload given instead;
- `{"type": "boolean"}`: approve (true) or deny (false);
- `enum` of plain values: a choice among them;
- `string`, `number`, `integer`: a field (min/max/length/pattern shown as hints);
- `object` whose properties are all of the above (or such objects, a few levels
  deep): a fieldset, a boolean property as yes/no;
- anything else (arrays, combinators, `$ref`, several types, keywords a field cannot
  express): a JSON editor.

Field names: a widget's inputs are named by JSON Pointers below the payload's root
(`""` the root, `"/amount"` a property); the caller prefixes them per interrupt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Kind = Literal[
    "approval", "boolean", "yesno", "choice", "string", "number", "integer", "object", "json"
]

MAX_DEPTH = 4  # nested objects shown as fieldsets; deeper: a JSON editor
MAX_FIELDS = 64  # inputs one form may hold; more: a JSON editor
MAX_CHOICES = 200  # enum values shown as a choice; more: a JSON editor

# Keywords that only describe, or that the gateway's check enforces without an input
# needing to express them: a widget can still stand for a schema that has them.
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "$schema",
        "$id",
        "readOnly",
        "writeOnly",
        "deprecated",
        "format",
        "multipleOf",
    }
)
_SCALAR_KEYS = {
    "string": frozenset({"type", "minLength", "maxLength", "pattern"}),
    "number": frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "integer": frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "boolean": frozenset({"type"}),
}
_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"})
_CONSTRAINTS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
)


@dataclass(frozen=True, slots=True)
class Widget:
    """One part of a form: its kind, where its value goes, and what to show."""

    kind: Kind
    path: str = ""  # JSON Pointer of the value below the payload's root: the input's name
    label: str = ""
    description: str = ""
    required: bool = False
    choices: tuple[Any, ...] = ()  # a choice's values (JSON), submitted by index
    constraints: tuple[tuple[str, Any], ...] = ()  # (keyword, value), shown as hints
    children: tuple[Widget, ...] = field(default=())  # an object's properties
    schema: Any = None  # the schema this widget stands for (the JSON editor shows it)


@dataclass(frozen=True, slots=True)
class Problem:
    """A field whose text is no JSON value of its kind: `path` names the input."""

    path: str
    message: str


class _Absent:
    """An optional input left empty: the member is left out."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


def pointer(parent: str, name: str) -> str:
    """`parent` extended by one member name (RFC 6901 escaping)."""
    return parent + "/" + name.replace("~", "~0").replace("/", "~1")


def widget(schema: Any) -> Widget:
    """The widget that asks for a payload of `schema` (None: the interrupt has none)."""
    if schema is None:
        return Widget("approval")
    if isinstance(schema, dict):
        label = _text(schema.get("title"))
        description = _text(schema.get("description"))
        if _type(schema) == "boolean" and _only(schema, _SCALAR_KEYS["boolean"]):
            return Widget("boolean", label=label, description=description, schema=schema)
        built = _field(schema, "", 0, [0])
        if built is not None:
            return built
    return Widget("json", schema=schema, description=_describe(schema))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _describe(schema: Any) -> str:
    return _text(schema.get("description")) if isinstance(schema, dict) else ""


def _type(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    return kind if isinstance(kind, str) else None


def _only(schema: dict[str, Any], allowed: frozenset[str]) -> bool:
    return all(key in allowed or key in _ANNOTATIONS for key in schema)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | bool | int | float)


def _field(
    schema: Any, path: str, depth: int, count: list[int], name: str = "", required: bool = False
) -> Widget | None:
    """The widget for `schema` at `path`, or None when no field can express it."""
    if not isinstance(schema, dict):
        return None
    count[0] += 1
    if count[0] > MAX_FIELDS:
        return None
    label = _text(schema.get("title")) or name
    description = _text(schema.get("description"))
    enum = schema.get("enum")
    if enum is not None:
        if (
            isinstance(enum, list)
            and 0 < len(enum) <= MAX_CHOICES
            and all(_plain(v) for v in enum)
            and _only(schema, frozenset({"enum", "type"}))
        ):
            return Widget(
                "choice",
                path,
                label,
                description,
                required,
                choices=tuple(enum),
                schema=schema,
            )
        return None
    kind = _type(schema)
    if kind in ("string", "number", "integer") and _only(schema, _SCALAR_KEYS[kind]):
        constraints = tuple((key, schema[key]) for key in _CONSTRAINTS if key in schema)
        return Widget(
            kind,  # type: ignore[arg-type]  # narrowed by the membership test
            path,
            label,
            description,
            required,
            constraints=constraints,
            schema=schema,
        )
    if kind == "boolean" and _only(schema, _SCALAR_KEYS["boolean"]) and depth > 0:
        return Widget("yesno", path, label, description, required, schema=schema)
    if kind == "object" and depth < MAX_DEPTH and _only(schema, _OBJECT_KEYS):
        properties = schema.get("properties", {})
        needed = schema.get("required", [])
        if not isinstance(properties, dict) or not isinstance(needed, list):
            return None
        if any(n not in properties for n in needed if isinstance(n, str)):
            return None  # a required member no field can give: the JSON editor can
        children = []
        for member, sub in properties.items():
            child = _field(sub, pointer(path, member), depth + 1, count, member, member in needed)
            if child is None:
                return None
            children.append(child)
        return Widget(
            "object",
            path,
            label,
            description,
            required,
            children=tuple(children),
            schema=schema,
        )
    return None


def inputs(root: Widget) -> list[Widget]:
    """Every widget of the form that has an input of its own, in order."""
    if root.kind == "object":
        found: list[Widget] = []
        for child in root.children:
            found += inputs(child)
        return found
    return [root]


def payload(root: Widget, fields: Mapping[str, str]) -> tuple[Any, list[Problem]]:
    """The payload the submitted `fields` (input name -> text) give, and what could not
    be read. An absent payload (an empty JSON editor) is ABSENT."""
    problems: list[Problem] = []
    value = _read(root, fields, problems, top=True)
    return value, problems


def _read(w: Widget, fields: Mapping[str, str], problems: list[Problem], top: bool) -> Any:
    text = fields.get(w.path, "")
    if w.kind == "approval":
        given = fields.get("/json", "").strip()
        if given:
            return _json(given, "/json", problems)
        if text not in ("approve", "deny"):
            problems.append(Problem(w.path, "choose approve or deny"))
            return ABSENT
        return text == "approve"
    if w.kind == "boolean":
        if text not in ("approve", "deny"):
            problems.append(Problem(w.path, "choose approve or deny"))
            return ABSENT
        return text == "approve"
    if w.kind == "yesno":
        if text == "":
            return None if top else ABSENT
        if text not in ("yes", "no"):
            problems.append(Problem(w.path, "choose yes or no"))
            return ABSENT
        return text == "yes"
    if w.kind == "choice":
        if text == "":
            if w.required or top:
                problems.append(Problem(w.path, "choose one"))
            return ABSENT
        if not text.isdigit() or int(text) >= len(w.choices):
            problems.append(Problem(w.path, "not one of the choices"))
            return ABSENT
        return w.choices[int(text)]
    if w.kind == "string":
        if text == "" and not (w.required or top):
            return ABSENT
        return text
    if w.kind in ("number", "integer"):
        return _number(w, text.strip(), problems, top)
    if w.kind == "object":
        value: dict[str, Any] = {}
        for child in w.children:
            got = _read(child, fields, problems, top=False)
            if got is not ABSENT:
                value[_member(child.path)] = got
        return value
    given = text.strip()
    if not given:
        return ABSENT
    return _json(given, w.path, problems)


def _member(path: str) -> str:
    return path.rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")


def _number(w: Widget, text: str, problems: list[Problem], top: bool) -> Any:
    """A JSON number, read as JSON reads it (no `1_000`, `inf` or `0x10`)."""
    if text == "":
        if top:
            problems.append(Problem(w.path, "give a number"))
        return ABSENT
    kind = "an integer" if w.kind == "integer" else "a number"
    try:
        number = orjson.loads(text)
    except orjson.JSONDecodeError:
        number = None
    if isinstance(number, bool) or not isinstance(number, int | float):
        problems.append(Problem(w.path, f"not {kind}"))
        return ABSENT
    if w.kind == "integer" and not float(number).is_integer():
        problems.append(Problem(w.path, f"not {kind}"))
        return ABSENT
    return int(number) if w.kind == "integer" else number


def _json(text: str, path: str, problems: list[Problem]) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        problems.append(Problem(path, f"not JSON: {str(exc).split(':', 1)[0]}"))
        return ABSENT
