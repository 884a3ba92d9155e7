"""How many errors a validator of the input's schema reports, counted without building them.

`counter(node)` compiles a pydantic-core schema (the typed-dict reading of
RunAgentInput, `input_schema`) into one pass that returns the number of errors
`SchemaValidator(node).validate_python(value, strict=True)` would report, or raises
`Unsure` where the schema or the value is of a kind it does not count (then the
validator counts). A flood of 77,000 errors costs the validator ~40 ms to build, each
with its location; counting them is a walk over the input. A property test holds the
count to the validator's own over generated inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Count = Callable[[Any], int]


class Unsure(Exception):
    """A schema or a value whose errors this pass does not count."""


def counter(node: dict[str, Any]) -> Count:
    """The count of `node`'s errors on a value, strict mode (raises Unsure)."""
    kind = node.get("type")
    keys = set(node) - {"type"}
    if kind == "any" and not keys:
        return _none
    if kind == "str" and not keys:
        return _str
    if kind == "nullable" and keys == {"schema"}:
        inner = counter(node["schema"])
        return lambda value: 0 if value is None else inner(value)
    if kind == "default" and keys <= {"schema", "default"}:
        return counter(node["schema"])  # (a value present: the default does not apply)
    if kind == "literal" and keys == {"expected"}:
        expected = node["expected"]
        if not all(type(e) is str for e in expected):
            raise Unsure(f"a literal of {expected!r}")
        allowed = frozenset(expected)
        return lambda value: 0 if type(value) is str and value in allowed else 1
    if kind == "list" and keys <= {"items_schema"}:
        return _list(node.get("items_schema"))
    if kind == "dict" and keys <= {"keys_schema", "values_schema"}:
        for key in ("keys_schema", "values_schema"):
            if node.get(key, {"type": "any"}) not in ({"type": "any"}, {"type": "str"}):
                raise Unsure(f"a dict's {key}")
        if node.get("values_schema") == {"type": "str"}:
            raise Unsure("a dict of strings")
        return _dict
    if kind == "typed-dict" and keys <= {"fields", "extra_behavior"}:
        return _typed_dict(node)
    if kind == "tagged-union" and keys <= {"choices", "discriminator", "strict", "from_attributes"}:
        return _tagged_union(node)
    if kind == "union" and keys == {"choices"}:
        choices = [counter(c[0] if isinstance(c, tuple | list) else c) for c in node["choices"]]

        def union(value: Any) -> int:
            total = 0
            for choice in choices:
                errors = choice(value)
                if not errors:
                    return 0  # (smart mode: the first valid alternative is the value)
                total += errors
            return total  # each alternative's errors, labelled

        return union
    raise Unsure(f"a {kind!r} schema with {sorted(keys)}")


def _none(value: Any) -> int:
    return 0


def _str(value: Any) -> int:
    return 0 if type(value) is str else 1


def _dict(value: Any) -> int:
    return 0 if type(value) is dict else 1


def _list(items: dict[str, Any] | None) -> Count:
    if items is None or items == {"type": "any"}:
        return lambda value: 0 if type(value) is list else 1
    if items == {"type": "str"}:
        return lambda value: (
            sum(type(item) is not str for item in value) if type(value) is list else 1
        )
    if items.get("type") == "tagged-union":
        return _tagged_list(items)
    item = counter(items)
    return lambda value: sum(map(item, value)) if type(value) is list else 1


def _tagged_list(items: dict[str, Any]) -> Count:
    """A list of a tagged union, each element's variant found in the loop (as
    `_tagged_union` finds it, a call less per element: a flood of them is common)."""
    counter(items)  # (raises Unsure as it does)
    discriminator = items["discriminator"]
    choices = {
        tag: _variant(choice, discriminator, tag) for tag, choice in items["choices"].items()
    }

    def tagged_list(value: Any) -> int:
        if type(value) is not list:
            return 1
        errors = 0
        for item in value:
            if type(item) is not dict:
                errors += 1
                continue
            tag = item.get(discriminator)
            if tag is None:
                errors += 1
                continue
            if type(tag) is not str:
                raise Unsure("a tag that is not a string")
            choice = choices.get(tag)
            errors += 1 if choice is None else choice(item)
        return errors

    return tagged_list


def _typed_dict(node: dict[str, Any]) -> Count:
    behaviour = node.get("extra_behavior", "ignore")
    if behaviour not in ("ignore", "forbid"):
        raise Unsure("extra members allowed")
    extra = 1 if behaviour == "forbid" else 0  # the errors of one extra member
    # per member name: None, a string (checked here); else its schema's count
    fields: dict[str, Count | None] = {}
    required: set[str] = set()
    for name, spec in node["fields"].items():
        if set(spec) - {"type", "schema", "required"} or spec.get("type") != "typed-dict-field":
            raise Unsure(f"field {name!r}")
        schema = spec["schema"]
        while schema.get("type") == "default" and set(schema) <= {"type", "schema", "default"}:
            schema = schema["schema"]
        fields[name] = None if schema == {"type": "str"} else counter(schema)
        if spec.get("required", True):
            required.add(name)
    needed = frozenset(required)

    def typed_dict(value: Any) -> int:
        if type(value) is not dict:
            return 1
        keys = value.keys()
        errors = 0 if needed <= keys else len(needed - keys)  # one per missing member
        for name, item in value.items():  # (a value has fewer members than its schema)
            count = fields.get(name, _EXTRA)
            if count is None:
                errors += type(item) is not str
            elif count is _EXTRA:
                errors += extra
            elif count is not _none:
                errors += count(item)
        return errors

    return typed_dict


_EXTRA: Any = object()  # a member the schema does not name


def _tagged_union(node: dict[str, Any]) -> Count:
    discriminator = node["discriminator"]
    if type(discriminator) is not str or not all(type(t) is str for t in node["choices"]):
        raise Unsure("a tagged union not tagged by one member's string")
    choices = {tag: _variant(choice, discriminator, tag) for tag, choice in node["choices"].items()}

    def tagged_union(value: Any) -> int:
        if type(value) is not dict:
            return 1
        tag = value.get(discriminator)
        if tag is None:
            return 1  # (no tag: one error)
        if type(tag) is not str:
            raise Unsure("a tag that is not a string")
        choice = choices.get(tag)
        return 1 if choice is None else choice(value)

    return tagged_union


def _variant(node: dict[str, Any], discriminator: str, tag: str) -> Count:
    """The count of a tagged union's variant `node` on a value whose tag is `tag`: its
    member `discriminator` is that string, which a field of `str` or of a literal
    admitting `tag` reads without an error, so that field is not counted (a call less
    per element of a flood)."""
    fields = node.get("fields") if node.get("type") == "typed-dict" else None
    spec = fields.get(discriminator) if isinstance(fields, dict) else None
    if isinstance(fields, dict) and isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
        schema = spec["schema"]
        if schema == {"type": "str"} or (
            set(schema) == {"type", "expected"}
            and schema["type"] == "literal"
            and tag in schema["expected"]
        ):
            read = {**spec, "schema": {"type": "any"}}
            return counter({**node, "fields": {**fields, discriminator: read}})
    return counter(node)
