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


@cache
def _audit_validator() -> Draft202012Validator:
    return Draft202012Validator(json.loads((SCHEMAS / "audit.schema.json").read_text()))


def audit(
    agent: str = "bot",
    thread: str = "t1",
    verdict: str = "forward",
    *,
    run: str = "n1",
    at_ms: int = 3_000,
    codes: tuple[str, ...] = (),
    entries: tuple[tuple[str, str], ...] = (("a", "resolved"),),
    subject: str | None = None,
    correlation: str | None = "corr-1",
) -> bytes:
    """An audit record's value, as schemas/audit.schema.json says (checked)."""
    from datetime import UTC, datetime

    def at(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat()

    body = {
        "auditVersion": 1,
        "verdict": verdict,
        "attestation": "unattested" if subject is None else "verified",
        "identity": None
        if subject is None
        else {"subject": subject, "groups": ["ops"], "issuer": "idp", "signer": "k1"},
        "agent": agent,
        "threadId": thread,
        "runId": run,
        "interrupts": [
            {
                "interruptId": interrupt,
                "status": status,
                "reason": "tool_call",
                "forwarded": verdict == "forward",
                "payloadSha256": None,
            }
            for interrupt, status in entries
        ],
        "reasons": [{"code": code, "detail": f"{code} found"} for code in codes],
        "correlationId": correlation,
        "source": {"topic": f"agui.{agent}.requests", "partition": 0, "offset": 7},
        "requestedAt": at(at_ms - 5),
        "requestedAtMs": at_ms - 5,
        "judgedAt": at(at_ms - 5),
        "decidedAt": at(at_ms),
        "decidedAtMs": at_ms,
    }
    error = best_match(_audit_validator().iter_errors(body))
    assert error is None, error.message
    return json.dumps(body).encode()
