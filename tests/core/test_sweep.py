"""Noticing interrupts that expired unanswered (gateway.core.requests.sweep)."""

from __future__ import annotations

from gateway.core import judge
from gateway.core.requests.sweep import answered_ids, expire_due, next_expiry_ms
from tests.core.factories import (
    NOW_MS,
    THREAD,
    entry,
    interrupt,
    interrupted,
    iso_at,
    run_input,
    run_started,
    state_of,
)


def thread():
    return state_of(
        *interrupted(
            interrupt("past", expiresAt=iso_at(-10)),
            interrupt("now", expiresAt=iso_at(0)),
            interrupt("soon", expiresAt=iso_at(5_000)),
            interrupt("later", expiresAt=iso_at(60_000)),
            interrupt("never"),
            interrupt("garbled", expiresAt="someday"),
        )
    )


def test_expired_interrupts_are_announced_once():
    state, due = expire_due(thread(), NOW_MS)
    assert [i.id for i in due] == ["past", "now"]
    assert [i.id for i in state.interrupts if i.expiry_announced] == ["past", "now"]
    assert [i.id for i in state.interrupts] == ["past", "now", "soon", "later", "never", "garbled"]
    again, due_again = expire_due(state, NOW_MS)
    assert due_again == ()
    assert again is state
    later, due_later = expire_due(state, NOW_MS + 5_000)
    assert [i.id for i in due_later] == ["soon"]
    assert sum(i.expiry_announced for i in later.interrupts) == 3


def test_an_announced_interrupt_stays_open_and_can_still_be_abandoned():
    state, _ = expire_due(thread(), NOW_MS + 120_000)
    assert len(state.interrupts) == 6
    resume = [entry(i.id, "cancelled") for i in state.interrupts]
    decision, _ = judge(state, run_input(resume), NOW_MS + 120_000, thread_id=THREAD)
    assert decision.verdict == "forward"


def test_answered_interrupts_are_not_announced():
    state = thread()
    resume = [entry(i.id, "cancelled") for i in state.interrupts]
    _, answered = judge(state, run_input(resume), NOW_MS - 1_000, thread_id=THREAD)
    assert answered is not None
    assert answered_ids(answered) == {i.id for i in state.interrupts}
    same, due = expire_due(answered, NOW_MS + 120_000)
    assert due == ()
    assert same is answered
    assert next_expiry_ms(state) is not None
    assert next_expiry_ms(answered) is None  # nothing for a sweep to announce, ever


def test_nothing_to_sweep_on_a_thread_without_open_interrupts():
    active = state_of(run_started())
    assert expire_due(active, NOW_MS) == (active, ())
    assert next_expiry_ms(active) is None
    assert answered_ids(active) == set()


def test_next_expiry_is_the_earliest_readable_unannounced_one():
    state = thread()
    assert next_expiry_ms(state) == NOW_MS - 10
    swept, _ = expire_due(state, NOW_MS)
    assert next_expiry_ms(swept) == NOW_MS + 5_000
    swept, _ = expire_due(swept, NOW_MS + 60_000)
    assert next_expiry_ms(swept) is None  # "never" has none, "garbled" is unreadable


def test_interrupts_held_by_an_active_continuation_are_not_announced_until_it_fails():
    from tests.core.factories import run_error

    held = state_of(*interrupted(interrupt("past", expiresAt=iso_at(-10))), run_started("run-2"))
    assert expire_due(held, NOW_MS) == (held, ())
    assert next_expiry_ms(held) is None
    failed = state_of(
        *interrupted(interrupt("past", expiresAt=iso_at(-10))), run_started("run-2"), run_error()
    )
    _, due = expire_due(failed, NOW_MS)
    assert [i.id for i in due] == ["past"]
