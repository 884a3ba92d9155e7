"""Builders for wire-format AG-UI events and run inputs, and a replay helper.

Everything here produces plain decoded JSON (dicts, lists, strings), exactly
what the gateway reads off a topic, so the tests exercise the core the way
the service does.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway.core import EventOutcome, ThreadState, apply_event

THREAD = "thread-1"
RUN_1 = "run-1"
RUN_2 = "run-2"

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
NOW_ISO = "2025-06-01T12:00:00Z"

_MISSING: Any = object()


def iso(moment: datetime) -> str:
    """ISO 8601 with a `Z` suffix and millisecond precision."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_at(offset_ms: int) -> str:
    """The ISO 8601 time `offset_ms` after NOW (negative: before)."""
    return iso(NOW + timedelta(milliseconds=offset_ms))


# --- events ---------------------------------------------------------------------------------


def run_started(run_id: str = RUN_1, thread_id: str = THREAD, **extra: Any) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id, **extra}


def interrupt(
    interrupt_id: str = "int-1",
    reason: str = "tool_call",
    **extra: Any,
) -> dict[str, Any]:
    return {"id": interrupt_id, "reason": reason, **extra}


def run_finished(
    run_id: str = RUN_1,
    thread_id: str = THREAD,
    *,
    interrupts: list[dict[str, Any]] | None = None,
    outcome: Any = _MISSING,
    **extra: Any,
) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id}
    if interrupts is not None:
        event["outcome"] = {"type": "interrupt", "interrupts": interrupts}
    elif outcome is not _MISSING:
        event["outcome"] = outcome
    event.update(extra)
    return event


def run_error(message: str = "boom", **extra: Any) -> dict[str, Any]:
    return {"type": "RUN_ERROR", "message": message, **extra}


def text_start(message_id: str = "msg-1") -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"}


def subagent_started(sub: str, name: str = "helper") -> dict[str, Any]:
    return {"type": "SUBAGENT_STARTED", "subagentRunId": sub, "name": name}


def subagent_finished(sub: str, outcome: dict[str, Any] | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "SUBAGENT_FINISHED", "subagentRunId": sub}
    if outcome is not None:
        event["outcome"] = outcome
    return event


def subagent_error(sub: str, message: str = "sub failed") -> dict[str, Any]:
    return {"type": "SUBAGENT_ERROR", "subagentRunId": sub, "message": message}


def interrupted(*interrupts: dict[str, Any], run_id: str = RUN_1) -> list[dict[str, Any]]:
    """A whole run that ends with the interrupt outcome."""
    return [run_started(run_id), run_finished(run_id, interrupts=list(interrupts))]


# --- inputs ---------------------------------------------------------------------------------


def entry(
    interrupt_id: str = "int-1",
    status: str = "resolved",
    payload: Any = _MISSING,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {"interruptId": interrupt_id, "status": status}
    if payload is not _MISSING:
        out["payload"] = payload
    out.update(extra)
    return out


def run_input(
    resume: list[dict[str, Any]] | None = None,
    *,
    run_id: str = RUN_2,
    thread_id: str = THREAD,
    **extra: Any,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "threadId": thread_id,
        "runId": run_id,
        "messages": [{"id": "m-1", "role": "user", "content": "go on"}],
    }
    if resume is not None:
        doc["resume"] = resume
    doc.update(extra)
    return doc


# --- replay ---------------------------------------------------------------------------------


def replay(
    events: Iterable[object],
    thread_id: str = THREAD,
    state: ThreadState | None = None,
    at_ms: int = NOW_MS - 60_000,
) -> tuple[ThreadState | None, list[EventOutcome]]:
    """Apply `events` in order; return the final state and every outcome."""
    outcomes = []
    for offset, event in enumerate(events):
        outcome = apply_event(state, thread_id, event, at_ms + offset)
        state = outcome.state
        outcomes.append(outcome)
    return state, outcomes


def state_of(*events: object, thread_id: str = THREAD) -> ThreadState:
    state, _ = replay(events, thread_id)
    assert state is not None
    return state


def warnings_of(outcomes: Iterable[EventOutcome]) -> list[tuple[str, str | None]]:
    """(code, rule) of every warning, in order."""
    return [(w.code, w.rule) for o in outcomes for w in o.warnings]


def codes(findings: Iterable[Any]) -> list[str]:
    return [f.code for f in findings]
