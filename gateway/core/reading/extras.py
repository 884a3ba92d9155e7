"""An event's unknown members, taken out before its models validate it.

The protocol's event models keep unknown members (`extra="allow"`): each one is
validated and stored on the model, which for 95,000 of them costs more than the
rest of the event. `without_extras` walks the event along a model's own core
schema and returns it without the members no field names (by alias or by name),
listing them per object; the model then validates only what it reads, with the
same result and the same errors (an allowed extra member is never an error).

Only what is certain is taken out: objects read by a model that allows extra
members, reached through models, lists, optional values and tagged unions whose
tag names a variant, along the members' wire names (the aliases). Anything else
(a plain union, a validator function, an object naming a field both by alias and
by name, whose reading the model decides) is left whole to the model, as before.
"""

from __future__ import annotations

from functools import cache
from itertools import filterfalse
from typing import Any

from pydantic import BaseModel

Path = tuple[str | int, ...]


def without_extras(model: type[BaseModel], event: Any, found: dict[Path, list[str]]) -> Any:
    """`event` less the unknown members of its model-read objects (shared where none),
    each object's unknown member names recorded in `found` under its path, in order."""
    return _walk(_root(model), event, (), found)


@cache  # keyed by model class: the protocol's event models, a fixed set
def _root(model: type[BaseModel]) -> dict[str, Any]:
    """The model's core schema, its model nodes' field specs read once into `_SPECS`."""
    root: dict[str, Any] = dict(model.__pydantic_core_schema__)
    _read_specs(root)
    return root


def _read_specs(node: Any) -> None:
    """Every model node `_walk` can reach from `node`, its spec kept in `_SPECS`."""
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind in ("default", "nullable"):
        _read_specs(node["schema"])
    elif kind == "list":
        _read_specs(node.get("items_schema"))
    elif kind == "tagged-union":
        for choice in node["choices"].values():
            _read_specs(choice)
    elif kind == "model" and id(node) not in _SPECS:
        spec = _read_fields(node)
        _SPECS[id(node)] = (node, spec)  # the node is held: its id stays its own
        for _, schema in spec[1] if spec is not None else ():
            _read_specs(schema)


def _walk(node: dict[str, Any], value: Any, at: Path, found: dict[Path, list[str]]) -> Any:
    while True:
        kind = node.get("type")
        if kind == "default":
            node = node["schema"]
        elif kind == "nullable":
            if value is None:
                return value
            node = node["schema"]
        else:
            break
    if kind == "model":
        return _model(node, value, at, found)
    if kind == "list" and type(value) is list and "items_schema" in node:
        return _list(node["items_schema"], value, at, found)
    if kind == "tagged-union" and type(value) is dict:
        key = node["discriminator"]
        if type(key) is not str:
            return value
        tag = value.get(key)
        choice = node["choices"].get(tag) if type(tag) is str else None
        return value if choice is None else _walk(choice, value, at, found)
    return value


def _list(item: dict[str, Any], value: list[Any], at: Path, found: dict[Path, list[str]]) -> Any:
    out: list[Any] | None = None
    for index, element in enumerate(value):
        new = _walk(item, element, (*at, index), found)
        if new is not element and out is None:
            out = value[:index]
        if out is not None:
            out.append(new)
    return value if out is None else out


def _model(node: dict[str, Any], value: Any, at: Path, found: dict[Path, list[str]]) -> Any:
    spec = _fields(node)
    if spec is None or type(value) is not dict:
        return value
    accepted, deep, twice = spec
    if any(alias in value and name in value for alias, name in twice):
        return value  # which member the model reads is the model's to decide
    out: dict[str, Any] | None = None
    for wire, schema in deep:
        item = value.get(wire)
        if item is not None:
            new = _walk(schema, item, (*at, wire), found)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[wire] = new
    if not value.keys() <= accepted:
        found[at] = list(filterfalse(accepted.__contains__, value))
        source = value if out is None else out
        # built from the few names the model reads, not the many it does not: the model
        # reads its members by name, in no particular order
        out = {name: source[name] for name in accepted if name in source}
    return value if out is None else out


_Spec = tuple[frozenset[str], tuple[tuple[str, dict[str, Any]], ...], tuple[tuple[str, str], ...]]
# Bounded by construction: written only by `_read_specs` under `_root`, once per model
# class, one entry per model node of that class's schema (a fixed set); never by a walk.
_SPECS: dict[int, tuple[dict[str, Any], _Spec | None]] = {}


def _fields(node: dict[str, Any]) -> _Spec | None:
    """(member names the model reads, (wire name, schema) of each field, (alias, name) of
    each field whose two names differ), or None: the model is not walked."""
    kept = _SPECS.get(id(node))
    if kept is not None and kept[0] is node:
        return kept[1]
    return _read_fields(node)  # a node no model's schema held when read: not kept


def _read_fields(node: dict[str, Any]) -> _Spec | None:
    config = node.get("config") or {}
    fields = node.get("schema", {})
    if (
        config.get("extra_fields_behavior") != "allow"
        or fields.get("type") != "model-fields"
        or fields.get("extras_schema") is not None
        or node.get("custom_init")
        or node.get("root_model")
    ):
        return None
    by_alias = config.get("validate_by_alias", True)
    by_name = config.get("validate_by_name", False)
    accepted: set[str] = set()
    deep: list[tuple[str, dict[str, Any]]] = []
    twice: list[tuple[str, str]] = []
    for name, field in fields["fields"].items():
        alias = field.get("validation_alias", name)
        if not isinstance(alias, str):
            return None  # alias paths or choices: not read here
        names = {alias} if by_alias else set()
        if by_name or not by_alias:
            names.add(name)
        accepted |= names
        if len(names) == 2:
            twice.append((alias, name))
        if by_alias and _holds_model(field["schema"]):
            deep.append((alias, field["schema"]))
    return frozenset(accepted), tuple(deep), tuple(twice)


def _holds_model(node: Any) -> bool:
    """Whether a schema can reach a model along what `_walk` follows."""
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    if kind == "model":
        return True
    if kind in ("default", "nullable"):
        return _holds_model(node["schema"])
    if kind == "list":
        return _holds_model(node.get("items_schema"))
    if kind == "tagged-union":
        return any(_holds_model(choice) for choice in node["choices"].values())
    return False
