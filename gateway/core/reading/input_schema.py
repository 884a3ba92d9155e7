"""The protocol's RunAgentInput schema, read as typed dicts, and one walk along it.

`schema()` is RunAgentInput's own pydantic-core schema with every model read
as a typed dict keyed by wire name that forbids extra members; `validator()`
validates an input against it (no model object is built), `lenient()` the same
schema ignoring extra members. `walker()` is the same schema compiled into one
pass over an input that lists, in the order the validator reports them, its
extra members and the elements whose union tag is a string the protocol does
not define, and returns the input without them: for a flood of those, one pass
costs less than building one validation error each.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from itertools import compress, repeat
from operator import not_
from typing import Any

from ag_ui.core import RunAgentInput
from pydantic_core import SchemaValidator

from gateway.core.reading.error_count import Unsure, counter

Path = tuple[str | int, ...]

ANY: dict[str, Any] = {"type": "any"}
ALTERNATIVE = "alternative "  # the label of a plain union's alternative, then its position


@cache  # no arguments: one value
def schema() -> dict[str, Any]:
    """RunAgentInput's own core schema with every model read as a typed dict keyed by
    wire name, extra members forbidden (each one an error naming it), and each
    alternative of a plain union labelled by its position."""
    return _as_typed_dicts(RunAgentInput.__pydantic_core_schema__)


@cache  # no arguments: one value
def validator() -> SchemaValidator:
    return SchemaValidator(schema())  # type: ignore[arg-type]


@cache  # no arguments: one value
def lenient() -> SchemaValidator:
    """The same schema with extra members ignored (left out of the result, no error) and
    no defaults filled in: what it returns equals the input exactly when no typed dict
    of the input holds an extra member, and its errors are the strict validator's
    less the extra members (and less what a union's failing alternatives add for them)."""
    return SchemaValidator(lenient_schema())  # type: ignore[arg-type]


@cache  # no arguments: one value
def lenient_schema() -> dict[str, Any]:
    """The schema `lenient` validates: extra members ignored, no defaults."""
    return _ignoring_extras(schema())  # type: ignore[no-any-return]


@cache  # no arguments: one value
def quick() -> SchemaValidator:
    """`lenient` stopping each list at its first invalid element: the same result for a
    valid input, and for an invalid one an early error instead of all of them (a flood
    of 77,000 errors costs the validator five times a valid input's validation)."""
    return SchemaValidator(_fail_fast(lenient_schema()))  # type: ignore[arg-type]


@cache  # no arguments: one value
def lenient_count() -> Callable[[Any], int] | None:
    """How many errors `lenient` reports for an input, counted without building them
    (`error_count.counter`; raises `error_count.Unsure` for a value it does not count);
    None if the schema is of a kind it does not count."""
    try:
        return counter(lenient_schema())
    except Unsure:
        return None


def _fail_fast(node: Any) -> Any:
    if isinstance(node, list | tuple):
        return type(node)(_fail_fast(item) for item in node)
    if not isinstance(node, dict):
        return node
    out = {key: value if key in _VALUES else _fail_fast(value) for key, value in node.items()}
    if out.get("type") == "list":
        out["fail_fast"] = True
    return out


def _ignoring_extras(node: Any) -> Any:
    if isinstance(node, list | tuple):
        return type(node)(_ignoring_extras(item) for item in node)
    if not isinstance(node, dict):
        return node
    if node.get("type") == "default":  # an optional field left out stays out of the result
        return _ignoring_extras(node["schema"])
    out = {key: value if key in _VALUES else _ignoring_extras(value) for key, value in node.items()}
    if out.get("type") == "typed-dict":
        out["extra_behavior"] = "ignore"
    return out


_DROPPED = frozenset({"serialization", "metadata", "ref"})  # output and documentation only
_VALUES = frozenset({"default", "expected"})  # values, not schemas


def _as_typed_dicts(node: Any) -> Any:
    if isinstance(node, list):
        return [_as_typed_dicts(item) for item in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind == "model":
        inner_schema = node["schema"]
        if inner_schema.get("type") != "model-fields":
            raise NotImplementedError(f"a model whose schema is {inner_schema.get('type')!r}")
        fields: dict[str, Any] = {}
        for name, spec in inner_schema["fields"].items():
            wire = spec.get("validation_alias", name)
            if not isinstance(wire, str):
                raise NotImplementedError(f"field {name!r} has alias choices")
            field_schema = _as_typed_dicts(spec["schema"])
            fields[wire] = {
                "type": "typed-dict-field",
                "schema": field_schema,
                "required": field_schema.get("type") != "default",
            }
        return {"type": "typed-dict", "fields": fields, "extra_behavior": "forbid"}
    if kind == "union":
        return {
            "type": "union",
            "choices": [
                (_as_typed_dicts(c[0] if isinstance(c, tuple | list) else c), f"{ALTERNATIVE}{n}")
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


def inner(node: dict[str, Any]) -> dict[str, Any]:
    """The schema under any `nullable` and `default` wrappers."""
    while node.get("type") in ("nullable", "default"):
        node = node["schema"]
    return node


# --- one pass along the schema -------------------------------------------------------------

# (an input node, its path, the extra members found, the unrecognised union elements found:
# their path and the tagged-union schema that does not define their tag, or RULED_OUT for
# an error the validator reports for a plain union's alternative the value's type rules
# out, once an element under it is unrecognised; or REQUIRED) -> the node less those (the
# node itself when it holds none, DROP for an unrecognised element)
Walk = Callable[[Any, Path, list[Path], list[tuple[Path, dict[str, Any]]]], Any]
_MISSING: Any = object()
DROP: Any = object()  # what an element whose union tag is unrecognised becomes: removed


@cache  # no arguments: one value
def walker() -> Walk:
    """The walk over a whole input (the input itself where the schema holds no typed
    dict). It returns a copy of the input less what it lists, sharing every branch
    that holds none of it (None for an input that is itself unrecognised). Once it
    lists a required member (REQUIRED), what it returns is not used (the input is
    malformed): an object is then left as it is, not copied without that member."""
    compiled = _compiled(schema())
    if compiled is None or compiled[1] != (dict,):
        return _nothing
    walk = compiled[0]

    def walk_input(value: Any, at: Path, extras: list[Path], tags: list[tuple[Path, Any]]) -> Any:
        if type(value) is not dict:
            return value
        out = walk(value, at, extras, tags)
        return None if out is DROP else out

    return walk_input


def _nothing(node: Any, at: Path, extras: list[Path], tags: list[tuple[Path, Any]]) -> Any:
    return node


def _compile(node: dict[str, Any]) -> Walk | None:
    """The walk of a schema node; None where no extra member or union tag can be found
    (an open object, a scalar): the walk never goes there."""
    compiled = _compiled(node)
    return None if compiled is None else compiled[0]


def _compiled(node: dict[str, Any]) -> tuple[Walk, tuple[type, ...]] | None:
    """The walk of a schema node and the JSON types it walks into (a value of another
    type is not visited at all), or None."""
    node = inner(node)
    kind = node.get("type")
    if kind == "typed-dict":
        return _typed_dict(node), (dict,)
    if kind == "list":
        items = node.get("items_schema")
        if items is not None and inner(items).get("type") == "tagged-union":
            return _tagged_list(inner(items)), (list,)
        item = _compiled(items) if items is not None else None
        return None if item is None else (_list(*item), (list,))
    if kind == "tagged-union":
        return _tagged_union(node), (dict,)
    if kind == "union":
        return _union(node)
    return None


def _typed_dict(node: dict[str, Any]) -> Walk:
    names = frozenset(node["fields"])
    deep = [
        (name, *compiled)
        for name, spec in node["fields"].items()
        if (compiled := _compiled(spec["schema"])) is not None
    ]
    required = frozenset(name for name, spec in node["fields"].items() if spec["required"])

    def walk(value: Any, at: Path, extras: list[Path], tags: list[tuple[Path, Any]]) -> Any:
        out = None
        for name, field, types in deep:  # the validator reports fields first, in schema order
            item = value.get(name)
            if type(item) in types:
                here = at + (name,)
                new = field(item, here, extras, tags)
                if new is not item:
                    if new is DROP and name in required:
                        # the copy would not be what the validator reads: the input is
                        # malformed, and the pass's copy is not used (no copy is made)
                        tags.append((here, REQUIRED))
                        continue
                    if out is None:
                        out = dict(value)
                    if new is DROP:
                        del out[name]
                    else:
                        out[name] = new
        if not value.keys() <= names:  # then the extra members, in the input's order
            source = value if out is None else out
            # per member, whether it is read: found once for both lists (a flood is common)
            read = list(map(names.__contains__, value))
            found = list(compress(value, map(not_, read)))
            if len(found) == 1:  # the common case: one copy less one member
                extras.append(at + (found[0],))
                out = source.copy()
                del out[found[0]]
            else:
                # (*at, key) each, without a loop (repeat: endless)
                extras.extend(zip(*map(repeat, at), found, strict=False))
                # the names it reads, in the input's order, built from them alone
                out = {key: source[key] for key in compress(value, read) if key in source}
        return value if out is None else out

    walk.names = names  # type: ignore[attr-defined]
    walk.deep = deep  # type: ignore[attr-defined]
    walk.required = required  # type: ignore[attr-defined]
    return walk


# How a list's walk treats an element (an object), by its variant: None, nothing to find
# in it; (member names, field, types, walk, union) for a typed dict with at most one field
# to walk into (`field`, when its value is of `types`): its extra members are found in the
# loop, and `walk` called only when that field holds something to walk or two members are
# extra; `union`, when that field is a required tagged union: (member names, field, its
# discriminator, its tags, its node), so that an element without extra members whose
# field's tag is a string not among those is listed in the loop as `walk` lists it
# (REQUIRED); (None, None, (), walk, None) for any other: `walk` is called.
_Union = tuple[frozenset[str], str, str, frozenset[str], dict[str, Any]]
_Element = tuple[frozenset[str] | None, str | None, tuple[type, ...], Walk, _Union | None]


def _element(walk: Walk | None) -> _Element | None:
    if walk is None:
        return None
    deep = getattr(walk, "deep", None)
    if deep is not None and len(deep) <= 1:
        name, field, types = deep[0] if deep else (None, None, ())
        union = getattr(field, "union", None)
        required = name in walk.required  # type: ignore[attr-defined]
        read = (walk.names, name, *union) if union and required and types == (dict,) else None  # type: ignore[attr-defined]
        return walk.names, name, types, walk, read  # type: ignore[attr-defined]
    return None, None, (), walk, None


def _list(item: Walk, types: tuple[type, ...]) -> Walk:
    if types == (dict,):
        return _elements(None, {}, _element(item), {})

    def walk(value: Any, at: Path, extras: list[Path], tags: list[tuple[Path, Any]]) -> Any:
        out = None
        for index, element in enumerate(value):
            if type(element) in types:
                new = item(element, at + (index,), extras, tags)
                if new is not element:
                    if out is None:
                        out = value[:index]
                    if new is not DROP:
                        out.append(new)
                    continue
            if out is not None:
                out.append(element)
        return value if out is None else out

    return walk


def _tagged_list(node: dict[str, Any]) -> Walk:
    """`_list` of `_tagged_union`, each element's variant read in the loop."""
    choices = {tag: _element(_compile(choice)) for tag, choice in node["choices"].items()}
    return _elements(node["discriminator"], choices, None, node)


def _elements(
    discriminator: str | None,
    variants: dict[str, _Element | None],
    only: _Element | None,
    node: dict[str, Any],
) -> Walk:
    """The walk of a list of objects: of a tagged union (`discriminator`, each variant's
    `_Element`; `node` the union) or of one typed dict (`only`). An element that holds
    nothing to find costs no call, nor does one whose only find is one extra member (a
    flood of either is common); the list is copied once, at the first element to change."""

    def walk(value: Any, at: Path, extras: list[Path], tags: list[tuple[Path, Any]]) -> Any:
        out = None
        dropped = False
        for index, element in enumerate(value):
            if type(element) is not dict:
                continue
            if discriminator is None:
                spec = only
            else:
                tag = element.get(discriminator)
                if type(tag) is not str:
                    continue  # malformed, not unrecognised: the validator's error is not listed
                spec = variants.get(tag, _MISSING)
                if spec is _MISSING:
                    tags.append((at + (index,), node))
                    if out is None:
                        out = value.copy()
                    out[index] = DROP
                    dropped = True
                    continue
            if spec is None:
                continue
            keep, field, types, choice, union = spec
            if union is not None:
                names, member, tag_name, known, tagged = union
                inside = element.get(member)
                if type(inside) is dict and element.keys() <= names:
                    tag = inside.get(tag_name)
                    if type(tag) is str and tag not in known:
                        # as `choice` lists it (its required member's element is
                        # unrecognised: REQUIRED), two calls less (a flood is common)
                        here = at + (index, member)
                        tags.append((here, tagged))
                        tags.append((here, REQUIRED))
                        continue
            if keep is None or (field is not None and type(element.get(field)) in types):
                new = choice(element, at + (index,), extras, tags)
                if new is element:
                    continue
            else:
                extra = element.keys() - keep
                if not extra:
                    continue
                if len(extra) == 1:  # as `_typed_dict` finds it
                    key = extra.pop()
                    extras.append(at + (index, key))
                    new = element.copy()
                    del new[key]
                else:
                    new = choice(element, at + (index,), extras, tags)
            if out is None:
                out = value.copy()
            out[index] = new
            dropped = dropped or new is DROP
        if out is None:
            return value
        return [element for element in out if element is not DROP] if dropped else out

    return walk


def _tagged_union(node: dict[str, Any]) -> Walk:
    discriminator = node["discriminator"]
    choices = {tag: _compile(choice) for tag, choice in node["choices"].items()}

    def walk(value: Any, at: Path, extras: list[Path], tags: list[tuple[Path, Any]]) -> Any:
        tag = value.get(discriminator)
        if type(tag) is not str:
            return value  # malformed, not unrecognised: the validator's error is not listed
        choice = choices.get(tag, _MISSING)
        if choice is _MISSING:
            tags.append((at, node))
            return DROP
        if choice is None:
            return value
        return choice(value, at, extras, tags)

    if type(discriminator) is str:  # (read in a list's loop: `_element`)
        walk.union = discriminator, frozenset(choices), node  # type: ignore[attr-defined]
    return walk


def _union(node: dict[str, Any]) -> tuple[Walk, tuple[type, ...]] | None:
    by_type: dict[type, Walk] = {}
    for choice, _ in node["choices"]:
        compiled = _compiled(choice)
        if compiled is not None:
            for kind in compiled[1]:
                if kind in by_type:  # which one's copy would the input keep?
                    raise NotImplementedError("a union of two alternatives walked alike")
                by_type[kind] = compiled[0]
    if not by_type:
        return None
    # When an element under an alternative has an unrecognised tag, that alternative
    # fails, and so does each other one, for a value of another type: a scalar
    # alternative reports one error, which is listed as a tag of node None (RULED_OUT),
    # so that the errors the pass finds can be counted against the validator's
    others = {
        kind: sum(1 for choice, _ in node["choices"] if inner(choice).get("type") in _SCALARS)
        for kind in by_type
    }

    def walk(value: Any, at: Path, extras: list[Path], tags: list[tuple[Path, Any]]) -> Any:
        before = len(tags)
        out = by_type[type(value)](value, at, extras, tags)
        if len(tags) > before:
            tags.extend(repeat((at, RULED_OUT), others[type(value)]))
        return out

    return walk, tuple(by_type)


_SCALARS = frozenset({"str", "int", "float", "bool", "none"})
RULED_OUT: Any = None  # the node of a "tag" that is an error of an alternative ruled out
# The node of a second entry at an unrecognised element's path when it is the value of a
# required member: the copy without it lacks that member (not an error of the input's).
REQUIRED: Any = {}
