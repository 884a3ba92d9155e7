"""What the inbox's tests share: interrupts topic records, and the API's JSON Schemas."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource

from gateway.codec import interrupts as records

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
ANSWERS = ("interrupt", "interrupts", "thread", "summary", "change")


def opened(
    agent: str = "bot",
    thread: str = "t1",
    interrupt: str = "a",
    at_ms: int = 1_000,
    *,
    reason: str | None = "tool_call",
    message: str | None = None,
    expires_at_ms: int | None = None,
    group: str | None = None,
    run: str = "r1",
) -> tuple[bytes, bytes]:
    """(key, value) of an opened interrupt's record."""
    record = records.Opened(
        agent, thread, run, interrupt, reason, message, None, {"type": "boolean"}, None,
        at_ms, expires_at_ms, group,
    )  # fmt: skip
    return records.key(agent, thread, interrupt), record.to_json()


def closed(
    agent: str = "bot",
    thread: str = "t1",
    interrupt: str = "a",
    status: str = "resolved",
    at_ms: int = 2_000,
    opened_at_ms: int | None = 1_000,
) -> tuple[bytes, dict[str, bytes]]:
    """(key, headers) of a closed interrupt's tombstone."""
    close = records.Closed(agent, thread, interrupt, status, at_ms, opened_at_ms)
    return records.key(agent, thread, interrupt), dict(close.headers())


def _load(kind: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"inbox-{kind}.schema.json").read_text())


@cache
def validator(kind: str) -> Draft202012Validator:
    registry: Registry = Registry().with_resources(
        (_load(k)["$id"], Resource.from_contents(_load(k))) for k in ANSWERS
    )
    Draft202012Validator.check_schema(_load(kind))
    return Draft202012Validator(_load(kind), registry=registry)


def check(kind: str, body: Any) -> None:
    """AssertionError naming how `body` breaks the inbox's `kind` answer schema."""
    error = best_match(validator(kind).iter_errors(body))
    assert error is None, (
        f"{kind} answer breaks its schema at /{'/'.join(map(str, error.absolute_path))}: "
        f"{error.message}: {body!r:.2000}"
    )
