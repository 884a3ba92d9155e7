"""Checking a resolved payload against its interrupt's `responseSchema`, within a budget.

Two decisions, never mixed:

- Whether a schema is *usable* is decided from the schema alone, once, and
  cached: it must be valid JSON Schema, at most `MAX_SCHEMA_BYTES` of JSON and
  `MAX_SCHEMA_DEPTH` levels, with `$ref`s that are local JSON Pointers, not
  recursive, whose expansion stays within `MAX_EXPANDED_VALUES` JSON values,
  and with patterns the linear-time regex engine compiles. An unusable schema
  is the caller's warning, not a rejection.
- Checking a payload against a usable schema either passes, breaks the schema
  (the first `MAX_ERRORS` locations), or cannot be completed within the
  budget (`could_not_check`): the caller then rejects, it never forwards
  unchecked.

The validator is `jsonschema-rs` (compiled, in Rust) with the `regex` crate's
linear-time engine for `pattern`/`patternProperties`. Nothing is fetched and
no file is read: only references inside the schema itself are followed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
import orjson

from gateway.core.values.bytecache import ByteLRU
from gateway.core.values.findings import pointer
from gateway.core.values.jsontext import fitted

MAX_ERRORS = 5
MAX_SCHEMA_BYTES = 64 * 1024  # the schema's canonical JSON
MAX_SCHEMA_DEPTH = 64  # nesting, references followed
MAX_EXPANDED_VALUES = 4_000  # JSON values once every $ref is replaced by its target
# Schemas judged anew per RUN_FINISHED (a schema the cache knows costs nothing): judging
# costs ~0.15 us per byte, so one event's schemas stay within ~20 ms.
MAX_SCHEMA_BYTES_PER_RUN = 128 * 1024
MAX_PAYLOAD_BYTES = 256 * 1024  # a payload checked against a schema, as compact JSON
# Validation cost bound: expanded schema values x payload bytes. Measured on the
# reference 2-core machine at ~2 ns per unit for the worst keywords (README, "Limits").
CHECK_BUDGET = 10_000_000
# Building error details copies and walks far more than validating does: the
# details are computed under this smaller budget, else one location ("") is reported.
DETAIL_BUDGET = 6_000
CACHE_BYTES = 16 * 1024 * 1024
_COMPILED_BYTES_PER_SCHEMA_BYTE = 16  # estimate of a compiled validator's footprint
_MASK = "the value"  # error messages never embed the payload (bounded, no copies)
_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
_UNSUPPORTED_KEYS = ("$anchor", "$dynamicAnchor", "$recursiveAnchor")


@dataclass(frozen=True, slots=True)
class SchemaCheck:
    ok: bool
    usable: bool = True
    problems: tuple[tuple[str, str], ...] = ()  # (JSON Pointer inside the payload, messages)
    detail: str = ""
    could_not_check: bool = False  # usable schema, payload not checkable: reject


@dataclass(frozen=True, slots=True)
class Prepared:
    """A schema's verdict on itself: a compiled validator, or why it cannot be used.

    `text` is the schema's canonical JSON (sorted keys, compact) as the cache holds it:
    every interrupt whose schema has those bytes keeps this one object.
    """

    validator: Any = None
    unusable: str = ""
    expanded: int = 0
    text: bytes = b""


_by_text: ByteLRU[bytes, Prepared] = ByteLRU(CACHE_BYTES)  # bounded: CACHE_BYTES in all


def canonical(schema: object) -> bytes | str:
    """The canonical JSON of `schema` (sorted keys, compact), or a str saying why it
    cannot be a usable schema (not an object, or not written by orjson)."""
    if not isinstance(schema, dict):
        return "responseSchema is not an object"
    try:
        return fitted(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
    except orjson.JSONEncodeError:
        return "it is nested deeper than 254 levels or holds an integer beyond 64 bits"


def prepare(schema: object) -> Prepared:
    """The usable-or-not verdict of `schema`, decided once and cached by its bytes."""
    text = canonical(schema)
    if isinstance(text, str):
        return Prepared(unusable=text)
    return _by_text.get(text) or _compiled(schema, text)


def record(schema: object, budget: int | None = None) -> tuple[bytes | None, str | None, int]:
    """What an interrupt keeps of its `responseSchema`, decided when it is recorded.

    (the canonical bytes, None, cost) for a usable schema, the bytes shared with every
    other interrupt holding the same schema while the cache knows it; (None, why, cost)
    for an unusable one, whose schema is then not kept at all. `cost` is the bytes
    judged anew (0 when the cache knew the schema); a schema that would cost more than
    `budget` is not judged and is unusable.
    """
    text = canonical(schema)
    if isinstance(text, str):
        return None, text, 0
    prepared = _by_text.get(text)
    cost = 0
    if prepared is None:
        if budget is not None and len(text) > budget and len(text) <= MAX_SCHEMA_BYTES:
            return None, f"the run's schemas total over {MAX_SCHEMA_BYTES_PER_RUN:,} bytes", 0
        prepared = _compiled(schema, text)
        cost = len(text)
    if prepared.validator is None:
        return None, prepared.unusable or "not a usable JSON Schema", cost
    return prepared.text, None, cost


def known(text: bytes) -> bytes | None:
    """The cache's own copy of a kept schema's bytes, if it holds them (not compiled)."""
    prepared = _by_text.get(text)
    return None if prepared is None or not prepared.text else prepared.text


def prepared_text(text: bytes) -> Prepared:
    """The verdict of a schema kept as its canonical bytes (from `record`, or restored)."""
    known = _by_text.get(text)
    if known is not None:
        return known
    try:
        schema = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return Prepared(unusable=f"its kept form is not JSON: {_first_line(str(exc))}")
    return _compiled(schema, text)


def _compiled(schema: Any, text: bytes) -> Prepared:
    if len(text) > MAX_SCHEMA_BYTES:
        return Prepared(unusable=f"{len(text):,} bytes of JSON, over {MAX_SCHEMA_BYTES:,}")
    if not isinstance(schema, dict):
        return Prepared(unusable="responseSchema is not an object")
    expanded = _expanded_size(schema)
    if isinstance(expanded, str):
        prepared = Prepared(unusable=expanded)
    else:
        try:
            validator = jsonschema_rs.validator_for(
                schema,
                mask=_MASK,
                offline=True,
                validate_formats=False,
                pattern_options=jsonschema_rs.RegexOptions(
                    size_limit=1024 * 1024, dfa_size_limit=1024 * 1024
                ),
            )
        except jsonschema_rs.ValidationError as exc:
            prepared = Prepared(unusable=f"not a usable JSON Schema: {_first_line(exc.message)}")
        except Exception as exc:  # the schema, not a payload, failed: decided once
            prepared = Prepared(unusable=f"{type(exc).__name__}: {_first_line(str(exc))}")
        else:
            prepared = Prepared(validator=validator, expanded=expanded, text=text)
    _by_text.put(text, prepared, len(text) * _COMPILED_BYTES_PER_SCHEMA_BYTE + 1024)
    return prepared


def _first_line(text: str) -> str:
    line = text.split("\n", 1)[0]
    return line if len(line) <= 300 else line[:300] + "..."


def _resolve(root: dict[str, Any], ref: str) -> object:
    """The target of a local JSON Pointer reference, or a str saying why there is none."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return f"$ref {ref[:100]!r} is not a local JSON Pointer (nothing is fetched)"
    node: object = root
    for raw in ref[2:].split("/"):
        part = raw.replace("%25", "%").replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return f"$ref {ref[:100]!r} points nowhere in the schema"
    if not isinstance(node, dict | bool):
        return f"$ref {ref[:100]!r} does not point at a schema"
    return node


def _expanded_size(root: dict[str, Any]) -> int | str:
    """How many JSON values the schema holds with every `$ref` replaced by its target.

    A str says why the schema is unusable: a recursive or non-local reference,
    nesting over MAX_SCHEMA_DEPTH, or an expansion over MAX_EXPANDED_VALUES.
    Iterative, and each distinct object or array is sized once.
    """
    draft4 = "draft-04" in str(root.get("$schema", ""))
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    # (node, depth, exiting): a node is entered, its children sized, then it is exited.
    stack: list[tuple[Any, int, bool]] = [(root, 0, False)]
    children_of: dict[int, list[Any]] = {}
    while stack:
        node, depth, exiting = stack.pop()
        key = id(node)
        if exiting:
            on_path.discard(key)
            total = 1 + sum(_size_of(child, sizes) for child in children_of.pop(key))
            sizes[key] = min(total, MAX_EXPANDED_VALUES + 1)
            if total > MAX_EXPANDED_VALUES:
                return (
                    f"its expansion ($ref targets included) exceeds {MAX_EXPANDED_VALUES:,} "
                    "JSON values"
                )
            continue
        if key in sizes:
            continue
        if depth > MAX_SCHEMA_DEPTH:
            return f"it is nested deeper than {MAX_SCHEMA_DEPTH} levels ($ref targets included)"
        children: list[Any] = []
        if isinstance(node, dict):
            for name, value in node.items():
                if name in _UNSUPPORTED_KEYS or (
                    (name == "$id" or (draft4 and name == "id"))
                    and isinstance(value, str)
                    and node is not root
                ):
                    return (
                        f"{name} inside the schema is not supported (only local JSON Pointer $refs)"
                    )
                if name in _REF_KEYS and isinstance(value, str):
                    target = _resolve(root, value)
                    if isinstance(target, str):
                        return target
                    if id(target) in on_path:
                        return f"$ref {value[:100]!r} is recursive"
                    children.append(target)
                children.append(value)
        elif isinstance(node, list):
            children.extend(node)
        children_of[key] = children
        on_path.add(key)
        stack.append((node, depth, True))
        for child in children:
            if isinstance(child, dict | list):
                if id(child) in on_path:
                    return "$ref is recursive"
                stack.append((child, depth + 1, False))
    return sizes[id(root)]


def _size_of(value: object, sizes: dict[int, int]) -> int:
    return sizes[id(value)] if isinstance(value, dict | list) else 1


def _location(error: tuple[tuple[Any, ...], str]) -> list[tuple[int, Any]]:
    return [(1, part) if isinstance(part, str) else (0, part) for part in error[0]]


def check(schema: object, payload: object) -> SchemaCheck:
    """Check `payload` (None when absent) against `schema` (a decoded schema, or the
    canonical bytes `record` kept); never raises."""
    prepared = prepared_text(schema) if isinstance(schema, bytes) else prepare(schema)
    if prepared.validator is None:
        return SchemaCheck(ok=True, usable=False, detail=prepared.unusable)
    return check_prepared(prepared, payload)


def _not_checked(detail: str) -> SchemaCheck:
    return SchemaCheck(
        ok=False,
        could_not_check=True,
        detail=f"the payload could not be checked against its responseSchema: {detail}",
    )


def check_prepared(prepared: Prepared, payload: object) -> SchemaCheck:
    try:
        size = len(orjson.dumps(payload))
    except orjson.JSONEncodeError:
        return _not_checked(
            "it is nested deeper than 254 levels or holds an integer beyond 64 bits"
        )
    if size > MAX_PAYLOAD_BYTES:
        return _not_checked(f"{size:,} bytes of JSON, over {MAX_PAYLOAD_BYTES:,}")
    cost = size * prepared.expanded
    if cost > CHECK_BUDGET:
        return _not_checked(
            f"{size:,} bytes against a schema of {prepared.expanded:,} values is over the "
            f"checking budget ({CHECK_BUDGET:,} byte-values)"
        )
    validator = prepared.validator
    try:
        if validator.is_valid(payload):
            return SchemaCheck(ok=True)
        if cost > DETAIL_BUDGET:
            return SchemaCheck(
                ok=False,
                problems=(
                    (
                        "",
                        "does not match the schema (details are not computed for a "
                        "payload this large)",
                    ),
                ),
            )
        errors = [
            (tuple(error.instance_path), error.message)
            for error in itertools.islice(validator.iter_errors(payload), 64)
        ]
    except Exception as exc:  # the payload failed the checker: never a pass
        return _not_checked(f"{type(exc).__name__}: {_first_line(str(exc))}")
    by_where: dict[str, list[str]] = {}
    for path, message in sorted(errors, key=_location):
        messages = by_where.setdefault(pointer(*path), [])
        if message not in messages:
            messages.append(_first_line(message))
    problems = tuple((where, "; ".join(ms)) for where, ms in list(by_where.items())[:MAX_ERRORS])
    return SchemaCheck(ok=False, problems=problems or (("", "does not match the schema"),))
