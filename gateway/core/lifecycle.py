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

from gateway.core import response_schema
from gateway.core.classify import EventKind, classify
from gateway.core.codes import Rule, Warn
from gateway.core.findings import Finding, pointer, preview
from gateway.core.jsontext import to_json
from gateway.core.shape import Path, error_pointer, unknown_members
from gateway.core.thread import (
    MAX_ID_BYTES,
    MAX_IDS_PER_SUSPENSION,
    MAX_INTERRUPT_CONTENT_BYTES,
    MAX_INTERRUPTS_PER_RUN,
    MAX_OPEN_SUBAGENTS,
    MAX_SUSPENDED,
    ForwardRecord,
    InterruptRecord,
    RunStatus,
    SuspendedSubagent,
    ThreadState,
    bounded_id,
    utf8_len,
)

SUSPENDED_KEPT = MAX_SUSPENDED
# Unknown members of one event are each a warning up to this many; the rest are counted
# in one more (as a request's stripped members are).
MAX_UNKNOWN_WARNINGS = 50
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
            f"{preview(event.get('type'))} has a malformed known field at "
            f"{preview(where or '/', 200)[1:-1]}: "
            f"{preview(first['msg'], 200)[1:-1]}",
            path=where,
        )
        return None
    unknown: list[Path] = []
    unknown_members(parsed, event, (), unknown)
    for path in unknown[:MAX_UNKNOWN_WARNINGS]:
        where = pointer(*path)
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"unknown member {preview(where, 200)[1:-1]} of {preview(event.get('type'))} ignored",
            path=where,
        )
    if len(unknown) > MAX_UNKNOWN_WARNINGS:
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"{len(unknown) - MAX_UNKNOWN_WARNINGS:,} more unknown members of "
            f"{preview(event.get('type'))} ignored (not listed one by one)",
        )
    return parsed


def _check_thread(step: _Step, model: RunStartedEvent | RunFinishedEvent) -> None:
    if model.thread_id != step.state.thread_id:
        step.violation(
            Rule.THREAD_ID_MISMATCH,
            f"{step.kind.value} names thread {preview(model.thread_id)} on the stream of "
            f"thread {preview(step.state.thread_id)}; the record key places it",
            path="/threadId",
        )


# --- steps --------------------------------------------------------------------------------


def _start(step: _Step) -> None:
    # The interrupts open before this run are held, not dropped: the run is their
    # continuation, and only its RUN_FINISHED replaces them (NOTES.md reading 1).
    held = step.state.interrupts or step.state.held_interrupts
    model = _model(step, RunStartedEvent, step.event)
    run_id = step.event.get("runId")
    if model is not None:
        _check_thread(step, model)  # type: ignore[arg-type]
        run_id = model.run_id  # type: ignore[attr-defined]
    step.set(
        Change.STARTED,
        status=RunStatus.ACTIVE,
        run_id=_run_id(step, run_id, "/runId") if isinstance(run_id, str) else None,
        outcome=None,
        interrupts=(),
        held_interrupts=held,
        closed_at_ms=None,
        failed_late=False,
        open_subagents=(),
        forwards=_settled(step.state),
    )


def _run_id(step: _Step, run_id: str, path: str) -> str:
    """A run id as the state keeps it: bounded, with a warning when it was not."""
    kept = bounded_id(run_id)
    if kept != run_id:
        step.violation(
            Rule.ID_TOO_LONG,
            f"runId {preview(run_id)} is {utf8_len(run_id):,} bytes, over {MAX_ID_BYTES}; "
            f"it is kept as {kept!r}",
            path=path,
        )
    return kept


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
        f"RUN_STARTED for run {preview(step.event.get('runId'))} while run "
        f"{preview(step.state.run_id)} is active; ignored",
    )


def _finish(step: _Step) -> None:
    event = step.event
    outcome = event.get("outcome")
    outcome_type = outcome.get("type") if isinstance(outcome, dict) else None
    if _bad_tag(step, outcome, "outcome"):
        _close_failed(step)
        return
    if (
        isinstance(outcome, dict)
        and isinstance(outcome_type, str)
        and (outcome_type not in _KNOWN_OUTCOMES)
    ):
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"unrecognised outcome type {preview(outcome_type)} stripped; the run reads as success",
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
    run_id = _run_id(step, model.run_id, "/runId")  # type: ignore[attr-defined]
    if step.state.run_id is not None and run_id != step.state.run_id:
        step.violation(
            Rule.RUN_ID_MISMATCH,
            f"RUN_FINISHED names run {preview(run_id)} but run {preview(step.state.run_id)} is "
            "active; the active run is closed",
            path="/runId",
        )
        run_id = step.state.run_id
    kind = model.outcome.type if model.outcome is not None else "success"  # type: ignore[attr-defined]
    interrupts: tuple[InterruptRecord, ...] = ()
    status = {"success": RunStatus.SUCCEEDED, "cancelled": RunStatus.CANCELLED}.get(kind)
    if kind == "interrupt":
        status = RunStatus.INTERRUPTED
        kept = _interrupts(step, model.outcome.interrupts)  # type: ignore[attr-defined]
        if kept is None:
            _close_failed(step)  # over a bound: the run fails, as a malformed one does
            return
        interrupts = kept
    step.set(
        Change.CLOSED,
        status=status,
        run_id=run_id,
        outcome=kind,
        interrupts=interrupts,
        held_interrupts=(),
        interrupts_run_id=run_id if interrupts else None,
        interrupts_closed_at_ms=step.at_ms if interrupts else None,
        closed_at_ms=step.at_ms,
        failed_late=False,
        open_subagents=(),
    )


def _bad_tag(step: _Step, outcome: object, name: str) -> bool:
    """An outcome whose `type` is present and not a string: malformed, flagged here.

    Checked before the protocol's model sees the event: pydantic-core renders a
    discriminator it cannot use, and a tag nested 1,000 deep makes that rendering
    fail on stderr. The model would reject it all the same.
    """
    if not isinstance(outcome, dict) or "type" not in outcome:
        return False
    tag = outcome["type"]
    if isinstance(tag, str):
        return False
    step.violation(
        Rule.MALFORMED_EVENT,
        f"{step.kind.value} has a malformed known field at /{name}/type: the {name} type "
        f"must be a string, not {preview(tag)}",
        path=f"/{name}/type",
    )
    return True


def _interrupts(step: _Step, interrupts: list[Any]) -> tuple[InterruptRecord, ...] | None:
    """The run's interrupts as the state keeps them, or None when they break a bound."""
    if len(interrupts) > MAX_INTERRUPTS_PER_RUN:
        step.violation(
            Rule.TOO_MANY_INTERRUPTS,
            f"RUN_FINISHED carries {len(interrupts):,} interrupts, over the "
            f"{MAX_INTERRUPTS_PER_RUN} a run may raise; the run is failed",
            path="/outcome/interrupts",
        )
        return None
    for index, item in enumerate(interrupts):
        for member, value in (
            ("id", item.id),
            ("subagentRunId", item.subagent_run_id),
            ("toolCallId", item.tool_call_id),
        ):
            if value is not None and utf8_len(value) > MAX_ID_BYTES:
                step.violation(
                    Rule.ID_TOO_LONG,
                    f"interrupt {member} {preview(value)} is {utf8_len(value):,} bytes, over "
                    f"{MAX_ID_BYTES}; the run is failed",
                    path=pointer("outcome", "interrupts", index, member),
                )
                return None
    seen: dict[str, InterruptRecord] = {}
    budget = response_schema.MAX_SCHEMA_BYTES_PER_RUN
    for index, item in enumerate(interrupts):
        if item.id in seen:
            step.violation(
                Rule.DUPLICATE_INTERRUPT_ID,
                f"interrupt id {preview(item.id)} appears twice in one run; the first is kept",
                interrupt_id=item.id,
                path=pointer("outcome", "interrupts", index, "id"),
            )
            continue
        # the schema's verdict, decided here once: its canonical bytes, or why not usable
        kept: bytes | None = None
        unusable: str | None = None
        if item.response_schema is not None:
            kept, unusable, cost = response_schema.record(item.response_schema, budget)
            budget -= cost
        seen[item.id] = InterruptRecord(
            id=item.id,
            reason=item.reason,
            message=item.message,
            tool_call_id=item.tool_call_id,
            response_schema=kept,
            expires_at=item.expires_at,
            metadata=item.metadata,
            subagent_run_id=item.subagent_run_id,
            response_schema_unusable=unusable,
        )
    return _fit_content(step, tuple(seen.values()))


_NO_SCHEMA = {"response_schema": None, "response_schema_unusable": None, "metadata": None}


def _content_bytes(records: tuple[InterruptRecord, ...]) -> int:
    total = 0
    for i in records:
        total += utf8_len(i.reason) + utf8_len(i.message or "") + utf8_len(i.expires_at or "")
        total += len(i.response_schema or b"") + utf8_len(i.response_schema_unusable or "")
        if i.metadata is not None:
            total += len(to_json(i.metadata))
    return total


def _fit_content(
    step: _Step, records: tuple[InterruptRecord, ...]
) -> tuple[InterruptRecord, ...] | None:
    """Keep a run's interrupts within MAX_INTERRUPT_CONTENT_BYTES.

    Over it, the schemas and metadata go first (those payloads are then not
    checked), then the messages, so the ids stay and every interrupt must still
    be covered; what is kept is exactly what the changelog holds.
    """
    size = _content_bytes(records)
    if size <= MAX_INTERRUPT_CONTENT_BYTES:
        return records
    for fields, what in (
        (_NO_SCHEMA, "responseSchema and metadata"),
        ({**_NO_SCHEMA, "message": None}, "message"),
    ):
        records = tuple(replace(i, **fields) for i in records)  # type: ignore[arg-type]
        step.violation(
            Rule.INTERRUPT_CONTENT_TOO_LARGE,
            f"the interrupts' content is {size:,} bytes, over {MAX_INTERRUPT_CONTENT_BYTES:,}; "
            f"their {what} are dropped"
            + ("" if what == "message" else ": their payloads will not be checked"),
            path="/outcome/interrupts",
        )
        size = _content_bytes(records)
        if size <= MAX_INTERRUPT_CONTENT_BYTES:
            return records
    step.violation(
        Rule.INTERRUPT_CONTENT_TOO_LARGE,
        f"the interrupts' reasons and expiresAt alone are {size:,} bytes, over "
        f"{MAX_INTERRUPT_CONTENT_BYTES:,}; the run is failed",
        path="/outcome/interrupts",
    )
    return None


def _first_event_finish(step: _Step) -> None:
    step.violation(
        Rule.FIRST_EVENT,
        "the stream opens with RUN_FINISHED; it must open with RUN_STARTED or RUN_ERROR. "
        "Its outcome is recorded so no interrupt is lost",
    )
    _finish(step)


def _close_failed(step: _Step) -> None:
    # A run that fails before closing answered nothing: the interrupts it was
    # continuing (held since its RUN_STARTED) are open again, and the forwards that
    # answered them are forgotten, so a retry is judged afresh (NOTES.md reading 1).
    reopened = step.state.held_interrupts or step.state.interrupts
    step.set(
        Change.FAILED,
        status=RunStatus.FAILED,
        outcome=None,
        interrupts=reopened,
        held_interrupts=(),
        closed_at_ms=step.at_ms,
        failed_late=False,
        open_subagents=(),
        forwards=_reopened(step.state, bool(reopened)),
    )


def _fail(step: _Step) -> None:
    _model(step, RunErrorEvent, step.event)  # malformed: warned, the run fails all the same
    _close_failed(step)


def _late_error(step: _Step) -> None:
    _model(step, RunErrorEvent, step.event)
    kept = len(step.state.interrupts)
    step.warn(
        Warn.LATE_RUN_ERROR,
        f"RUN_ERROR after RUN_FINISHED: run {preview(step.state.run_id)} is failed"
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
    forwards = _reopened(step.state, step.state.has_open_interrupts)
    if forwards != step.state.forwards:
        step.set(Change.NONE, forwards=forwards)


def _after_close(step: _Step) -> None:
    step.violation(
        Rule.EVENT_AFTER_CLOSE,
        f"{step.kind.value} after run {preview(step.state.run_id)} closed; only RUN_STARTED or one "
        "late RUN_ERROR may follow a closed run. Ignored",
    )


def _ignore(step: _Step) -> None:
    return None


def _subagent_started(step: _Step) -> None:
    model = _model(step, SubagentStartedEvent, step.event)
    if model is None:
        return
    sub = _subagent_id(step, model.subagent_run_id)  # type: ignore[attr-defined]
    if sub in step.state.open_subagents:
        step.violation(
            Rule.SUBAGENT_ALREADY_STARTED,
            f"SUBAGENT_STARTED for invocation {preview(sub)}, which is already open",
            path="/subagentRunId",
        )
        return
    if len(step.state.open_subagents) >= MAX_OPEN_SUBAGENTS:
        step.violation(
            Rule.TOO_MANY_SUBAGENTS,
            f"SUBAGENT_STARTED for invocation {preview(sub)} while {MAX_OPEN_SUBAGENTS} are "
            "open, the most a run may have; not tracked",
            path="/subagentRunId",
        )
        return
    step.set(Change.SUBAGENT, open_subagents=(*step.state.open_subagents, sub))


def _subagent_id(step: _Step, sub: str) -> str:
    kept = bounded_id(sub)
    if kept != sub:
        step.violation(
            Rule.ID_TOO_LONG,
            f"subagentRunId {preview(sub)} is {utf8_len(sub):,} bytes, over {MAX_ID_BYTES}; "
            f"it is kept as {kept!r}",
            path="/subagentRunId",
        )
    return kept


def _subagent_ended(step: _Step) -> None:
    model_type = (
        SubagentFinishedEvent if step.kind is EventKind.SUBAGENT_FINISHED else SubagentErrorEvent
    )
    event = step.event
    outcome = event.get("outcome") if step.kind is EventKind.SUBAGENT_FINISHED else None
    outcome_type = outcome.get("type") if isinstance(outcome, dict) else None
    if _bad_tag(step, outcome, "outcome"):
        return
    if isinstance(outcome_type, str) and outcome_type not in _KNOWN_SUBAGENT_OUTCOMES:
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"unrecognised subagent outcome type {preview(outcome_type)} stripped; "
            "the invocation reads as finished with success",
            path="/outcome",
        )
        event = {k: v for k, v in event.items() if k != "outcome"}
    model = _model(step, model_type, event)
    if model is None:
        return
    sub = _subagent_id(step, model.subagent_run_id)  # type: ignore[attr-defined]
    suspended = {s.subagent_run_id: s for s in step.state.suspended}
    if sub not in step.state.open_subagents and sub not in suspended:
        step.violation(
            Rule.SUBAGENT_NOT_STARTED,
            f"{step.kind.value} for invocation {preview(sub)}, which was never started",
            path="/subagentRunId",
        )
    suspended.pop(sub, None)
    # SUBAGENT_ERROR has no outcome: an `outcome` member there is an unknown extra
    outcome = model.outcome if isinstance(model, SubagentFinishedEvent) else None
    if outcome is not None and outcome.type == "suspended":
        suspended[sub] = SuspendedSubagent(sub, _suspension_ids(step, outcome.interrupt_ids))
    kept = tuple(suspended.values())
    if len(kept) > SUSPENDED_KEPT:
        forgotten = kept[: len(kept) - SUSPENDED_KEPT]
        step.violation(
            Rule.TOO_MANY_SUSPENDED,
            f"more than {SUSPENDED_KEPT} suspended invocations on one thread; the oldest, "
            f"{preview(forgotten[0].subagent_run_id)}, is forgotten",
            path="/subagentRunId",
        )
        kept = kept[-SUSPENDED_KEPT:]
    step.set(
        Change.SUBAGENT,
        open_subagents=tuple(s for s in step.state.open_subagents if s != sub),
        suspended=kept,
    )


def _suspension_ids(step: _Step, ids: list[str] | None) -> tuple[str, ...]:
    """A suspension's interrupt ids as kept: bounded in number and in length.

    They are recorded, never judged (the interrupts a client must cover are those
    of RUN_FINISHED), so what a bound leaves out changes no verdict.
    """
    ids = ids or []
    if len(ids) > MAX_IDS_PER_SUSPENSION:
        step.violation(
            Rule.SUSPENSION_TOO_LARGE,
            f"a suspended outcome names {len(ids):,} interrupt ids; the first "
            f"{MAX_IDS_PER_SUSPENSION} are kept",
            path="/outcome/interruptIds",
        )
        ids = ids[:MAX_IDS_PER_SUSPENSION]
    kept = tuple(bounded_id(i) for i in ids)
    if kept != tuple(ids):
        step.violation(
            Rule.ID_TOO_LONG,
            f"a suspended outcome names interrupt ids over {MAX_ID_BYTES} bytes; each is kept "
            "as a digest",
            path="/outcome/interruptIds",
        )
    return kept


def _settled(state: ThreadState) -> tuple[ForwardRecord, ...]:
    if all(f.settled for f in state.forwards):
        return state.forwards
    return tuple(replace(f, settled=True) for f in state.forwards)


def _reopened(state: ThreadState, reopened: bool) -> tuple[ForwardRecord, ...]:
    """Forwards after a failure that answered nothing: settled, and (when
    interrupts are open again) those that answered them forgotten, so that
    neither `already_resumed` nor `duplicate` holds a retry of them back."""
    forwards = _settled(state)
    if not reopened:
        return forwards
    kept = tuple(f for f in forwards if f.answered_run_id != state.interrupts_run_id)
    return forwards if len(kept) == len(forwards) else kept


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
