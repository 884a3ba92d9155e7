"""The interrupt page's worked examples (docs.ag-ui.com/spec/1.0), end to end:
events replayed through apply_event, then the continuing input judged."""

from __future__ import annotations

import copy

from gateway.core import Reason, RunStatus, Verdict, judge
from tests.core.factories import (
    NOW_MS,
    RUN_1,
    THREAD,
    entry,
    interrupt,
    iso_at,
    replay,
    run_finished,
    run_input,
    run_started,
    warnings_of,
)


def tool_call(call_id: str, name: str, args: str) -> list[dict]:
    return [
        {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name},
        {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": args},
        {"type": "TOOL_CALL_END", "toolCallId": call_id},
    ]


def thread_of(*events):
    state, outcomes = replay(events)
    assert warnings_of(outcomes) == []
    assert state is not None
    assert state.status is RunStatus.INTERRUPTED
    return state


def forward(state, resume, now_ms=NOW_MS):
    raw = run_input(resume, forwardedProps={"app": {"trace": "t-1"}})
    pristine = copy.deepcopy(raw)
    decision, _ = judge(state, raw, now_ms, thread_id=THREAD)
    assert raw == pristine
    return decision, pristine


# --- single approval -------------------------------------------------------------------------


def approval_thread():
    return thread_of(
        run_started(),
        *tool_call("call-1", "delete_files", '{"paths": ["a", "b", "c"]}'),
        run_finished(
            interrupts=[
                interrupt(
                    "int-approve",
                    "tool_call",
                    toolCallId="call-1",
                    message="Delete 3 files?",
                )
            ]
        ),
    )


def test_single_approval_resolved_is_forwarded_unchanged():
    state = approval_thread()
    [open_interrupt] = state.interrupts
    assert (open_interrupt.reason, open_interrupt.tool_call_id) == ("tool_call", "call-1")
    decision, raw = forward(state, [entry("int-approve", payload={"approved": True})])
    assert decision.verdict is Verdict.FORWARD
    assert (decision.reasons, decision.warnings) == ((), ())
    assert decision.input == raw
    assert [(a.interrupt_id, a.status) for a in decision.answers] == [("int-approve", "resolved")]


def test_single_approval_left_unanswered_is_rejected():
    decision, _ = forward(approval_thread(), None)
    assert decision.verdict is Verdict.REJECT
    assert [(r.code, r.interrupt_id) for r in decision.reasons] == [
        (str(Reason.UNCOVERED_INTERRUPT), "int-approve")
    ]


# --- approve with edits ----------------------------------------------------------------------

EDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "args": {
            "type": "object",
            "properties": {
                "to": {"type": "string", "format": "email"},
                "subject": {"type": "string"},
            },
            "required": ["to"],
        },
    },
    "required": ["approved"],
}


def edit_thread():
    return thread_of(
        run_started(),
        *tool_call("call-7", "send_email", '{"to": "boss@example.com", "subject": "hi"}'),
        run_finished(
            interrupts=[
                interrupt(
                    "int-edit",
                    "tool_call",
                    toolCallId="call-7",
                    message="Send this email?",
                    responseSchema=EDIT_SCHEMA,
                )
            ]
        ),
    )


def test_approve_with_edits_matching_the_schema_is_forwarded():
    payload = {"approved": True, "args": {"to": "team@example.com", "subject": "hello"}}
    decision, raw = forward(edit_thread(), [entry("int-edit", payload=payload)])
    assert decision.verdict is Verdict.FORWARD
    assert decision.input == raw
    assert decision.input["resume"][0]["payload"] == payload


def test_approve_with_edits_breaking_the_schema_is_rejected():
    payload = {"approved": True, "args": {"to": 42}}
    decision, _ = forward(edit_thread(), [entry("int-edit", payload=payload)])
    assert decision.verdict is Verdict.REJECT
    assert [(r.code, r.interrupt_id, r.path) for r in decision.reasons] == [
        (str(Reason.PAYLOAD_SCHEMA_MISMATCH), "int-edit", "/resume/0/payload/args/to")
    ]


# --- parallel interrupts, one abandoned ------------------------------------------------------


def parallel_thread():
    return thread_of(
        run_started(),
        *tool_call("call-a", "book_flight", '{"to": "LIS"}'),
        *tool_call("call-b", "book_hotel", '{"city": "Lisbon"}'),
        run_finished(
            interrupts=[
                interrupt("int-flight", "tool_call", toolCallId="call-a"),
                interrupt("int-hotel", "tool_call", toolCallId="call-b"),
            ]
        ),
    )


def test_parallel_interrupts_one_resolved_one_abandoned_is_forwarded():
    resume = [entry("int-flight", payload={"approved": True}), entry("int-hotel", "cancelled")]
    decision, raw = forward(parallel_thread(), resume)
    assert decision.verdict is Verdict.FORWARD
    assert decision.input == raw
    assert [(a.interrupt_id, a.status) for a in decision.answers] == [
        ("int-flight", "resolved"),
        ("int-hotel", "cancelled"),
    ]


def test_parallel_interrupts_with_only_one_answered_is_rejected():
    decision, _ = forward(parallel_thread(), [entry("int-flight", payload={"approved": True})])
    assert [(r.code, r.interrupt_id) for r in decision.reasons] == [
        (str(Reason.UNCOVERED_INTERRUPT), "int-hotel")
    ]


# --- a non-tool input request with an expiry --------------------------------------------------

EXPIRES_IN_MS = 15 * 60 * 1000


def input_request_thread():
    return thread_of(
        run_started(),
        run_finished(
            RUN_1,
            interrupts=[
                interrupt(
                    "int-account",
                    "input_required",
                    message="Which account should be charged?",
                    responseSchema={"type": "string", "enum": ["personal", "business"]},
                    expiresAt=iso_at(EXPIRES_IN_MS),
                )
            ],
        ),
    )


def test_input_request_answered_before_expiry_is_forwarded():
    resume = [entry("int-account", payload="business")]
    decision, raw = forward(input_request_thread(), resume, now_ms=NOW_MS + EXPIRES_IN_MS - 1)
    assert decision.verdict is Verdict.FORWARD
    assert decision.input == raw


def test_input_request_answered_after_expiry_is_rejected():
    resume = [entry("int-account", payload="business")]
    for late in (NOW_MS + EXPIRES_IN_MS, NOW_MS + EXPIRES_IN_MS + 60_000):
        decision, _ = forward(input_request_thread(), resume, now_ms=late)
        assert decision.verdict is Verdict.REJECT
        assert [(r.code, r.interrupt_id) for r in decision.reasons] == [
            (str(Reason.EXPIRED_INTERRUPT), "int-account")
        ]


def test_input_request_abandoned_after_expiry_is_forwarded():
    resume = [entry("int-account", "cancelled")]
    decision, raw = forward(input_request_thread(), resume, now_ms=NOW_MS + EXPIRES_IN_MS + 1)
    assert decision.verdict is Verdict.FORWARD
    assert decision.input == raw
    assert [a.status for a in decision.answers] == ["cancelled"]
