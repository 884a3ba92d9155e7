"""The thread state machine: one event in, a new state and its warnings out.

Transitions are data: `TRANSITIONS[status][kind]` names the step taken for an
event of `kind` on a thread whose latest run stands at `status`. Steps are
pure functions of (state, event, time). Protocol violations never raise:
they come back as `protocol_violation` warnings naming the rule, and the
state stays well defined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from ag_ui.core import (
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
)
from pydantic import BaseModel, ValidationError

from gateway.core.classify import EventKind, classify
from gateway.core.codes import Rule, Warn
from gateway.core.findings import Finding, pointer
from gateway.core.shape import Path, error_pointer, unknown_members
from gateway.core.state import (
    InterruptRecord,
    RunStatus,
    SuspendedSubagent,
    ThreadState,
)

SUSPENDED_KEPT = 32
_KNOWN_OUTCOMES = frozenset({"success", "interrupt", "cancelled"})
_KNOWN_SUBAGENT_OUTCOMES = frozenset({"success", "suspended"})


class Change(Enum):
    """What an event did to the thread, for the shell's effects and metrics."""

    NONE = "none"  # nothing (streaming delta, ignored or rejected event)
    STARTED = "started"  # a run started
    CLOSED = "closed"  # a run closed with RUN_FINISHED (see state.outcome)
    FAILED = "failed"  # a run failed (RUN_ERROR, malformed RUN_FINISHED)
    FAILED_LATE = "failed_late"  # RUN_ERROR after RUN_FINISHED
    SUBAGENT = "subagent"  # subagent bookkeeping changed


@dataclass(frozen=True, slots=True)
class EventOutcome:
    state: ThreadState | None
    change: Change
    warnings: tuple[Finding, ...] = ()
    kind: EventKind = EventKind.STREAM


@dataclass(slots=True)
class _Step:
    """Mutable scratch for one event's step: the result is frozen on return."""

    state: ThreadState
    event: dict[str, Any]
    at_ms: int
    kind: EventKind
    change: Change = Change.NONE
    warnings: list[Finding] | None = None

    def warn(self, code: Warn, detail: str, *, rule: Rule | None = None, **kw: Any) -> None:
        if self.warnings is None:
            self.warnings = []
        self.warnings.append(Finding(str(code), detail, rule=rule and str(rule), **kw))

    def violation(self, rule: Rule, detail: str, **kw: Any) -> None:
        self.warn(Warn.PROTOCOL_VIOLATION, detail, rule=rule, **kw)

    def set(self, change: Change, **fields: Any) -> None:
        self.state = replace(self.state, updated_ms=self.at_ms, **fields)
        self.change = change


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
        detail = f"unknown event type {event['type']!r} dropped"
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
    step = _Step(current, event, at_ms, kind)
    TRANSITIONS[current.status][kind](step)
    new_state: ThreadState | None = step.state
    if step.change is Change.NONE and state is None and new_state == current:
        new_state = None  # nothing learned about a thread we do not know
    return EventOutcome(new_state, step.change, tuple(step.warnings or ()), kind)


# --- parsing lifecycle events with the protocol's models ---------------------------------


def _model(step: _Step, model: type[BaseModel], event: dict[str, Any]) -> BaseModel | None:
    try:
        parsed = model.model_validate(event, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = error_pointer(event, first)
        step.violation(
            Rule.MALFORMED_EVENT,
            f"{event.get('type')} has a malformed known field at {where or '/'}: {first['msg']}",
            path=where,
        )
        return None
    unknown: list[Path] = []
    unknown_members(parsed, event, (), unknown)
    for path in unknown:
        where = pointer(*path)
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"unknown member {where} of {event.get('type')} ignored",
            path=where,
        )
    return parsed


def _check_thread(step: _Step, model: RunStartedEvent | RunFinishedEvent) -> None:
    if model.thread_id != step.state.thread_id:
        step.violation(
            Rule.THREAD_ID_MISMATCH,
            f"{step.kind.value} names thread {model.thread_id!r} on the stream of "
            f"thread {step.state.thread_id!r}; the record key places it",
            path="/threadId",
        )


# --- steps --------------------------------------------------------------------------------


def _start(step: _Step) -> None:
    model = _model(step, RunStartedEvent, step.event)
    run_id = step.event.get("runId")
    if model is not None:
        _check_thread(step, model)  # type: ignore[arg-type]
        run_id = model.run_id  # type: ignore[attr-defined]
    step.set(
        Change.STARTED,
        status=RunStatus.ACTIVE,
        run_id=run_id if isinstance(run_id, str) else None,
        outcome=None,
        interrupts=(),
        closed_at_ms=None,
        failed_late=False,
        open_subagents=(),
        forwards=_settled(step.state),
    )


def _first_event_start(step: _Step) -> None:
    step.violation(
        Rule.FIRST_EVENT,
        f"the stream opens with {step.event.get('type')}; it must open with RUN_STARTED or "
        "RUN_ERROR",
    )
    step.set(Change.STARTED, status=RunStatus.ACTIVE)
    TRANSITIONS[RunStatus.ACTIVE][step.kind](step)


def _nested_start(step: _Step) -> None:
    if step.state.run_id is None:
        # The active run was opened by a stray first event (already flagged
        # `first_event`): this RUN_STARTED names it.
        _start(step)
        return
    step.violation(
        Rule.NESTED_RUN_STARTED,
        f"RUN_STARTED for run {step.event.get('runId')!r} while run "
        f"{step.state.run_id!r} is active; ignored",
    )


def _finish(step: _Step) -> None:
    event = step.event
    outcome = event.get("outcome")
    outcome_type = outcome.get("type") if isinstance(outcome, dict) else None
    if (
        isinstance(outcome, dict)
        and isinstance(outcome_type, str)
        and (outcome_type not in _KNOWN_OUTCOMES)
    ):
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"unrecognised outcome type {outcome.get('type')!r} stripped; the run reads as success",
            path="/outcome",
        )
        event = {k: v for k, v in event.items() if k != "outcome"}
        outcome = None
    if (
        isinstance(outcome, dict)
        and outcome.get("type") == "interrupt"
        and not outcome.get("interrupts")
    ):
        step.violation(
            Rule.EMPTY_INTERRUPT_OUTCOME,
            "RUN_FINISHED has the interrupt outcome with no interrupts; the run is failed",
            path="/outcome/interrupts",
        )
        _close_failed(step)
        return
    if (
        isinstance(outcome, dict)
        and outcome_type in ("success", "cancelled")
        and "interrupts" in outcome
    ):
        # The success and cancelled outcomes are closed: interrupts on them are a
        # contradiction the schema rejects, so the RUN_FINISHED is malformed (and
        # its interrupts are never dropped silently).
        step.violation(
            Rule.MALFORMED_EVENT,
            f"RUN_FINISHED has the {outcome_type} outcome carrying interrupts; an "
            "interrupted run must end with the interrupt outcome. The run is failed",
            path="/outcome/interrupts",
        )
        _close_failed(step)
        return
    model = _model(step, RunFinishedEvent, event)
    if model is None:
        _close_failed(step)  # a malformed RUN_FINISHED fails the run
        return
    _check_thread(step, model)  # type: ignore[arg-type]
    run_id = model.run_id  # type: ignore[attr-defined]
    if step.state.run_id is not None and run_id != step.state.run_id:
        step.violation(
            Rule.RUN_ID_MISMATCH,
            f"RUN_FINISHED names run {run_id!r} but run {step.state.run_id!r} is active; "
            "the active run is closed",
            path="/runId",
        )
        run_id = step.state.run_id
    kind = model.outcome.type if model.outcome is not None else "success"  # type: ignore[attr-defined]
    interrupts: tuple[InterruptRecord, ...] = ()
    status = {"success": RunStatus.SUCCEEDED, "cancelled": RunStatus.CANCELLED}.get(kind)
    if kind == "interrupt":
        status = RunStatus.INTERRUPTED
        interrupts = _interrupts(step, model.outcome.interrupts)  # type: ignore[attr-defined]
    step.set(
        Change.CLOSED,
        status=status,
        run_id=run_id,
        outcome=kind,
        interrupts=interrupts,
        closed_at_ms=step.at_ms,
        failed_late=False,
        open_subagents=(),
    )


def _interrupts(step: _Step, interrupts: list[Any]) -> tuple[InterruptRecord, ...]:
    seen: dict[str, InterruptRecord] = {}
    for index, item in enumerate(interrupts):
        if item.id in seen:
            step.violation(
                Rule.DUPLICATE_INTERRUPT_ID,
                f"interrupt id {item.id!r} appears twice in one run; the first is kept",
                interrupt_id=item.id,
                path=pointer("outcome", "interrupts", index, "id"),
            )
            continue
        seen[item.id] = InterruptRecord(
            id=item.id,
            reason=item.reason,
            message=item.message,
            tool_call_id=item.tool_call_id,
            response_schema=item.response_schema,
            expires_at=item.expires_at,
            metadata=item.metadata,
            subagent_run_id=item.subagent_run_id,
        )
    return tuple(seen.values())


def _first_event_finish(step: _Step) -> None:
    step.violation(
        Rule.FIRST_EVENT,
        "the stream opens with RUN_FINISHED; it must open with RUN_STARTED or RUN_ERROR. "
        "Its outcome is recorded so no interrupt is lost",
    )
    _finish(step)


def _close_failed(step: _Step) -> None:
    step.set(
        Change.FAILED,
        status=RunStatus.FAILED,
        outcome=None,
        interrupts=(),
        closed_at_ms=step.at_ms,
        failed_late=False,
        open_subagents=(),
        forwards=_settled(step.state),
    )


def _fail(step: _Step) -> None:
    _model(step, RunErrorEvent, step.event)  # malformed: warned, the run fails all the same
    _close_failed(step)


def _late_error(step: _Step) -> None:
    _model(step, RunErrorEvent, step.event)
    kept = len(step.state.interrupts)
    step.warn(
        Warn.LATE_RUN_ERROR,
        f"RUN_ERROR after RUN_FINISHED: run {step.state.run_id!r} is failed"
        + (f"; its {kept} delivered interrupt(s) stay open" if kept else ""),
    )
    step.set(
        Change.FAILED_LATE,
        status=RunStatus.FAILED,
        failed_late=True,
        forwards=_settled(step.state),
    )


def _error_after_failure(step: _Step) -> None:
    # A stream that opens with RUN_ERROR after a failed run: an attempt that
    # never started. It names no run and so replaces nothing; it does settle
    # forwards, since the agent answered them with a failure.
    _model(step, RunErrorEvent, step.event)
    if any(not f.settled for f in step.state.forwards):
        step.set(Change.NONE, forwards=_settled(step.state))


def _after_close(step: _Step) -> None:
    step.violation(
        Rule.EVENT_AFTER_CLOSE,
        f"{step.kind.value} after run {step.state.run_id!r} closed; only RUN_STARTED or one "
        "late RUN_ERROR may follow a closed run. Ignored",
    )


def _ignore(step: _Step) -> None:
    return None


def _subagent_started(step: _Step) -> None:
    model = _model(step, SubagentStartedEvent, step.event)
    if model is None:
        return
    sub = model.subagent_run_id  # type: ignore[attr-defined]
    if sub in step.state.open_subagents:
        step.violation(
            Rule.SUBAGENT_ALREADY_STARTED,
            f"SUBAGENT_STARTED for invocation {sub!r}, which is already open",
            path="/subagentRunId",
        )
        return
    step.set(Change.SUBAGENT, open_subagents=(*step.state.open_subagents, sub))


def _subagent_ended(step: _Step) -> None:
    model_type = (
        SubagentFinishedEvent if step.kind is EventKind.SUBAGENT_FINISHED else SubagentErrorEvent
    )
    event = step.event
    outcome = event.get("outcome") if step.kind is EventKind.SUBAGENT_FINISHED else None
    outcome_type = outcome.get("type") if isinstance(outcome, dict) else None
    if isinstance(outcome_type, str) and outcome_type not in _KNOWN_SUBAGENT_OUTCOMES:
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"unrecognised subagent outcome type {outcome_type!r} stripped; "
            "the invocation reads as finished with success",
            path="/outcome",
        )
        event = {k: v for k, v in event.items() if k != "outcome"}
    model = _model(step, model_type, event)
    if model is None:
        return
    sub = model.subagent_run_id  # type: ignore[attr-defined]
    suspended = {s.subagent_run_id: s for s in step.state.suspended}
    if sub not in step.state.open_subagents and sub not in suspended:
        step.violation(
            Rule.SUBAGENT_NOT_STARTED,
            f"{step.kind.value} for invocation {sub!r}, which was never started",
            path="/subagentRunId",
        )
    suspended.pop(sub, None)
    # SUBAGENT_ERROR has no outcome: an `outcome` member there is an unknown extra
    outcome = model.outcome if isinstance(model, SubagentFinishedEvent) else None
    if outcome is not None and outcome.type == "suspended":
        suspended[sub] = SuspendedSubagent(sub, tuple(outcome.interrupt_ids or ()))
    step.set(
        Change.SUBAGENT,
        open_subagents=tuple(s for s in step.state.open_subagents if s != sub),
        suspended=tuple(suspended.values())[-SUSPENDED_KEPT:],
    )


def _settled(state: ThreadState) -> tuple[Any, ...]:
    if all(f.settled for f in state.forwards):
        return state.forwards
    return tuple(replace(f, settled=True) for f in state.forwards)


Step = Callable[[_Step], None]
_CLOSED: dict[EventKind, Step] = {
    EventKind.RUN_STARTED: _start,
    EventKind.RUN_FINISHED: _after_close,
    EventKind.RUN_ERROR: _late_error,
    EventKind.SUBAGENT_STARTED: _after_close,
    EventKind.SUBAGENT_FINISHED: _after_close,
    EventKind.SUBAGENT_ERROR: _after_close,
    EventKind.STREAM: _after_close,
}
TRANSITIONS: dict[RunStatus, dict[EventKind, Step]] = {
    RunStatus.UNKNOWN: {
        EventKind.RUN_STARTED: _start,
        EventKind.RUN_FINISHED: _first_event_finish,
        EventKind.RUN_ERROR: _fail,
        EventKind.SUBAGENT_STARTED: _first_event_start,
        EventKind.SUBAGENT_FINISHED: _first_event_start,
        EventKind.SUBAGENT_ERROR: _first_event_start,
        EventKind.STREAM: _first_event_start,
    },
    RunStatus.ACTIVE: {
        EventKind.RUN_STARTED: _nested_start,
        EventKind.RUN_FINISHED: _finish,
        EventKind.RUN_ERROR: _fail,
        EventKind.SUBAGENT_STARTED: _subagent_started,
        EventKind.SUBAGENT_FINISHED: _subagent_ended,
        EventKind.SUBAGENT_ERROR: _subagent_ended,
        EventKind.STREAM: _ignore,
    },
    RunStatus.SUCCEEDED: _CLOSED,
    RunStatus.INTERRUPTED: _CLOSED,
    RunStatus.CANCELLED: _CLOSED,
    RunStatus.FAILED: {**_CLOSED, EventKind.RUN_ERROR: _error_after_failure},
}
