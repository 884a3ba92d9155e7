"""The thread state machine: one event in, a new state and its warnings out.

Transitions are data: `TRANSITIONS[status][kind]` names the step taken for an
event of `kind` on a thread whose latest run stands at `status`. Steps are
pure functions of the event's `Step` (step.py): a run's in runs.py (the
interrupts it records in interrupts.py), a subagent invocation's in
subagents.py, a tool call's name in toolcalls.py, the stream's first event's here. Protocol violations never
raise: they come back as `protocol_violation` warnings naming the rule, and
the state stays well defined.

    lifecycle -> runs -> interrupts -> step
              -> subagents ---------> step
              -> toolcalls ---------> step
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.core.events import runs, subagents, toolcalls
from gateway.core.events.classify import EventKind, classify
from gateway.core.events.step import MAX_UNKNOWN_WARNINGS, Change, Step
from gateway.core.values.codes import Rule, Warn
from gateway.core.values.findings import Finding, preview
from gateway.core.values.thread import RunStatus, ThreadState

__all__ = [
    "MAX_UNKNOWN_WARNINGS",
    "SUSPENDED_KEPT",
    "TRANSITIONS",
    "Change",
    "EventOutcome",
    "apply_event",
]

SUSPENDED_KEPT = subagents.SUSPENDED_KEPT
_KNOWN_OUTCOMES = runs.KNOWN_OUTCOMES


@dataclass(frozen=True, slots=True)
class EventOutcome:
    state: ThreadState | None
    change: Change
    warnings: tuple[Finding, ...] = ()
    kind: EventKind = EventKind.STREAM


def apply_event(
    state: ThreadState | None, thread_id: str, event: object, at_ms: int
) -> EventOutcome:
    """Apply one event of thread `thread_id`, observed at `at_ms` (epoch ms)."""
    if not isinstance(event, dict):
        return EventOutcome(
            state,
            Change.NONE,
            (
                Finding(
                    str(Warn.PROTOCOL_VIOLATION),
                    "an event must be a JSON object",
                    rule=str(Rule.MALFORMED_EVENT),
                ),
            ),
            EventKind.UNTYPED,
        )
    kind = classify(event.get("type"))
    if kind is EventKind.UNKNOWN:
        detail = f"unknown event type {preview(event['type'])} dropped"
        return EventOutcome(
            state, Change.NONE, (Finding(str(Warn.UNKNOWN_EVENT_TYPE), detail, path="/type"),), kind
        )
    if kind is EventKind.UNTYPED:
        return EventOutcome(
            state,
            Change.NONE,
            (
                Finding(
                    str(Warn.PROTOCOL_VIOLATION),
                    "an event needs a string `type`",
                    path="/type",
                    rule=str(Rule.MALFORMED_EVENT),
                ),
            ),
            kind,
        )
    current = state if state is not None else ThreadState(thread_id)
    if kind is EventKind.STREAM and current.status is RunStatus.ACTIVE:
        return EventOutcome(state, Change.NONE, (), kind)  # the hot path
    step = Step(current, event, at_ms, kind)
    TRANSITIONS[current.status][kind](step)
    new_state: ThreadState | None = step.state
    if step.change is Change.NONE and state is None and new_state == current:
        new_state = None  # nothing learned about a thread we do not know
    return EventOutcome(new_state, step.change, tuple(step.warnings or ()), kind)


# --- the stream's first event -------------------------------------------------------------


def _first_event_start(step: Step) -> None:
    step.violation(
        Rule.FIRST_EVENT,
        f"the stream opens with {step.event.get('type')}; it must open with RUN_STARTED or "
        "RUN_ERROR",
    )
    step.set(Change.STARTED, status=RunStatus.ACTIVE)
    TRANSITIONS[RunStatus.ACTIVE][step.kind](step)


def _first_event_finish(step: Step) -> None:
    step.violation(
        Rule.FIRST_EVENT,
        "the stream opens with RUN_FINISHED; it must open with RUN_STARTED or RUN_ERROR. "
        "Its outcome is recorded so no interrupt is lost",
    )
    runs.finish(step)


def _ignore(step: Step) -> None:
    return None


# --- the transitions ----------------------------------------------------------------------

StepFn = Callable[[Step], None]
_CLOSED: dict[EventKind, StepFn] = {
    EventKind.RUN_STARTED: runs.start,
    EventKind.RUN_FINISHED: runs.after_close,
    EventKind.RUN_ERROR: runs.late_error,
    EventKind.SUBAGENT_STARTED: runs.after_close,
    EventKind.SUBAGENT_FINISHED: runs.after_close,
    EventKind.SUBAGENT_ERROR: runs.after_close,
    EventKind.TOOL_CALL_START: runs.after_close,
    EventKind.STREAM: runs.after_close,
}
TRANSITIONS: dict[RunStatus, dict[EventKind, StepFn]] = {
    RunStatus.UNKNOWN: {
        EventKind.RUN_STARTED: runs.start,
        EventKind.RUN_FINISHED: _first_event_finish,
        EventKind.RUN_ERROR: runs.fail,
        EventKind.SUBAGENT_STARTED: _first_event_start,
        EventKind.SUBAGENT_FINISHED: _first_event_start,
        EventKind.SUBAGENT_ERROR: _first_event_start,
        EventKind.TOOL_CALL_START: _first_event_start,
        EventKind.STREAM: _first_event_start,
    },
    RunStatus.ACTIVE: {
        EventKind.RUN_STARTED: runs.nested_start,
        EventKind.RUN_FINISHED: runs.finish,
        EventKind.RUN_ERROR: runs.fail,
        EventKind.SUBAGENT_STARTED: subagents.started,
        EventKind.SUBAGENT_FINISHED: subagents.ended,
        EventKind.SUBAGENT_ERROR: subagents.ended,
        EventKind.TOOL_CALL_START: toolcalls.started,
        EventKind.STREAM: _ignore,
    },
    RunStatus.SUCCEEDED: _CLOSED,
    RunStatus.INTERRUPTED: _CLOSED,
    RunStatus.CANCELLED: _CLOSED,
    RunStatus.FAILED: {**_CLOSED, EventKind.RUN_ERROR: runs.error_after_failure},
}
