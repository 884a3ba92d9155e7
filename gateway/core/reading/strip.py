"""Unknown members: found in events by the protocol's models, taken out of inputs.

`unknown_members` lists the members a parsed event's models kept as extras
(the events' own models allow them); `remove_paths` copies a decoded input
without the members the judge strips, sharing every branch it leaves alone.
`error_pointer` places a model's validation error in the event as received.
"""

from __future__ import annotations

from functools import cache
from itertools import islice, repeat
from typing import Any, get_args

from pydantic import BaseModel

from gateway.core.values.findings import pointer

Path = tuple[str | int, ...]


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


def unknown_members(
    model: BaseModel,
    raw: Any,
    at: Path,
    out: list[Path],
    taken: dict[Path, list[str]] | None = None,
    limit: int | None = None,
) -> int:
    """How many unknown members `raw` (an event) has, as its parsed `model` kept them, or
    as they were taken out before it was validated (`taken`, by the path of their object:
    `extras.without_extras`), each object's in the order `raw` has them. `out` gets their
    paths in that order, the first `limit` of them (None: all): a flood of them is counted,
    not built."""
    if not isinstance(raw, dict):
        return 0
    count = 0
    extra = model.__pydantic_extra__ or (taken.get(at) if taken else None)
    if extra:
        count = len(extra)
        room = count if limit is None else min(count, limit - len(out))
        if room > 0:  # (*at, key) each, built without a loop here
            out.extend(zip(*map(repeat, at), islice(extra, room), strict=False))
    for name, key in _nested_fields(type(model)):
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            count += unknown_members(value, raw.get(key), (*at, key), out, taken, limit)
        elif isinstance(value, list) and value:
            items = raw.get(key)
            if isinstance(items, list):
                for index, (item, raw_item) in enumerate(zip(value, items, strict=False)):
                    if isinstance(item, BaseModel):
                        count += unknown_members(
                            item, raw_item, (*at, key, index), out, taken, limit
                        )
    return count


@cache  # keyed by model class: the protocol's models, a fixed set
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
    # paths come grouped by parent (the members of one object, the entries of one list):
    # the parent's node is found once per run of them
    last: Path | None = None
    parent: dict[Any, Any] | None = tree
    for path in paths:
        if len(path) == 1:  # a member of the input itself (a flood of them is common)
            tree[path[0]] = None
            continue
        prefix = path[:-1]
        if prefix != last:
            last, parent = prefix, tree
            for part in prefix:
                parent = parent.setdefault(part, {})
                if parent is None:
                    break  # an ancestor is removed already
        if parent is not None:
            parent[path[-1]] = None  # a leaf: remove (its own subtree, if any, goes too)
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
        kept: list[Any] = []
        for index, item in enumerate(node):
            sub = tree.get(index, _KEEP)
            if sub is _KEEP:
                kept.append(item)
            elif sub is not None:
                kept.append(_prune(item, sub))
        return kept
    return node


_KEEP: Any = object()
