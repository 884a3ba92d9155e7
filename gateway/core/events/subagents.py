"""Subagent invocations within an active run: started, finished, failed, suspended.

A run's open invocations and a thread's suspended ones (with the interrupt ids
a suspension names) are bookkeeping, bounded in number and in id length; an
invocation never started, started twice or over a bound is a violation, never
an error.
"""

from __future__ import annotations

from ag_ui.core import SubagentErrorEvent, SubagentFinishedEvent, SubagentStartedEvent

from gateway.core.events.classify import EventKind
from gateway.core.events.step import Change, Step, bad_tag, bounded, parse
from gateway.core.values.codes import Rule, Warn
from gateway.core.values.findings import preview
from gateway.core.values.thread import (
    MAX_ID_BYTES,
    MAX_IDS_PER_SUSPENSION,
    MAX_OPEN_SUBAGENTS,
    MAX_SUSPENDED,
    SuspendedSubagent,
    bounded_id,
)

SUSPENDED_KEPT = MAX_SUSPENDED
KNOWN_SUBAGENT_OUTCOMES = frozenset({"success", "suspended"})


def started(step: Step) -> None:
    model = parse(step, SubagentStartedEvent, step.event)
    if model is None:
        return
    sub = bounded(step, "subagentRunId", model.subagent_run_id, "/subagentRunId")  # type: ignore[attr-defined]
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


def ended(step: Step) -> None:
    """SUBAGENT_FINISHED (success, or suspended on interrupts) or SUBAGENT_ERROR."""
    model_type = (
        SubagentFinishedEvent if step.kind is EventKind.SUBAGENT_FINISHED else SubagentErrorEvent
    )
    event = step.event
    outcome = event.get("outcome") if step.kind is EventKind.SUBAGENT_FINISHED else None
    outcome_type = outcome.get("type") if isinstance(outcome, dict) else None
    if bad_tag(step, outcome, "outcome"):
        return
    if isinstance(outcome_type, str) and outcome_type not in KNOWN_SUBAGENT_OUTCOMES:
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"unrecognised subagent outcome type {preview(outcome_type)} stripped; "
            "the invocation reads as finished with success",
            path="/outcome",
        )
        event = {k: v for k, v in event.items() if k != "outcome"}
    model = parse(step, model_type, event)
    if model is None:
        return
    sub = bounded(step, "subagentRunId", model.subagent_run_id, "/subagentRunId")  # type: ignore[attr-defined]
    suspended = {s.subagent_run_id: s for s in step.state.suspended}
    if sub not in step.state.open_subagents and sub not in suspended:
        step.violation(
            Rule.SUBAGENT_NOT_STARTED,
            f"{step.kind.value} for invocation {preview(sub)}, which was never started",
            path="/subagentRunId",
        )
    suspended.pop(sub, None)
    # SUBAGENT_ERROR has no outcome: an `outcome` member there is an unknown extra
    finished = model.outcome if isinstance(model, SubagentFinishedEvent) else None
    if finished is not None and finished.type == "suspended":
        suspended[sub] = SuspendedSubagent(sub, _suspension_ids(step, finished.interrupt_ids))
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


def _suspension_ids(step: Step, ids: list[str] | None) -> tuple[str, ...]:
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
