"""AG-UI 1.0 events as the simulated agents publish them (wire-format dicts).

Every builder puts `type` first, the layout the gateway peeks at without
parsing. Nothing here does I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

Event = dict[str, Any]

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"decision": {"enum": ["approve", "reject"]}, "note": {"type": "string"}},
    "required": ["decision"],
}


def iso_in(seconds: float, now: datetime | None = None) -> str:
    """An ISO 8601 UTC time `seconds` from now, with a Z suffix."""
    at = (now or datetime.now(UTC)) + timedelta(seconds=seconds)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def run_started(thread_id: str, run_id: str) -> Event:
    return {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id}


def text_message(message_id: str, words: list[str], subagent: str | None = None) -> list[Event]:
    """TEXT_MESSAGE_START, one CONTENT delta per word, TEXT_MESSAGE_END."""
    extra = {"subagentRunId": subagent} if subagent else {}
    out: list[Event] = [
        {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant", **extra}
    ]
    out += [
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": w + " ", **extra}
        for w in words
    ]
    out.append({"type": "TEXT_MESSAGE_END", "messageId": message_id, **extra})
    return out


def tool_call(tool_call_id: str, name: str, args: str, subagent: str | None = None) -> list[Event]:
    """TOOL_CALL_START, the arguments in a few ARGS deltas, TOOL_CALL_END."""
    extra = {"subagentRunId": subagent} if subagent else {}
    step = max(1, len(args) // 3)
    out: list[Event] = [
        {"type": "TOOL_CALL_START", "toolCallId": tool_call_id, "toolCallName": name, **extra}
    ]
    out += [
        {"type": "TOOL_CALL_ARGS", "toolCallId": tool_call_id, "delta": args[i : i + step], **extra}
        for i in range(0, len(args), step)
    ]
    out.append({"type": "TOOL_CALL_END", "toolCallId": tool_call_id, **extra})
    return out


def subagent_started(subagent_run_id: str, name: str) -> Event:
    return {"type": "SUBAGENT_STARTED", "subagentRunId": subagent_run_id, "name": name}


def subagent_finished(subagent_run_id: str, suspended_on: list[str] | None = None) -> Event:
    event: Event = {"type": "SUBAGENT_FINISHED", "subagentRunId": subagent_run_id}
    if suspended_on is not None:
        event["outcome"] = {"type": "suspended", "interruptIds": list(suspended_on)}
    return event


def run_finished(thread_id: str, run_id: str, outcome: dict[str, Any] | None = None) -> Event:
    event: Event = {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id}
    if outcome is not None:
        event["outcome"] = outcome
    return event


def success() -> dict[str, Any]:
    return {"type": "success"}


def cancelled() -> dict[str, Any]:
    return {"type": "cancelled"}


def interrupted(interrupts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "interrupt", "interrupts": interrupts}


def run_error(message: str, code: str | None = None) -> Event:
    event: Event = {"type": "RUN_ERROR", "message": message}
    if code:
        event["code"] = code
    return event
