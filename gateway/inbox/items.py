"""One open interrupt as the inbox holds it, and as its answers show it.

An `Item` keeps what filters and order need as attributes and the rest as the
record's JSON (decoded only for the page of items an answer shows), so an open
interrupt costs about its record's size plus a few hundred bytes.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.codec import interrupts as records
from gateway.inbox.search import searchable


def key_of(agent: str, thread: str, interrupt: str) -> str:
    """The opaque, stable key of an open interrupt (URL-safe: base64 of its record key)."""
    raw = records.key(agent, thread, interrupt)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def iso(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC (`...Z`), or None."""
    if ms is None:
        return None
    try:
        moment = datetime.fromtimestamp(ms / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Item:
    """An open interrupt: what the index sorts and filters on, and its record."""

    __slots__ = (
        "key",
        "agent",
        "thread",
        "interrupt",
        "reason",
        "group",
        "opened_at_ms",
        "expires_at_ms",
        "position",
        "text",
        "value",
    )

    def __init__(self, opened: records.Opened, value: bytes) -> None:
        self.key = key_of(opened.agent, opened.thread, opened.interrupt)
        self.agent = opened.agent
        self.thread = opened.thread
        self.interrupt = opened.interrupt
        self.reason = opened.reason
        self.group = opened.group
        self.opened_at_ms = opened.opened_at_ms
        self.expires_at_ms = opened.expires_at_ms
        self.position = opened.position
        # what a text search looks in, made searchable once
        self.text = searchable(
            " ".join(
                part
                for part in (
                    opened.agent,
                    opened.thread,
                    opened.interrupt,
                    opened.reason,
                    opened.message,
                    opened.tool_call_id,
                    opened.tool_name,
                    opened.run,
                )
                if part
            )
        )
        self.value = value

    def to_json(self, now_ms: int) -> dict[str, Any]:
        """The contract's Interrupt item."""
        body = orjson.loads(self.value)
        subagent = body.get("subagentRunId")
        return {
            "key": self.key,
            "agent": self.agent,
            "thread": self.thread,
            "run": body.get("run"),
            "interrupt": self.interrupt,
            "reason": self.reason,
            "message": body.get("message"),
            "toolCallId": body.get("toolCallId"),
            "toolName": body.get("toolName"),
            "responseSchema": body.get("responseSchema"),
            "subagent": None if subagent is None else {"runId": subagent, "name": None},
            "openedAtMs": self.opened_at_ms,
            "openedAt": iso(self.opened_at_ms),
            "expiresAtMs": self.expires_at_ms,
            "expiresAt": iso(self.expires_at_ms),
            "ageSeconds": max(0.0, (now_ms - self.opened_at_ms) / 1000),
        }
