"""Noticing, on the gateway's own clock, open interrupts that expired unanswered."""

from __future__ import annotations

from dataclasses import replace

from gateway.core.reading import expiry
from gateway.core.values.thread import InterruptRecord, ThreadState


def answered_ids(state: ThreadState) -> set[str]:
    """Open interrupts already answered by a forward the agent has not yet acted on."""
    return {
        i
        for f in state.forwards
        if not f.settled and f.answered_run_id == state.interrupts_run_id
        for i in f.interrupt_ids
    }


def expire_due(state: ThreadState, now_ms: int) -> tuple[ThreadState, tuple[InterruptRecord, ...]]:
    """Mark open, unanswered interrupts whose `expiresAt` has passed as announced.

    Returns the new state and the interrupts that expired since the last call
    (each is returned once: the state remembers it was announced). Interrupts held
    while a continuation runs are not open, so not announced.
    """
    if not state.interrupts:
        return state, ()
    answered = answered_ids(state)
    due = [
        i
        for i in state.interrupts
        if not i.expiry_announced
        and i.id not in answered
        and expiry.judge(i.expires_at, now_ms) is expiry.Expiry.EXPIRED
    ]
    if not due:
        return state, ()
    due_ids = {i.id for i in due}
    interrupts = tuple(
        replace(i, expiry_announced=True) if i.id in due_ids else i for i in state.interrupts
    )
    return replace(state, interrupts=interrupts), tuple(due)


def next_expiry_ms(state: ThreadState) -> int | None:
    """The earliest readable `expiresAt` among the interrupts `expire_due` would
    announce once it passes (open, unanswered, unannounced): before it, `expire_due`
    announces nothing."""
    if not state.interrupts:
        return None
    answered = answered_ids(state)
    times = [
        expiry.expires_at_ms(i.expires_at)
        for i in state.interrupts
        if i.expires_at and not i.expiry_announced and i.id not in answered
    ]
    readable = [t for t in times if t is not None]
    return min(readable) if readable else None
