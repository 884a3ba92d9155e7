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
from typing import Any, get_args

from ag_ui.core import RunAgentInput
from pydantic import BaseModel, ValidationError

from gateway.core.findings import pointer, preview

Path = tuple[str | int, ...]
MAX_UNION_STRIPS = 64


@dataclass(slots=True)
class Shape:
    """What reading an input found."""

    model: RunAgentInput | None = None
    malformed: list[tuple[str, str]] = field(default_factory=list)  # (pointer, message)
    unknown: list[Path] = field(default_factory=list)  # unknown members, in `doc`
    stripped_unions: list[tuple[Path, str]] = field(default_factory=list)  # in the raw input
    doc: dict[str, Any] | None = None  # the input with unrecognised union members removed
    removed: list[Path] = field(default_factory=list)  # union members removed, raw coordinates
    raw: Any = None  # the input as received
    # per list (raw coordinates): the raw positions of its elements still in `doc`
    _survivors: dict[Path, list[int]] = field(default_factory=dict)

    # per list (raw coordinates): the raw positions removed from it
    _gone: dict[Path, set[int]] = field(default_factory=dict)

    def remove(self, paths: list[Path]) -> None:
        self.removed.extend(paths)
        for path in paths:
            if path and isinstance(path[-1], int):
                self._gone.setdefault(path[:-1], set()).add(path[-1])
        self._survivors.clear()

    def original(self, path: Path) -> Path:
        """Where a path into `doc` points in the raw input (list positions shift back).

        Linear overall: each list that lost elements has its survivors listed once.
        """
        out: list[str | int] = []
        for part in path:
            if isinstance(part, int) and self._gone:
                prefix = tuple(out)
                gone = self._gone.get(prefix)
                if gone:
                    survivors = self._survivors.get(prefix)
                    if survivors is None:
                        survivors = self._survivors[prefix] = self._surviving(prefix, gone)
                    if 0 <= part < len(survivors):
                        part = survivors[part]
            out.append(part)
        return tuple(out)

    def _surviving(self, prefix: Path, gone: set[int]) -> list[int]:
        try:
            items = _at(self.raw, prefix)
        except (KeyError, IndexError, TypeError):
            return []
        if not isinstance(items, list):
            return []
        return [i for i in range(len(items)) if i not in gone]


def read_input(raw: dict[str, Any]) -> Shape:
    """Validate `raw` against the protocol's RunAgentInput, strictly, by wire names.

    Elements whose union tag is unrecognised (a message `role`, a content part
    `type` the protocol does not define) are removed and the rest validated
    again; what then still fails is malformed.
    """
    shape = Shape(raw=raw)
    bad_tags = _non_text_tags(raw)
    if bad_tags:
        shape.malformed = bad_tags
        return shape
    doc = raw
    known = _unknown_tags(raw)
    if known:  # found by one pass over the messages, not by a failed validation
        shape.stripped_unions.extend(known.items())
        shape.remove(list(known))
        doc = remove_paths(raw, list(known))
    for _ in range(MAX_UNION_STRIPS):
        try:
            model = RunAgentInput.model_validate(doc, strict=True, by_alias=True, by_name=False)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False)
            tags: dict[Path, str] = {}
            for error in errors:
                if error["type"] == "union_tag_invalid" and _tag_is_text(doc, error):
                    path = _raw_path(doc, error["loc"])
                    if path:
                        tags.setdefault(path, error["msg"])
            if tags:
                originals = [(shape.original(path), message) for path, message in tags.items()]
                shape.stripped_unions.extend(originals)
                shape.remove([path for path, _ in originals])
                doc = remove_paths(doc, list(tags))
                continue
            shape.malformed = _merged(
                (pointer(*shape.original(_error_path(doc, e))), e["msg"]) for e in errors
            )
            return shape
        shape.model = model
        shape.doc = doc
        unknown_members(model, doc, (), shape.unknown)
        return shape
    shape.malformed = [("", f"more than {MAX_UNION_STRIPS} unrecognised union members")]
    return shape


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


@cache
def _union_tags() -> dict[tuple[str, ...], tuple[str, ...]]:
    """The tags of RunAgentInput's tagged unions, by where they are met.

    () the message roles; (role,) the content part types of that role's
    messages; (role, part type) the source types of such a part. Read from the
    protocol's own validator, so a protocol release brings its tags along.
    """
    found: dict[tuple[str, ...], tuple[str, ...]] = {}
    stack: list[tuple[Any, tuple[str, ...]]] = [(RunAgentInput.__pydantic_core_schema__, ())]
    while stack:
        node, names = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "tagged-union" and isinstance(node.get("choices"), dict):
                if len(names) == 1:
                    found[()] = tuple(node["choices"])
                elif names[-1:] == ("content",) and len(names) >= 3:
                    found[(names[-2],)] = tuple(node["choices"])
                elif names[-1:] == ("source",) and len(names) >= 5:
                    found[(names[-4], names[-2])] = tuple(node["choices"])
            for key, value in node.items():
                if isinstance(value, dict | list):
                    named = key not in _SCHEMA_WORDS and isinstance(key, str)
                    stack.append((value, (*names, key) if named else names))
        elif isinstance(node, list):
            stack.extend((value, names) for value in node if isinstance(value, dict | list))
    return found


_SCHEMA_WORDS = frozenset(
    {"schema", "choices", "fields", "items_schema", "definitions", "metadata", "type"}
)


def _tag_message(tag: str, name: str, choices: tuple[str, ...]) -> str:
    expected = ", ".join(f"'{c}'" for c in choices)
    return (
        f"Input tag {preview(tag)} found using '{name}' does not match any of the expected "
        f"tags: {expected}"
    )


def _unknown_tags(raw: dict[str, Any]) -> dict[Path, str]:
    """Elements whose union tag is a string the protocol does not define, in one pass.

    The same elements a failed validation would name (`union_tag_invalid`), found
    without validating twice and without one error object per element.
    """
    unions = _union_tags()
    roles = unions.get(())
    found: dict[Path, str] = {}
    messages = raw.get("messages")
    if not roles or not isinstance(messages, list):
        return found
    for m, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if not isinstance(role, str):
            continue
        if role not in roles:
            found[("messages", m)] = _tag_message(role, "role", roles)
            continue
        parts = unions.get((role,))
        content = message.get("content")
        if not parts or not isinstance(content, list):
            continue
        for c, part in enumerate(content):
            kind = part.get(_TAG_OF_PART) if isinstance(part, dict) else None
            if not isinstance(kind, str):
                continue
            if kind not in parts:
                found[("messages", m, "content", c)] = _tag_message(kind, _TAG_OF_PART, parts)
                continue
            sources = unions.get((role, kind))
            source = part.get("source")
            if sources and isinstance(source, dict):
                tag = source.get(_TAG_OF_PART)
                if isinstance(tag, str) and tag not in sources:
                    found[("messages", m, "content", c, "source")] = _tag_message(
                        tag, _TAG_OF_PART, sources
                    )
    return found


def _not_text(element: Path, tag: str) -> tuple[str, str]:
    where = pointer(*element)
    return where, f"{where}: its union tag `{tag}` must be a string, not an array or object"


def _tag_is_text(doc: Any, error: Any) -> bool:
    """Whether an unmatched union tag is a string: an unknown member, not a malformed one.

    A `role` of 5 or null can name no variant, now or in a later version: that
    field is malformed, not unrecognised.
    """
    element = _at(doc, _raw_path(doc, error["loc"]))
    name = str((error.get("ctx") or {}).get("discriminator", "")).strip("'")
    return isinstance(element, dict) and isinstance(element.get(name), str)


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
        out_list = list(node)
        for key in sorted((k for k in tree if isinstance(k, int)), reverse=True):
            if not 0 <= key < len(out_list):
                continue
            sub = tree[key]
            if sub is None:
                del out_list[key]
            else:
                out_list[key] = _prune(out_list[key], sub)
        return out_list
    return node
