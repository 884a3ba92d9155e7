"""Validating the JSON records the gateway writes against `schemas/*.schema.json`."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
KINDS = ("rejection", "reply", "warning", "audit")


def load(kind: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{kind}.schema.json").read_text())


@cache
def validator(kind: str) -> Draft202012Validator:
    registry: Registry = Registry().with_resources(
        (load(k)["$id"], Resource.from_contents(load(k))) for k in KINDS
    )
    return Draft202012Validator(load(kind), registry=registry)


def check(kind: str, body: Any) -> None:
    """AssertionError naming every way `body` breaks the `kind` record schema."""
    error = best_match(validator(kind).iter_errors(body))
    assert error is None, (
        f"{kind} record breaks its schema at /{'/'.join(map(str, error.absolute_path))}: "
        f"{error.message}: {body!r:.2000}"
    )


def kind_of(topic: str) -> str | None:
    """Which schema a topic's records follow, by the names the tests give topics."""
    if topic.endswith(".rejections"):
        return "rejection"
    if topic.endswith(".warnings"):
        return "warning"
    if topic.endswith(".audit"):
        return "audit"
    if topic.endswith("replies"):
        return "reply"
    return None
