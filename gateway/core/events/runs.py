"""A run's steps: started, finished (success, interrupt, cancelled), failed, and after it closed.

Each step is a pure function of the event's `Step`. A run that starts holds the
interrupts open before it (it is their continuation); only its RUN_FINISHED
replaces them, and a run that fails first opens them again (NOTES.md reading 1).
The forwards that answered interrupts are settled as runs end.
"""

from __future__ import annotations

from dataclasses import replace

from ag_ui.core import RunErrorEvent, RunFinishedEvent, RunStartedEvent

from gateway.core.events import interrupts as recorded
from gateway.core.events.step import Change, Step, bad_tag, bounded, check_thread, parse
from gateway.core.values.codes import Rule, Warn
from gateway.core.values.findings import preview
from gateway.core.values.thread import ForwardRecord, InterruptRecord, RunStatus, ThreadState

KNOWN_OUTCOMES = frozenset({"success", "interrupt", "cancelled"})


def start(step: Step) -> None:
    # The interrupts open before this run are held, not dropped: the run is their
    # continuation, and only its RUN_FINISHED replaces them (NOTES.md reading 1).
    held = step.state.interrupts or step.state.held_interrupts
    model = parse(step, RunStartedEvent, step.event)
    run_id = step.event.get("runId")
    # a run a stray first event opened keeps the tool calls seen since; a new run has none
    calls = step.state.tool_calls if step.state.status is RunStatus.ACTIVE else ()
    if model is not None:
        check_thread(step, model)  # type: ignore[arg-type]
        run_id = model.run_id  # type: ignore[attr-defined]
    step.set(
        Change.STARTED,
        status=RunStatus.ACTIVE,
        run_id=bounded(step, "runId", run_id, "/runId") if isinstance(run_id, str) else None,
        outcome=None,
        interrupts=(),
        held_interrupts=held,
        closed_at_ms=None,
        failed_late=False,
        open_subagents=(),
        forwards=settled(step.state),
        tool_calls=calls,
    )


def nested_start(step: Step) -> None:
    if step.state.run_id is None:
        # The active run was opened by a stray first event (already flagged
        # `first_event`): this RUN_STARTED names it.
        start(step)
        return
    step.violation(
        Rule.NESTED_RUN_STARTED,
        f"RUN_STARTED for run {preview(step.event.get('runId'))} while run "
        f"{preview(step.state.run_id)} is active; ignored",
    )


def finish(step: Step) -> None:
    event = step.event
    outcome = event.get("outcome")
    outcome_type = outcome.get("type") if isinstance(outcome, dict) else None
    if bad_tag(step, outcome, "outcome"):
        close_failed(step)
        return
    if (
        isinstance(outcome, dict)
        and isinstance(outcome_type, str)
        and (outcome_type not in KNOWN_OUTCOMES)
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
        close_failed(step)
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
        close_failed(step)
        return
    model = parse(step, RunFinishedEvent, event)
    if model is None:
        close_failed(step)  # a malformed RUN_FINISHED fails the run
        return
    check_thread(step, model)  # type: ignore[arg-type]
    run_id = bounded(step, "runId", model.run_id, "/runId")  # type: ignore[attr-defined]
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
        kept = recorded.record(step, model.outcome.interrupts)  # type: ignore[attr-defined]
        if kept is None:
            close_failed(step)  # over a bound: the run fails, as a malformed one does
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
        tool_calls=(),  # the interrupts keep their names; the run's map goes with it
    )


def close_failed(step: Step) -> None:
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
        tool_calls=(),
    )


def fail(step: Step) -> None:
    parse(step, RunErrorEvent, step.event)  # malformed: warned, the run fails all the same
    close_failed(step)


def late_error(step: Step) -> None:
    parse(step, RunErrorEvent, step.event)
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
        forwards=settled(step.state),
    )


def error_after_failure(step: Step) -> None:
    # A stream that opens with RUN_ERROR after a failed run: an attempt that
    # never started. It names no run and so replaces nothing; it does settle
    # forwards, since the agent answered them with a failure.
    parse(step, RunErrorEvent, step.event)
    forwards = _reopened(step.state, step.state.has_open_interrupts)
    if forwards != step.state.forwards:
        step.set(Change.NONE, forwards=forwards)


def after_close(step: Step) -> None:
    step.violation(
        Rule.EVENT_AFTER_CLOSE,
        f"{step.kind.value} after run {preview(step.state.run_id)} closed; only RUN_STARTED or one "
        "late RUN_ERROR may follow a closed run. Ignored",
    )


def settled(state: ThreadState) -> tuple[ForwardRecord, ...]:
    if all(f.settled for f in state.forwards):
        return state.forwards
    return tuple(replace(f, settled=True) for f in state.forwards)


def _reopened(state: ThreadState, reopened: bool) -> tuple[ForwardRecord, ...]:
    """Forwards after a failure that answered nothing: settled, and (when
    interrupts are open again) those that answered them forgotten, so that
    neither `already_resumed` nor `duplicate` holds a retry of them back."""
    forwards = settled(state)
    if not reopened:
        return forwards
    kept = tuple(f for f in forwards if f.answered_run_id != state.interrupts_run_id)
    return forwards if len(kept) == len(forwards) else kept
