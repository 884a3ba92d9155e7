"""Checking a resolved payload against its interrupt's `responseSchema`.

A schema that cannot be used (not a valid JSON Schema, an unresolvable
`$ref`, ...) is the caller's warning, not a rejection. Nothing is fetched:
remote references are unresolvable by design.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from referencing import Registry

from gateway.core.findings import pointer

MAX_ERRORS = 5
_NO_REMOTE: Registry = Registry()  # jsonschema adds the meta-schemas; nothing is retrieved


@dataclass(frozen=True, slots=True)
class SchemaCheck:
    ok: bool
    usable: bool = True
    problems: tuple[tuple[str, str], ...] = ()  # (JSON Pointer inside the payload, messages)
    detail: str = ""


class _Unusable(Exception):
    pass


@lru_cache(maxsize=1024)
def _validator(schema_json: bytes) -> Any:
    schema = orjson.loads(schema_json)
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise _Unusable(f"not a valid JSON Schema: {exc.message}") from None
    return cls(schema, registry=_NO_REMOTE)  # the default registry fetches remote $refs


def check(schema: object, payload: object) -> SchemaCheck:
    """Validate `payload` (None when absent) against `schema`."""
    if not isinstance(schema, dict):
        return SchemaCheck(ok=True, usable=False, detail="responseSchema is not an object")
    try:
        validator = _validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
        errors = sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path))
    except _Unusable as exc:
        return SchemaCheck(ok=True, usable=False, detail=str(exc))
    except (orjson.JSONEncodeError, RecursionError) as exc:
        return SchemaCheck(ok=True, usable=False, detail=f"cannot read the schema: {exc}")
    except Exception as exc:  # unresolvable $ref and kin, raised while validating
        return SchemaCheck(ok=True, usable=False, detail=f"{type(exc).__name__}: {exc}")
    if not errors:
        return SchemaCheck(ok=True)
    by_where: dict[str, list[str]] = {}
    for error in errors:
        messages = by_where.setdefault(pointer(*error.absolute_path), [])
        if error.message not in messages:
            messages.append(error.message)
    problems = tuple((where, "; ".join(ms)) for where, ms in list(by_where.items())[:MAX_ERRORS])
    return SchemaCheck(ok=False, problems=problems)
