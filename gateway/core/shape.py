"""The shape of an incoming RunAgentInput, read by the processing model.

Unrecognised material (unknown members, unrecognised union members) is
located so it can be stripped with a warning; a known field carrying a value
the schema rejects is malformed, never coerced or repaired. Objects the
schema leaves open (`state`, `forwardedProps`, `payload`, `metadata`, ...)
are typed `Any`/dict by the protocol's models and so are never walked into.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple, get_args

import orjson
from ag_ui.core import RunAgentInput
from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaValidator

from gateway.core.findings import pointer, preview

Path = tuple[str | int, ...]


class Entry(NamedTuple):
    """One resume entry of a valid input (a tuple: thousands are built cheaply)."""

    interrupt_id: str
    status: str  # resolved | cancelled
    payload: Any = None


@dataclass(frozen=True, slots=True)
class Request:
    """What the judge reads of a valid input (every other field is passed through)."""

    run_id: str
    resume: tuple[Entry, ...] | None


@dataclass(slots=True)
class Shape:
    """What reading an input found. Every path points into the input as received."""

    model: Request | None = None  # set when the input is valid (after stripping)
    malformed: list[tuple[str, str]] = field(default_factory=list)  # (pointer, message)
    unknown: list[Path] = field(default_factory=list)  # unknown members
    stripped_unions: list[tuple[Path, str]] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)  # the union members removed
    raw: Any = None  # the input as received

    @property
    def doc(self) -> dict[str, Any] | None:
        """The valid input with its unrecognised union members removed (None: not valid)."""
        if self.model is None:
            return None
        return remove_paths(self.raw, self.removed)


def read_input(raw: dict[str, Any]) -> Shape:
    """Validate `raw` against the protocol's RunAgentInput, strictly, by wire names.

    One validation, with the protocol's own schema read as plain typed dicts that
    forbid extra members (`_validator`): no model object is built, and a valid
    input costs nothing more. Its errors are then sorted: an extra member is
    unknown (stripped), an element whose union tag is a string the protocol does
    not define is unrecognised (stripped), anything else is malformed.
    """
    shape = Shape(raw=raw)
    if not _shallow(raw):
        bad_tags = _non_text_tags(raw)
        if bad_tags:
            shape.malformed = bad_tags
            return shape
    try:
        _validator().validate_python(raw, strict=True)
    except ValidationError as exc:
        count = exc.error_count()
        if count > MANY_ERRORS:  # a flood: are they all extra members? One pass says so
            extras: list[Path] = []
            _extras(raw, _schema(), (), extras)
            if len(extras) == count:
                return _valid(shape, raw, extras)
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
    else:
        errors = []
    malformed: list[tuple[str, str]] = []
    said: dict[tuple[str, int], str] = {}  # one message per tag and union: tags repeat
    routes: dict[tuple[Any, ...], tuple[int, ...]] = {}
    for error in errors:
        kind = error["type"]
        if kind == "extra_forbidden":
            shape.unknown.append(_member_path(error["loc"], routes))
            continue
        path, node, relevant = _locate(raw, error["loc"])
        if not relevant:
            continue  # an alternative of a union that the value's own type rules out
        if kind == "union_tag_invalid" and _text_tag(raw, path, node) is not None:
            tag = _text_tag(raw, path, node)
            assert tag is not None
            message = said.get((tag, id(node)))
            if message is None:
                message = said[tag, id(node)] = _tag_message(
                    tag, node["discriminator"], tuple(node["choices"])
                )
            shape.stripped_unions.append((path, message))
        else:
            if kind == "missing" and error["loc"]:
                path = (*path, error["loc"][-1])
            malformed.append((pointer(*path), error["msg"]))
    if malformed:
        shape.malformed = _merged(malformed)
        shape.unknown = []
        shape.stripped_unions = []
        return shape
    shape.removed = [path for path, _ in shape.stripped_unions]
    removed = set(shape.removed)
    if removed:  # members of a removed element go with it
        shape.unknown = [
            p for p in shape.unknown if not any(p[:n] in removed for n in range(len(p)))
        ]
    return _valid(shape, raw, shape.unknown)


def _valid(shape: Shape, raw: dict[str, Any], unknown: list[Path]) -> Shape:
    shape.unknown = unknown
    resume = raw.get("resume")
    shape.model = Request(
        run_id=raw["runId"],
        resume=None
        if resume is None
        else tuple(Entry(e["interruptId"], e["status"], e.get("payload")) for e in resume),
    )
    return shape


# Over this many validation errors, one schema-guided pass looks for extra members first:
# building each error costs more than finding each member.
MANY_ERRORS = 256


def _extras(node: Any, schema: dict[str, Any], at: Path, out: list[Path]) -> None:
    """Append the path of every extra member in `node`, read along `schema` as the
    validator reads it (a union tag picks its variant; an unrecognised one is skipped)."""
    schema = _inner(schema)
    kind = schema.get("type")
    if kind == "typed-dict":
        if not isinstance(node, dict):
            return
        fields, deep = _fields_of(schema)
        for key, value in node.items():
            if key not in fields:
                out.append((*at, key))
            elif key in deep:
                _extras(value, fields[key], (*at, key), out)
    elif kind == "list":
        items = schema.get("items_schema")
        if isinstance(node, list) and items is not None:
            for index, item in enumerate(node):
                _extras(item, items, (*at, index), out)
    elif kind == "tagged-union":
        tag = node.get(schema["discriminator"]) if isinstance(node, dict) else None
        choice = schema["choices"].get(tag) if isinstance(tag, str) else None
        if choice is not None:
            _extras(node, choice, at, out)
    elif kind == "union":
        for choice, _ in schema["choices"]:
            inner = _inner(choice)
            if inner.get("type") == "list" and isinstance(node, list):
                _extras(node, inner, at, out)
            elif inner.get("type") in ("typed-dict", "tagged-union") and isinstance(node, dict):
                _extras(node, inner, at, out)


_FIELDS: dict[int, tuple[dict[str, Any], frozenset[str]]] = {}


def _fields_of(schema: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """A typed dict's field schemas by wire name, and the names of those that can hold
    typed dicts (the only ones a search for extra members walks into)."""
    known = _FIELDS.get(id(schema))
    if known is None:
        fields = {name: spec["schema"] for name, spec in schema["fields"].items()}
        deep = frozenset(name for name, sub in fields.items() if _holds_typed_dict(sub))
        known = _FIELDS[id(schema)] = (fields, deep)
    return known


def _holds_typed_dict(schema: Any) -> bool:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "typed-dict":
                return True
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return False


def _shallow(raw: object) -> bool:
    """Whether `raw` nests at most 254 levels (and holds no integer beyond 64 bits):
    then no union tag in it is too deep for the validator to render in a message."""
    try:
        orjson.dumps(raw)
    except orjson.JSONEncodeError:
        return False
    return True


_TAG_OF_PART = "type"


def _non_text_tags(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """Union tags (a message `role`, a content part's or its source's `type`) that are
    arrays or objects: malformed, found before validation.

    The validator would print such a tag into its error message, and a tag nested
    a thousand levels deep cannot be printed (its failure reaches stderr).
    """
    found: list[tuple[str, str]] = []
    messages = raw.get("messages")
    if not isinstance(messages, list):
        return found
    for m, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if isinstance(message.get("role"), list | dict):
            found.append(_not_text(("messages", m), "role"))
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for c, part in enumerate(content):
            if not isinstance(part, dict):
                continue
            if isinstance(part.get(_TAG_OF_PART), list | dict):
                found.append(_not_text(("messages", m, "content", c), _TAG_OF_PART))
            source = part.get("source")
            if isinstance(source, dict) and isinstance(source.get(_TAG_OF_PART), list | dict):
                found.append(_not_text(("messages", m, "content", c, "source"), _TAG_OF_PART))
    return found


# --- the protocol's schema, read as typed dicts ---------------------------------------------
_ANY: dict[str, Any] = {"type": "any"}
_ALTERNATIVE = "alternative "


@cache
def _schema() -> dict[str, Any]:
    """RunAgentInput's own core schema with every model read as a typed dict keyed by
    wire name, extra members forbidden (each one an error naming it), and each
    alternative of a plain union labelled by its position."""
    return _as_typed_dicts(RunAgentInput.__pydantic_core_schema__)


@cache
def _validator() -> SchemaValidator:
    return SchemaValidator(_schema())  # type: ignore[arg-type]


_DROPPED = frozenset({"serialization", "metadata", "ref"})  # output and documentation only
_VALUES = frozenset({"default", "expected"})  # values, not schemas


def _as_typed_dicts(node: Any) -> Any:
    if isinstance(node, list):
        return [_as_typed_dicts(item) for item in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind == "model":
        inner = node["schema"]
        if inner.get("type") != "model-fields":
            raise NotImplementedError(f"a model whose schema is {inner.get('type')!r}")
        fields: dict[str, Any] = {}
        for name, spec in inner["fields"].items():
            wire = spec.get("validation_alias", name)
            if not isinstance(wire, str):
                raise NotImplementedError(f"field {name!r} has alias choices")
            schema = _as_typed_dicts(spec["schema"])
            fields[wire] = {
                "type": "typed-dict-field",
                "schema": schema,
                "required": schema.get("type") != "default",
            }
        return {"type": "typed-dict", "fields": fields, "extra_behavior": "forbid"}
    if kind == "union":
        return {
            "type": "union",
            "choices": [
                (_as_typed_dicts(c[0] if isinstance(c, tuple | list) else c), f"{_ALTERNATIVE}{n}")
                for n, c in enumerate(node["choices"])
            ],
        }
    if kind is not None and str(kind).startswith(("function", "definition", "model")):
        raise NotImplementedError(f"a {kind!r} schema")
    return {
        key: value if key in _VALUES else _as_typed_dicts(value)
        for key, value in node.items()
        if key not in _DROPPED
    }


def _inner(schema: dict[str, Any]) -> dict[str, Any]:
    while schema.get("type") in ("nullable", "default"):
        schema = schema["schema"]
    return schema


def _locate(raw: Any, loc: tuple[Any, ...]) -> tuple[Path, Any, bool]:
    """Where a validation error's location points in `raw`, read along the schema.

    Returns the path, the schema node there (a tagged union, for a tag error), and
    whether the error is relevant: an alternative of `str | list` that the value's
    own type rules out reports errors that say nothing about the input.
    """
    schema = _schema()
    node = raw
    path: list[str | int] = []
    relevant = True
    for at, part in enumerate(loc):
        schema = _inner(schema)
        kind = schema.get("type")
        if kind == "tagged-union":
            schema = schema["choices"].get(part, _ANY)  # the tag names the variant
            continue
        if kind == "union" and isinstance(part, str) and part.startswith(_ALTERNATIVE):
            choice = schema["choices"][int(part[len(_ALTERNATIVE) :])][0]
            relevant = relevant and _may_be(_inner(choice), node)
            schema = choice
            continue
        if kind == "typed-dict":
            spec = schema["fields"].get(part)
            schema = spec["schema"] if spec is not None else _ANY
        elif kind == "list":
            schema = schema.get("items_schema", _ANY)
        else:  # an open value (dict, any, ...): the rest of the location is raw
            for rest in loc[at:]:
                node = _step(node, rest, path)
            return tuple(path), _ANY, relevant
        node = _step(node, part, path)
    return tuple(path), _inner(schema), relevant


def _member_path(loc: tuple[Any, ...], routes: dict[tuple[Any, ...], tuple[int, ...]]) -> Path:
    """The path of an extra member from its error location, `_locate`'s result for it.

    Which parts of a location are union tags or labels (not in the input) depends on
    the schema alone, so it is found once per route (the location with its list
    positions blanked) and reused. An extra member is always in the input, and its
    error comes from a typed dict the value's own type reached (never from a ruled
    out alternative).
    """
    *within, member = loc  # the member's own name is always in the input
    route = tuple(None if type(part) is int else part for part in within)
    keep = routes.get(route)
    if keep is None:
        keep = routes[route] = _kept_parts(tuple(within))
    return (*(loc[at] for at in keep), member)


def _kept_parts(loc: tuple[Any, ...]) -> tuple[int, ...]:
    schema = _schema()
    keep: list[int] = []
    for at, part in enumerate(loc):
        schema = _inner(schema)
        kind = schema.get("type")
        if kind == "tagged-union":
            schema = schema["choices"].get(part, _ANY)
            continue
        if kind == "union" and isinstance(part, str) and part.startswith(_ALTERNATIVE):
            schema = schema["choices"][int(part[len(_ALTERNATIVE) :])][0]
            continue
        if kind == "typed-dict":
            spec = schema["fields"].get(part)
            schema = spec["schema"] if spec is not None else _ANY
        elif kind == "list":
            schema = schema.get("items_schema", _ANY)
        else:
            schema = _ANY
        keep.append(at)
    return tuple(keep)


def _step(node: Any, part: Any, path: list[str | int]) -> Any:
    if isinstance(node, dict) and isinstance(part, str) and part in node:
        path.append(part)
        return node[part]
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        path.append(part)
        return node[part]
    return None


def _may_be(choice: dict[str, Any], value: Any) -> bool:
    """Whether `value`'s JSON type could be the alternative `choice` at all."""
    kind = choice.get("type")
    if kind == "str":
        return isinstance(value, str) or not isinstance(value, list)
    if kind == "list":
        return isinstance(value, list) or not isinstance(value, str)
    return True


def _text_tag(raw: Any, path: Path, union: dict[str, Any]) -> str | None:
    """The string tag of the element at `path` that `union` does not define, if a string.

    A `role` of 5 or null can name no variant, now or in a later version: that
    element is malformed, not unrecognised.
    """
    if union.get("type") != "tagged-union":
        return None
    element = _at(raw, path)
    tag = element.get(union["discriminator"]) if isinstance(element, dict) else None
    return tag if isinstance(tag, str) else None


def _tag_message(tag: str, name: str, choices: tuple[str, ...]) -> str:
    expected = ", ".join(f"'{c}'" for c in choices)
    return (
        f"Input tag {preview(tag)} found using '{name}' does not match any of the expected "
        f"tags: {expected}"
    )


def _not_text(element: Path, tag: str) -> tuple[str, str]:
    where = pointer(*element)
    return where, f"{where}: its union tag `{tag}` must be a string, not an array or object"


def _at(doc: Any, path: Path) -> Any:
    node = doc
    for part in path:
        node = node[part]
    return node


def _merged(found: Any) -> list[tuple[str, str]]:
    """One finding per location: a union's alternatives failing at one place are one problem."""
    by_where: dict[str, list[str]] = {}
    for where, message in found:
        messages = by_where.setdefault(where, [])
        if message not in messages:
            messages.append(message)
    return [(where, f"{where or '/'}: {'; or '.join(ms)}") for where, ms in by_where.items()]


def error_pointer(doc: Any, error: Any) -> str:
    """The JSON Pointer into `doc` of one pydantic validation error."""
    return pointer(*_error_path(doc, error))


def _error_path(doc: Any, error: Any) -> Path:
    loc = error["loc"]
    path = _raw_path(doc, loc)
    if error["type"] == "missing" and loc:
        path = (*path, loc[-1])
    return path


def _raw_path(doc: Any, loc: tuple[Any, ...]) -> Path:
    """Map a pydantic error location onto the raw document, skipping union tags."""
    path: list[str | int] = []
    node = doc
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            path.append(part)
    return tuple(path)


def unknown_members(model: BaseModel, raw: Any, at: Path, out: list[Path]) -> None:
    if not isinstance(raw, dict):
        return
    extra = model.__pydantic_extra__
    if extra:
        out.extend((*at, key) for key in extra)
    for name, key in _nested_fields(type(model)):
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            unknown_members(value, raw.get(key), (*at, key), out)
        elif isinstance(value, list) and value:
            items = raw.get(key)
            if isinstance(items, list):
                for index, (item, raw_item) in enumerate(zip(value, items, strict=False)):
                    if isinstance(item, BaseModel):
                        unknown_members(item, raw_item, (*at, key, index), out)


@cache
def _nested_fields(cls: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """(attribute, wire name) of the fields whose type can hold a model: the only ones walked."""
    return tuple(
        (name, info.alias or name)
        for name, info in cls.model_fields.items()
        if _holds_model(info.annotation)
    )


def _holds_model(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_model(arg) for arg in get_args(annotation))


def remove_paths(doc: dict[str, Any], paths: list[Path]) -> dict[str, Any]:
    """A copy of `doc` without the members at `paths`; untouched branches are shared."""
    if not paths:
        return doc
    tree: dict[Any, Any] = {}
    for path in paths:
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if node is None:
                break
        else:
            node[path[-1]] = None  # a leaf: remove
    return _prune(doc, tree)


def _prune(node: Any, tree: dict[Any, Any]) -> Any:
    """A copy of `node` without what `tree` marks; linear in the lists it rebuilds."""
    if isinstance(node, dict):
        out = dict(node)
        for key, sub in tree.items():
            if key not in out:
                continue
            if sub is None:
                del out[key]
            else:
                out[key] = _prune(out[key], sub)
        return out
    if isinstance(node, list):
        return [
            item if (sub := tree.get(index, _KEEP)) is _KEEP else _prune(item, sub)
            for index, item in enumerate(node)
            if tree.get(index, _KEEP) is not None
        ]
    return node


_KEEP: Any = object()
