"""Recording a run's interrupts: what RUN_FINISHED's interrupt outcome leaves in the state.

Each interrupt is checked against the bounds (how many a run may raise, id
lengths, the content a run may keep), duplicates are flagged, each
response schema's verdict is decided once, here: its canonical bytes, or why
it is unusable, and an interrupt whose `toolCallId` names a tool call the run
announced (toolcalls.py) gets that call's name. What comes back is exactly what the changelog holds; None
when a bound fails the run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.core.events.step import Step
from gateway.core.reading import response_schema
from gateway.core.values.codes import Rule
from gateway.core.values.findings import pointer, preview
from gateway.core.values.jsontext import to_json
from gateway.core.values.thread import (
    MAX_ID_BYTES,
    MAX_INTERRUPT_CONTENT_BYTES,
    MAX_INTERRUPTS_PER_RUN,
    InterruptRecord,
    utf8_len,
)

_NO_SCHEMA = {"response_schema": None, "response_schema_unusable": None, "metadata": None}


def record(step: Step, interrupts: list[Any]) -> tuple[InterruptRecord, ...] | None:
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
    names = dict(step.state.tool_calls)  # at most MAX_TOOL_CALLS_PER_RUN
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
            tool_name=None if item.tool_call_id is None else names.get(item.tool_call_id),
        )
    return _fit_content(step, tuple(seen.values()))


def _content_bytes(records: tuple[InterruptRecord, ...]) -> int:
    total = 0
    for i in records:
        total += utf8_len(i.reason) + utf8_len(i.message or "") + utf8_len(i.expires_at or "")
        total += len(i.response_schema or b"") + utf8_len(i.response_schema_unusable or "")
        if i.metadata is not None:
            total += len(to_json(i.metadata))
    return total


def _fit_content(
    step: Step, records: tuple[InterruptRecord, ...]
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
