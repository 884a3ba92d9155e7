"""One event's step through the thread state machine, and parsing it with the protocol's models.

A `Step` is the scratch of one event: the state it builds on, the warnings it
raises, what it changed. The step functions (runs.py, subagents.py, and the
interrupts a run records, interrupts.py) read and fill it; `apply_event`
(lifecycle.py) freezes the result. Protocol violations never raise: they are
warnings naming the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from ag_ui.core import RunFinishedEvent, RunStartedEvent
from pydantic import BaseModel, ValidationError

from gateway.core.events.classify import EventKind
from gateway.core.reading.extras import without_extras
from gateway.core.reading.shape import Path, error_pointer, unknown_members
from gateway.core.values.codes import Rule, Warn
from gateway.core.values.findings import Finding, pointer, preview
from gateway.core.values.thread import MAX_ID_BYTES, ThreadState, bounded_id, utf8_len

# Unknown members of one event are each a warning up to this many; the rest are counted
# in one more (as a request's stripped members are).
MAX_UNKNOWN_WARNINGS = 50


class Change(Enum):
    """What an event did to the thread, for the shell's effects and metrics."""

    NONE = "none"  # nothing (streaming delta, ignored or rejected event)
    STARTED = "started"  # a run started
    CLOSED = "closed"  # a run closed with RUN_FINISHED (see state.outcome)
    FAILED = "failed"  # a run failed (RUN_ERROR, malformed RUN_FINISHED)
    FAILED_LATE = "failed_late"  # RUN_ERROR after RUN_FINISHED
    SUBAGENT = "subagent"  # subagent bookkeeping changed


@dataclass(slots=True)
class Step:
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


def parse(step: Step, model: type[BaseModel], event: dict[str, Any]) -> BaseModel | None:
    """The event as the protocol's `model`, or None (flagged) when malformed; its unknown
    members are each flagged as stripped."""
    found: dict[Path, list[str]] = {}  # its unknown members, taken out before validation
    try:
        parsed = model.model_validate(without_extras(model, event, found), strict=True)
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
    unknown: list[Path] = []  # the first ones, each a warning; the rest counted
    count = unknown_members(parsed, event, (), unknown, found, MAX_UNKNOWN_WARNINGS)
    for path in unknown:
        where = pointer(*path)
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"unknown member {preview(where, 200)[1:-1]} of {preview(event.get('type'))} ignored",
            path=where,
        )
    if count > MAX_UNKNOWN_WARNINGS:
        step.warn(
            Warn.UNKNOWN_MEMBER_STRIPPED,
            f"{count - MAX_UNKNOWN_WARNINGS:,} more unknown members of "
            f"{preview(event.get('type'))} ignored (not listed one by one)",
        )
    return parsed


def check_thread(step: Step, model: RunStartedEvent | RunFinishedEvent) -> None:
    """Flag a run event naming another thread than the stream's (the record key places it)."""
    if model.thread_id != step.state.thread_id:
        step.violation(
            Rule.THREAD_ID_MISMATCH,
            f"{step.kind.value} names thread {preview(model.thread_id)} on the stream of "
            f"thread {preview(step.state.thread_id)}; the record key places it",
            path="/threadId",
        )


def bad_tag(step: Step, outcome: object, name: str) -> bool:
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


def bounded(step: Step, member: str, value: str, path: str) -> str:
    """An id as the state keeps it: bounded, with a warning when it was not."""
    kept = bounded_id(value)
    if kept != value:
        step.violation(
            Rule.ID_TOO_LONG,
            f"{member} {preview(value)} is {utf8_len(value):,} bytes, over {MAX_ID_BYTES}; "
            f"it is kept as {kept!r}",
            path=path,
        )
    return kept
