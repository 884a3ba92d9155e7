"""The resume judge (gateway.core.requests.judge): every reason, every judge warning, the
duplicate verdict, and NOTES.md "How the gateway reads the consumer's choices"."""

from __future__ import annotations

import copy

import pytest

from gateway.core import Policy, Reason, RunStatus, ThreadState, Verdict, Warn, apply_event, judge
from gateway.core.values.thread import FORWARDS_KEPT
from tests.core.factories import (
    NOW_MS,
    RUN_1,
    RUN_2,
    THREAD,
    codes,
    entry,
    interrupt,
    interrupted,
    iso_at,
    run_error,
    run_finished,
    run_input,
    run_started,
    state_of,
    subagent_finished,
    subagent_started,
)

STRICT = Policy(strict=True)
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}


def two_open() -> ThreadState:
    return state_of(*interrupted(interrupt("int-1"), interrupt("int-2", "input_required")))


LENIENT = Policy()


def decide(state, raw, policy=LENIENT, now_ms=NOW_MS, thread_id=THREAD):
    decision, _ = judge(state, raw, now_ms, policy, thread_id=thread_id)
    return decision


def only(findings, code):
    """The findings with `code`."""
    return [f for f in findings if f.code == str(code)]


# --- a plain forward -------------------------------------------------------------------------


def test_answering_every_open_interrupt_forwards_the_input():
    state = two_open()
    raw = run_input([entry("int-1", payload={"approved": True}), entry("int-2", "cancelled")])
    decision, new_state = judge(state, raw, NOW_MS, thread_id=THREAD)
    assert decision.verdict is Verdict.FORWARD
    assert decision.reasons == ()
    assert decision.warnings == ()
    assert decision.input == raw
    assert (decision.thread_id, decision.run_id) == (THREAD, RUN_2)
    assert [(a.interrupt_id, a.reason, a.status) for a in decision.answers] == [
        ("int-1", "tool_call", "resolved"),
        ("int-2", "input_required", "cancelled"),
    ]
    assert all(a.raised_at_ms == state.closed_at_ms for a in decision.answers)
    assert new_state is not None
    [record] = new_state.forwards
    assert (record.run_id, record.answered_run_id, record.interrupt_ids, record.settled) == (
        RUN_2,
        RUN_1,
        ("int-1", "int-2"),
        False,
    )
    assert new_state.interrupts == state.interrupts  # judging closes nothing; the agent does


def test_judge_never_mutates_its_input_or_state():
    state = two_open()
    raw = run_input(
        [entry("int-1", payload={"x": [1]}), entry("int-2", "cancelled"), entry("ghost")],
        extra={"a": 1},
    )
    pristine = copy.deepcopy(raw)
    before = copy.deepcopy(state)
    decision = decide(state, raw)
    assert decision.verdict is Verdict.FORWARD
    assert raw == pristine
    assert state == before
    assert decision.input != raw  # the ghost entry and `extra` were stripped from a copy


def test_the_json_form_of_a_forward_and_of_a_reject():
    forward = decide(two_open(), run_input([entry("int-1"), entry("int-2", "cancelled")]))
    assert set(forward.to_json()) == {"verdict", "reasons", "warnings", "input"}
    assert forward.to_json()["verdict"] == "forward"
    reject = decide(two_open(), run_input([entry("int-1")]))
    as_json = reject.to_json()
    assert set(as_json) == {"verdict", "reasons", "warnings"}
    assert as_json["verdict"] == "reject"
    assert as_json["reasons"] == [
        {"code": "uncovered_interrupt", "interruptId": "int-2", "detail": reject.reasons[0].detail}
    ]


# --- malformed_input -------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [None, 3, "text", [run_input()], True, 1.5])
def test_a_non_object_input_is_malformed(raw):
    state = two_open()
    decision, new_state = judge(state, raw, NOW_MS, thread_id=THREAD)
    assert decision.verdict is Verdict.REJECT
    [reason] = decision.reasons
    assert (reason.code, reason.path) == (str(Reason.MALFORMED_INPUT), "")
    assert reason.detail
    assert new_state is state
    assert "input" not in decision.to_json()


@pytest.mark.parametrize(
    ("mutate", "paths"),
    [
        (lambda d: d.pop("threadId"), ["/threadId"]),
        (lambda d: d.pop("runId"), ["/runId"]),
        (lambda d: d.pop("messages"), ["/messages"]),
        (lambda d: d.update(runId=12), ["/runId"]),
        (lambda d: d.update(messages={"id": "m"}), ["/messages"]),
        (lambda d: d.update(tools="none"), ["/tools"]),
        (lambda d: d.update(context=[{"description": "d"}]), ["/context/0/value"]),
        (lambda d: d.update(resume={"interruptId": "int-1"}), ["/resume"]),
        (lambda d: d.update(resume=[entry(status="maybe")]), ["/resume/0/status"]),
        (
            lambda d: d.update(resume=[{"interruptId": 1, "status": "resolved"}]),
            ["/resume/0/interruptId"],
        ),
        (lambda d: d.update(resume=[entry(metadata=[1])]), ["/resume/0/metadata"]),
        (lambda d: d.update(resume=[{"status": "cancelled"}]), ["/resume/0/interruptId"]),
        (lambda d: (d.pop("runId"), d.update(tools=3)), ["/runId", "/tools"]),
    ],
)
def test_a_known_field_with_a_rejected_value_is_malformed_and_all_are_reported(mutate, paths):
    raw = run_input([entry("int-1"), entry("int-2", "cancelled")])
    mutate(raw)
    decision = decide(two_open(), raw)
    assert decision.verdict is Verdict.REJECT
    assert codes(decision.reasons) == [str(Reason.MALFORMED_INPUT)] * len(paths)
    assert sorted(r.path for r in decision.reasons) == sorted(paths)
    assert all(r.detail for r in decision.reasons)


def test_values_are_never_coerced():
    raw = run_input([entry("int-1")], runId=2.0)
    assert decide(state_of(*interrupted(interrupt("int-1"))), raw).verdict is Verdict.REJECT
    raw = run_input([entry("int-1")])
    raw["messages"][0]["content"] = 5
    assert decide(state_of(*interrupted(interrupt("int-1"))), raw).verdict is Verdict.REJECT


def test_snake_case_spellings_are_not_the_wire_names():
    raw = {"thread_id": THREAD, "run_id": RUN_2, "messages": []}
    decision = decide(None, raw)
    assert decision.verdict is Verdict.REJECT
    assert {r.path for r in decision.reasons} == {"/threadId", "/runId"}


# --- thread_mismatch -------------------------------------------------------------------------


def test_an_input_for_another_thread_is_rejected_with_its_other_problems():
    raw = run_input([entry("int-1")], thread_id="thread-2")
    decision = decide(two_open(), raw)
    assert decision.verdict is Verdict.REJECT
    mismatch = only(decision.reasons, Reason.THREAD_MISMATCH)
    assert [(r.path, r.interrupt_id) for r in mismatch] == [("/threadId", None)]
    assert "thread-2" in mismatch[0].detail and THREAD in mismatch[0].detail
    assert [r.interrupt_id for r in only(decision.reasons, Reason.UNCOVERED_INTERRUPT)] == ["int-2"]


def test_without_an_address_the_inputs_own_thread_is_used():
    decision, new_state = judge(None, run_input(), NOW_MS)
    assert decision.verdict is Verdict.FORWARD
    assert decision.thread_id == THREAD
    assert new_state is not None and new_state.thread_id == THREAD


# --- run_active ------------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True])
def test_an_active_run_rejects_a_new_input(strict):
    state = state_of(*interrupted(interrupt("int-1")), run_started(RUN_2))
    decision = decide(state, run_input([entry("int-1")], run_id="run-3"), Policy(strict))
    assert decision.verdict is Verdict.REJECT
    [reason] = decision.reasons
    assert reason.code == str(Reason.RUN_ACTIVE)
    assert RUN_2 in reason.detail
    assert (reason.interrupt_id, reason.path) == (None, None)


def test_an_active_run_rejects_an_input_without_resume():
    decision = decide(state_of(run_started()), run_input())
    assert codes(decision.reasons) == [str(Reason.RUN_ACTIVE)]


# --- uncovered_interrupt (NOTES.md 2) --------------------------------------------------------


@pytest.mark.parametrize("resume", [None, []], ids=["no resume list", "empty resume list"])
def test_coverage_is_mandatory_even_without_a_resume_list(resume):
    decision = decide(two_open(), run_input(resume))
    assert decision.verdict is Verdict.REJECT
    assert codes(decision.reasons) == [str(Reason.UNCOVERED_INTERRUPT)] * 2
    assert [r.interrupt_id for r in decision.reasons] == ["int-1", "int-2"]
    assert all(r.path is None for r in decision.reasons)
    assert "'cancelled'" in decision.reasons[0].detail


def test_one_reason_per_uncovered_interrupt():
    state = state_of(*interrupted(*(interrupt(f"int-{n}") for n in range(5))))
    decision = decide(state, run_input([entry("int-2")]))
    assert [r.interrupt_id for r in decision.reasons] == ["int-0", "int-1", "int-3", "int-4"]
    assert set(codes(decision.reasons)) == {str(Reason.UNCOVERED_INTERRUPT)}


def test_an_entry_for_another_interrupt_does_not_cover_an_open_one():
    state = state_of(*interrupted(interrupt("int-1")))
    decision = decide(state, run_input([entry("int-9")]))
    assert decision.verdict is Verdict.REJECT
    assert codes(decision.reasons) == [str(Reason.UNCOVERED_INTERRUPT)]
    assert codes(decision.warnings) == [str(Warn.UNRECOGNISED_ENTRY)]


def test_subagent_interrupts_must_be_covered_like_the_parents():
    suspended = {"type": "suspended", "interruptIds": ["int-sub"]}
    state = state_of(
        run_started(),
        subagent_started("sub-1"),
        subagent_finished("sub-1", suspended),
        run_finished(
            interrupts=[interrupt("int-parent"), interrupt("int-sub", subagentRunId="sub-1")]
        ),
    )
    decision = decide(state, run_input([entry("int-parent")]))
    assert decision.verdict is Verdict.REJECT
    [reason] = decision.reasons
    assert (reason.code, reason.interrupt_id) == (str(Reason.UNCOVERED_INTERRUPT), "int-sub")
    assert "sub-1" in reason.detail
    decision = decide(state, run_input([entry("int-parent"), entry("int-sub", "cancelled")]))
    assert decision.verdict is Verdict.FORWARD
    assert [(a.interrupt_id, a.subagent_run_id) for a in decision.answers] == [
        ("int-parent", None),
        ("int-sub", "sub-1"),
    ]


def test_interrupts_of_a_run_failed_late_must_still_be_covered():
    state = state_of(*interrupted(interrupt("int-1")), run_error())
    assert state.status is RunStatus.FAILED
    decision = decide(state, run_input())
    assert [(r.code, r.interrupt_id) for r in decision.reasons] == [
        (str(Reason.UNCOVERED_INTERRUPT), "int-1")
    ]
    assert decide(state, run_input([entry("int-1", "cancelled")])).verdict is Verdict.FORWARD


# --- expired_interrupt (NOTES.md 3) ----------------------------------------------------------


def expiring(expires_at: str) -> ThreadState:
    return state_of(*interrupted(interrupt("int-1", "input_required", expiresAt=expires_at)))


@pytest.mark.parametrize(
    ("expires_at", "expired"),
    [
        (iso_at(0), True),  # exactly now: now-or-earlier is expired
        (iso_at(-1), True),
        (iso_at(-86_400_000), True),
        (iso_at(1), False),
        (iso_at(3_600_000), False),
        ("2025-06-01T12:00:00", True),  # no offset: UTC, so exactly now
        ("2025-06-01T12:00:00.001", False),
        ("2025-06-01T14:00:00+02:00", True),  # 12:00:00Z
        ("2025-06-01T12:59:59+01:00", True),  # 11:59:59Z
        ("2025-06-01T08:00:01-04:00", False),  # 12:00:01Z
        ("2025-06-01T12:00:01+00:00", False),
    ],
)
def test_a_resolved_entry_for_an_expired_interrupt_is_rejected(expires_at, expired):
    decision = decide(expiring(expires_at), run_input([entry("int-1", payload="answer")]))
    if expired:
        assert decision.verdict is Verdict.REJECT
        [reason] = decision.reasons
        assert reason.code == str(Reason.EXPIRED_INTERRUPT)
        assert (reason.interrupt_id, reason.path) == ("int-1", "/resume/0/status")
        assert expires_at in reason.detail
    else:
        assert decision.verdict is Verdict.FORWARD
        assert decision.warnings == ()


def test_expiry_is_judged_at_the_time_passed_in():
    state = expiring("2025-06-01T12:00:00Z")
    raw = run_input([entry("int-1")])
    assert decide(state, raw, now_ms=NOW_MS - 1).verdict is Verdict.FORWARD
    assert decide(state, raw, now_ms=NOW_MS).verdict is Verdict.REJECT
    assert decide(state, raw, now_ms=NOW_MS + 1).verdict is Verdict.REJECT


def test_an_expired_interrupt_may_still_be_abandoned():
    decision = decide(expiring(iso_at(-5_000)), run_input([entry("int-1", "cancelled")]))
    assert decision.verdict is Verdict.FORWARD
    assert decision.reasons == ()
    assert [a.status for a in decision.answers] == ["cancelled"]


@pytest.mark.parametrize("value", ["tomorrow", "", "2025-13-45T99:00:00Z", "1717243200000"])
def test_an_unreadable_expiry_is_not_expired_and_warns(value):
    decision = decide(expiring(value), run_input([entry("int-1", payload=1)]))
    assert decision.verdict is Verdict.FORWARD
    [warning] = decision.warnings
    assert (warning.code, warning.interrupt_id) == (str(Warn.EXPIRY_UNREADABLE), "int-1")
    assert repr(value) in warning.detail


def test_expired_is_not_excused_by_other_entries_being_fine():
    state = state_of(
        *interrupted(interrupt("a", expiresAt=iso_at(-1)), interrupt("b", expiresAt=iso_at(-1)))
    )
    decision = decide(state, run_input([entry("a", "cancelled"), entry("b")]))
    assert [(r.code, r.interrupt_id) for r in decision.reasons] == [
        (str(Reason.EXPIRED_INTERRUPT), "b")
    ]
    assert decision.reasons[0].path == "/resume/1/status"


# --- duplicate_entry -------------------------------------------------------------------------


def test_two_entries_for_one_interrupt_are_rejected():
    state = state_of(*interrupted(interrupt("int-1")))
    decision = decide(state, run_input([entry("int-1"), entry("int-1", "cancelled")]))
    assert decision.verdict is Verdict.REJECT
    [reason] = decision.reasons
    assert reason.code == str(Reason.DUPLICATE_ENTRY)
    assert (reason.interrupt_id, reason.path) == ("int-1", "/resume/1")


def test_one_duplicate_entry_reason_per_interrupt_naming_every_entry():
    state = state_of(*interrupted(interrupt("a"), interrupt("b")))
    raw = run_input([entry("a"), entry("b"), entry("a"), entry("b"), entry("a")])
    decision = decide(state, raw)
    dupes = only(decision.reasons, Reason.DUPLICATE_ENTRY)
    assert [(r.interrupt_id, r.path) for r in dupes] == [("a", "/resume/2"), ("b", "/resume/3")]
    assert "entries 0, 2, 4" in dupes[0].detail


def test_duplicate_entries_for_an_unrecognised_interrupt_are_rejected_too():
    state = state_of(*interrupted(interrupt("int-1")))
    raw = run_input([entry("int-1"), entry("ghost"), entry("ghost")])
    decision = decide(state, raw)
    assert decision.verdict is Verdict.REJECT
    assert [(r.code, r.interrupt_id) for r in decision.reasons] == [
        (str(Reason.DUPLICATE_ENTRY), "ghost")
    ]


# --- payload_schema_mismatch and response_schema_unusable (NOTES.md 7) -----------------------


def schema_state(schema) -> ThreadState:
    return state_of(*interrupted(interrupt("int-1", responseSchema=schema), interrupt("int-2")))


def test_a_resolved_payload_matching_the_schema_is_forwarded():
    raw = run_input([entry("int-1", payload={"approved": False}), entry("int-2")])
    assert decide(schema_state(APPROVAL_SCHEMA), raw).verdict is Verdict.FORWARD


@pytest.mark.parametrize(
    ("payload", "paths"),
    [
        ({"approved": "yes"}, ["/resume/0/payload/approved"]),
        ({}, ["/resume/0/payload"]),
        ("yes", ["/resume/0/payload"]),
        (None, ["/resume/0/payload"]),
    ],
)
def test_a_resolved_payload_breaking_the_schema_is_rejected(payload, paths):
    raw = run_input([entry("int-1", payload=payload), entry("int-2")])
    decision = decide(schema_state(APPROVAL_SCHEMA), raw)
    assert decision.verdict is Verdict.REJECT
    assert codes(decision.reasons) == [str(Reason.PAYLOAD_SCHEMA_MISMATCH)] * len(paths)
    assert [r.path for r in decision.reasons] == paths
    assert all(r.interrupt_id == "int-1" for r in decision.reasons)


def test_an_absent_payload_is_checked_as_absent():
    raw = run_input([entry("int-1"), entry("int-2")])
    decision = decide(schema_state(APPROVAL_SCHEMA), raw)
    assert [(r.code, r.path) for r in decision.reasons] == [
        (str(Reason.PAYLOAD_SCHEMA_MISMATCH), "/resume/0/payload")
    ]


def test_every_schema_problem_is_its_own_reason():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a", "b"],
    }
    raw = run_input([entry("int-2"), entry("int-1", payload={"a": "x", "b": 1})])
    decision = decide(schema_state(schema), raw)
    assert [r.path for r in decision.reasons] == ["/resume/1/payload/a", "/resume/1/payload/b"]


def test_cancelled_entries_are_not_checked_against_the_schema():
    raw = run_input([entry("int-1", "cancelled", payload={"approved": "nope"}), entry("int-2")])
    decision = decide(schema_state(APPROVAL_SCHEMA), raw)
    assert decision.verdict is Verdict.FORWARD
    assert decision.warnings == ()


@pytest.mark.parametrize(
    "schema",
    [
        {"type": 12},
        {"$ref": "#/definitions/missing"},
        {"$ref": "https://schemas.example.invalid/answer.json"},
        {"minimum": "zero"},
    ],
)
def test_an_unusable_schema_warns_and_forwards(schema):
    raw = run_input([entry("int-1", payload={"anything": 1}), entry("int-2")])
    decision = decide(schema_state(schema), raw)
    assert decision.verdict is Verdict.FORWARD
    [warning] = decision.warnings
    assert (warning.code, warning.interrupt_id) == (str(Warn.RESPONSE_SCHEMA_UNUSABLE), "int-1")
    assert decision.input == raw


@pytest.mark.parametrize("depth", [10, 900, 1000])
def test_a_deep_payload_against_a_usable_schema_is_rejected_never_forwarded(depth):
    payload: list = []
    for _ in range(depth - 1):
        payload = [payload]
    for schema in (APPROVAL_SCHEMA, {**APPROVAL_SCHEMA, "uniqueItems": True}):
        raw = run_input([entry("int-1", payload=payload), entry("int-2")])
        decision = decide(schema_state(schema), raw)
        assert decision.verdict is Verdict.REJECT
        assert codes(decision.reasons) == [str(Reason.PAYLOAD_SCHEMA_MISMATCH)]
        assert decision.reasons[0].path.startswith("/resume/0/payload")
        assert not only(decision.warnings, Warn.RESPONSE_SCHEMA_UNUSABLE)


def test_an_unusable_schema_on_a_cancelled_entry_says_nothing():
    raw = run_input([entry("int-1", "cancelled"), entry("int-2")])
    assert decide(schema_state({"type": 12}), raw).warnings == ()


# --- unrecognised_entry (NOTES.md 4) ---------------------------------------------------------


def test_unrecognised_entries_are_stripped_with_a_warning():
    state = state_of(*interrupted(interrupt("int-1")))
    raw = run_input([entry("ghost-a"), entry("int-1", payload=1), entry("ghost-b", "cancelled")])
    decision = decide(state, raw)
    assert decision.verdict is Verdict.FORWARD
    assert [(w.code, w.interrupt_id, w.path) for w in decision.warnings] == [
        (str(Warn.UNRECOGNISED_ENTRY), "ghost-a", "/resume/0"),
        (str(Warn.UNRECOGNISED_ENTRY), "ghost-b", "/resume/2"),
    ]
    assert decision.input is not None
    assert decision.input["resume"] == [entry("int-1", payload=1)]
    assert [a.interrupt_id for a in decision.answers] == ["int-1"]


def test_unrecognised_entries_reject_in_strict_mode():
    state = state_of(*interrupted(interrupt("int-1")))
    raw = run_input([entry("int-1"), entry("ghost")])
    decision = decide(state, raw, STRICT)
    assert decision.verdict is Verdict.REJECT
    [reason] = decision.reasons
    assert (reason.code, reason.interrupt_id, reason.path) == (
        str(Reason.UNRECOGNISED_ENTRY),
        "ghost",
        "/resume/1",
    )
    assert decision.warnings == ()


@pytest.mark.parametrize(
    "events",
    [
        [run_started(), run_finished()],
        [run_started(), run_finished(outcome={"type": "cancelled"})],
        [run_started(), run_error()],
        [*interrupted(interrupt("int-1")), run_started(RUN_2), run_finished(RUN_2)],
    ],
    ids=["succeeded", "cancelled", "failed", "continued"],
)
def test_a_resume_on_a_thread_that_is_not_interrupted_is_all_unrecognised(events):
    state = state_of(*events)
    raw = run_input([entry("int-1"), entry("int-2", "cancelled")], run_id="run-9")
    decision = decide(state, raw)
    assert decision.verdict is Verdict.FORWARD
    assert codes(decision.warnings) == [str(Warn.UNRECOGNISED_ENTRY)] * 2
    assert "not interrupted" in decision.warnings[0].detail
    assert decision.input is not None
    assert decision.input["resume"] == []
    assert decision.answers == ()
    strict = decide(state, raw, STRICT)
    assert codes(strict.reasons) == [str(Reason.UNRECOGNISED_ENTRY)] * 2


def test_a_plain_input_on_a_finished_thread_is_forwarded_untouched():
    state = state_of(run_started(), run_finished())
    raw = run_input(run_id="run-9")
    for policy in (LENIENT, STRICT):
        decision = decide(state, raw, policy)
        assert decision.verdict is Verdict.FORWARD
        assert decision.warnings == ()
        assert decision.input == raw


# --- thread_unknown (NOTES.md 5) -------------------------------------------------------------


def test_an_unknown_thread_is_forwarded_unchanged_with_a_warning():
    raw = run_input([entry("int-1", payload={"approved": True}), entry("int-7", "cancelled")])
    decision, new_state = judge(None, raw, NOW_MS, thread_id=THREAD)
    assert decision.verdict is Verdict.FORWARD
    [warning] = decision.warnings
    assert warning.code == str(Warn.THREAD_UNKNOWN)
    assert THREAD in warning.detail
    assert decision.input == raw
    assert decision.answers == ()
    assert new_state is not None
    assert new_state.status is RunStatus.UNKNOWN
    assert [f.run_id for f in new_state.forwards] == [RUN_2]


def test_an_unknown_thread_is_rejected_in_strict_mode():
    decision, new_state = judge(None, run_input([entry("int-1")]), NOW_MS, STRICT, THREAD)
    assert decision.verdict is Verdict.REJECT
    [reason] = decision.reasons
    assert reason.code == str(Reason.THREAD_UNKNOWN)
    assert new_state is None


def test_a_thread_known_only_from_forwards_is_still_unknown():
    _, remembered = judge(None, run_input(run_id="run-a"), NOW_MS, thread_id=THREAD)
    assert remembered is not None
    decision = decide(remembered, run_input([entry("int-1")], run_id="run-b"))
    assert decision.verdict is Verdict.FORWARD
    assert codes(decision.warnings) == [str(Warn.THREAD_UNKNOWN)]


def test_duplicate_entries_reject_even_on_an_unknown_thread():
    decision = decide(None, run_input([entry("int-1"), entry("int-1")]))
    assert codes(decision.reasons) == [str(Reason.DUPLICATE_ENTRY)]


# --- duplicate verdict and already_resumed ---------------------------------------------------


def test_a_resent_request_is_a_duplicate():
    state = two_open()
    raw = run_input([entry("int-1", payload={"approved": True}), entry("int-2", "cancelled")])
    first, remembered = judge(state, raw, NOW_MS, thread_id=THREAD)
    assert first.verdict is Verdict.FORWARD
    again, after = judge(remembered, copy.deepcopy(raw), NOW_MS + 5, thread_id=THREAD)
    assert again.verdict is Verdict.DUPLICATE
    assert (again.reasons, again.warnings, again.input) == ((), (), None)
    assert "input" not in again.to_json()
    assert after is remembered


def test_a_resent_request_with_keys_in_another_order_is_a_duplicate():
    state = two_open()
    raw = run_input([entry("int-1", payload={"a": 1, "b": 2}), entry("int-2", "cancelled")])
    _, remembered = judge(state, raw, NOW_MS, thread_id=THREAD)
    reordered = run_input(
        [
            {"payload": {"b": 2, "a": 1}, "status": "resolved", "interruptId": "int-1"},
            {"status": "cancelled", "interruptId": "int-2"},
        ]
    )
    assert decide(remembered, reordered).verdict is Verdict.DUPLICATE


def test_a_different_answer_to_interrupts_already_answered_is_already_resumed():
    state = two_open()
    raw = run_input([entry("int-1", payload={"approved": True}), entry("int-2", "cancelled")])
    _, remembered = judge(state, raw, NOW_MS, thread_id=THREAD)
    other = run_input([entry("int-1", "cancelled"), entry("int-2", payload=3)], run_id="run-3")
    decision = decide(remembered, other)
    assert decision.verdict is Verdict.REJECT
    assert [(r.code, r.interrupt_id, r.path) for r in decision.reasons] == [
        (str(Reason.ALREADY_RESUMED), "int-1", "/resume/0"),
        (str(Reason.ALREADY_RESUMED), "int-2", "/resume/1"),
    ]
    same_run_id = run_input([entry("int-1", "cancelled"), entry("int-2", "cancelled")])
    assert codes(decide(remembered, same_run_id).reasons) == [str(Reason.ALREADY_RESUMED)] * 2


def test_once_the_agent_starts_the_answering_run_answers_no_longer_block():
    state = two_open()
    raw = run_input([entry("int-1"), entry("int-2", "cancelled")])
    _, remembered = judge(state, raw, NOW_MS, thread_id=THREAD)
    assert remembered is not None
    assert not any(f.settled for f in remembered.forwards)
    moved = apply_event(remembered, THREAD, run_started(RUN_2), NOW_MS + 1).state
    assert moved is not None
    assert all(f.settled for f in moved.forwards)
    closed = apply_event(moved, THREAD, run_finished(RUN_2), NOW_MS + 2).state
    decision = decide(closed, run_input(run_id="run-3"))
    assert decision.verdict is Verdict.FORWARD


def test_a_producer_rejecting_the_resume_reopens_the_interrupts_for_a_new_answer():
    state = state_of(*interrupted(interrupt("int-1")))
    _, remembered = judge(state, run_input([entry("int-1", payload=1)]), NOW_MS, thread_id=THREAD)
    # the agent refuses the input before starting: a stream that opens with RUN_ERROR
    refused = apply_event(remembered, THREAD, run_error("bad input"), NOW_MS + 1).state
    assert refused is not None
    assert [i.id for i in refused.interrupts] == ["int-1"]
    retry = run_input([entry("int-1", payload=2)], run_id="run-3")
    decision = decide(refused, retry)
    assert decision.verdict is Verdict.FORWARD


# --- NOTES.md reading 1: a continuation that fails before closing ------------------------


def failed_continuation(answer=None):
    """r1 raised int-1; the request answering it was forwarded; r2 started and failed."""
    state = state_of(*interrupted(interrupt("int-1", responseSchema=APPROVAL_SCHEMA)))
    raw = answer or run_input([entry("int-1", payload={"approved": True})], run_id=RUN_2)
    first, remembered = judge(state, raw, NOW_MS, thread_id=THREAD)
    assert first.verdict is Verdict.FORWARD
    for event in (run_started(RUN_2), run_error("the continuation failed")):
        remembered = apply_event(remembered, THREAD, event, NOW_MS + 1).state
    assert remembered is not None
    return remembered, raw


def test_after_a_failed_continuation_an_input_must_cover_the_continued_interrupts():
    state, _ = failed_continuation()
    decision = decide(state, run_input(run_id="run-3"))
    assert decision.verdict is Verdict.REJECT
    assert [(r.code, r.interrupt_id) for r in decision.reasons] == [
        (str(Reason.UNCOVERED_INTERRUPT), "int-1")
    ]
    assert f"of run {RUN_1!r}" in decision.reasons[0].detail  # the run that raised it


def test_after_a_failed_continuation_the_answer_is_judged_and_kept_not_stripped():
    state, _ = failed_continuation()
    retry = run_input([entry("int-1", payload={"approved": False})], run_id="run-3")
    decision, after = judge(state, retry, NOW_MS + 2, thread_id=THREAD)
    assert decision.verdict is Verdict.FORWARD
    assert decision.warnings == ()
    assert decision.input is not None and decision.input["resume"] == retry["resume"]
    assert [a.interrupt_id for a in decision.answers] == ["int-1"]
    # when r1 closed, not when r2 failed
    assert decision.answers[0].raised_at_ms == state.interrupts_closed_at_ms != state.closed_at_ms
    # the retry now holds the answer until the agent moves on
    other = run_input([entry("int-1", "cancelled")], run_id="run-4")
    assert codes(decide(after, other).reasons) == [str(Reason.ALREADY_RESUMED)]
    # and its schema still applies
    bad = run_input([entry("int-1", payload={"approved": "yes"})], run_id="run-5")
    assert codes(decide(state, bad).reasons) == [str(Reason.PAYLOAD_SCHEMA_MISMATCH)]


def test_a_retry_identical_to_the_failed_continuations_request_is_forwarded_again():
    state, raw = failed_continuation()
    decision = decide(state, copy.deepcopy(raw))
    assert decision.verdict is Verdict.FORWARD
    assert decision.reasons == ()


def test_already_resumed_no_longer_applies_after_the_continuation_failed():
    state, _ = failed_continuation()
    other = run_input([entry("int-1", "cancelled")], run_id="run-3")
    assert decide(state, other).verdict is Verdict.FORWARD


def test_a_continuation_that_closes_replaces_the_interrupts_and_stays_a_duplicate():
    state = state_of(*interrupted(interrupt("int-1")))
    raw = run_input([entry("int-1", payload=1)], run_id=RUN_2)
    _, remembered = judge(state, raw, NOW_MS, thread_id=THREAD)
    for event in (run_started(RUN_2), run_finished(RUN_2)):
        remembered = apply_event(remembered, THREAD, event, NOW_MS + 1).state
    assert decide(remembered, copy.deepcopy(raw)).verdict is Verdict.DUPLICATE
    assert decide(remembered, run_input(run_id="run-3")).verdict is Verdict.FORWARD


def test_a_failed_run_with_nothing_open_before_it_leaves_nothing_open():
    state = state_of(run_started(), run_finished(), run_started(RUN_2), run_error())
    decision = decide(state, run_input([entry("int-1")], run_id="run-3"))
    assert decision.verdict is Verdict.FORWARD
    assert codes(decision.warnings) == [str(Warn.UNRECOGNISED_ENTRY)]


def test_forwards_remembered_are_bounded():
    state: ThreadState | None = state_of(run_started(), run_finished())
    for n in range(FORWARDS_KEPT + 3):
        decision, state = judge(state, run_input(run_id=f"run-{n}"), NOW_MS, thread_id=THREAD)
        assert decision.verdict is Verdict.FORWARD
    assert state is not None
    assert len(state.forwards) == FORWARDS_KEPT
    assert state.forwards[-1].run_id == f"run-{FORWARDS_KEPT + 2}"
    # the oldest forward was forgotten, so re-sending it is judged afresh
    assert decide(state, run_input(run_id="run-0")).verdict is Verdict.FORWARD
    assert decide(state, run_input(run_id="run-5")).verdict is Verdict.DUPLICATE


# --- unknown_member_stripped -----------------------------------------------------------------


def test_unknown_members_are_stripped_with_a_warning_naming_their_path():
    state = state_of(*interrupted(interrupt("int-1")))
    raw = run_input([entry("int-1", signature="abc")], futureField={"x": 1})
    raw["messages"][0]["mood"] = "happy"
    decision = decide(state, raw)
    assert decision.verdict is Verdict.FORWARD
    assert sorted((w.code, w.path) for w in decision.warnings) == [
        (str(Warn.UNKNOWN_MEMBER_STRIPPED), "/futureField"),
        (str(Warn.UNKNOWN_MEMBER_STRIPPED), "/messages/0/mood"),
        (str(Warn.UNKNOWN_MEMBER_STRIPPED), "/resume/0/signature"),
    ]
    expected = copy.deepcopy(raw)
    del expected["futureField"], expected["messages"][0]["mood"], expected["resume"][0]["signature"]
    assert decision.input == expected


def test_an_unrecognised_message_role_is_stripped_as_a_union_member():
    raw = run_input()
    raw["messages"].append({"id": "m-2", "role": "oracle", "content": "?"})
    decision = decide(state_of(run_started(), run_finished()), raw)
    assert decision.verdict is Verdict.FORWARD
    [warning] = decision.warnings
    assert (warning.code, warning.path) == (str(Warn.UNKNOWN_MEMBER_STRIPPED), "/messages/1")
    assert decision.input is not None
    assert decision.input["messages"] == raw["messages"][:1]


def test_open_objects_keep_every_member():
    opaque = {"anything": {"deep": [1, {"x": None}]}, "ag-ui": {"reserved": True}}
    raw = run_input(
        [entry("int-1", payload=copy.deepcopy(opaque), metadata=copy.deepcopy(opaque))],
        forwardedProps=copy.deepcopy(opaque),
        state=copy.deepcopy(opaque),
        tools=[{"name": "t", "description": "d", "parameters": copy.deepcopy(opaque)}],
    )
    decision = decide(state_of(*interrupted(interrupt("int-1"))), raw)
    assert decision.verdict is Verdict.FORWARD
    assert decision.warnings == ()
    assert decision.input == raw


# --- everything at once ----------------------------------------------------------------------


def test_all_problems_are_reported_together():
    state = state_of(
        *interrupted(
            interrupt("open-uncovered"),
            interrupt("open-expired", expiresAt=iso_at(-1)),
            interrupt("open-schema", responseSchema=APPROVAL_SCHEMA),
            interrupt("open-duplicated"),
            interrupt("open-fine", expiresAt="whenever"),
        )
    )
    raw = run_input(
        [
            entry("open-expired", payload=1),
            entry("open-schema", payload={"approved": 1}),
            entry("open-duplicated"),
            entry("open-duplicated", "cancelled"),
            entry("open-fine"),
            entry("ghost"),
        ],
        thread_id="thread-x",
        extra=1,
    )
    decision = decide(state, raw)
    assert decision.verdict is Verdict.REJECT
    assert sorted((r.code, r.interrupt_id) for r in decision.reasons) == sorted(
        [
            (str(Reason.THREAD_MISMATCH), None),
            (str(Reason.DUPLICATE_ENTRY), "open-duplicated"),
            (str(Reason.UNCOVERED_INTERRUPT), "open-uncovered"),
            (str(Reason.EXPIRED_INTERRUPT), "open-expired"),
            (str(Reason.PAYLOAD_SCHEMA_MISMATCH), "open-schema"),
        ]
    )
    assert sorted((w.code, w.interrupt_id) for w in decision.warnings) == sorted(
        [
            (str(Warn.UNKNOWN_MEMBER_STRIPPED), None),
            (str(Warn.EXPIRY_UNREADABLE), "open-fine"),
            (str(Warn.UNRECOGNISED_ENTRY), "ghost"),
        ]
    )
    strict = decide(state, raw, STRICT)
    assert (str(Reason.UNRECOGNISED_ENTRY), "ghost") in [
        (r.code, r.interrupt_id) for r in strict.reasons
    ]


def test_every_reason_carries_code_and_detail_and_its_location():
    state = state_of(*interrupted(interrupt("a"), interrupt("b", responseSchema=APPROVAL_SCHEMA)))
    raw = run_input([entry("b", payload={}), entry("c"), entry("c")], thread_id="elsewhere")
    decision = decide(state, raw, STRICT)
    assert decision.verdict is Verdict.REJECT
    for reason in decision.reasons:
        as_json = reason.to_json()
        assert as_json["code"] in {str(r) for r in Reason}
        assert as_json["detail"]
        concerns_one = reason.code not in (str(Reason.THREAD_MISMATCH),)
        assert ("interruptId" in as_json) == concerns_one
        if reason.code != str(Reason.UNCOVERED_INTERRUPT):
            assert as_json["path"].startswith("/")
    assert {r.code for r in decision.reasons} == {
        str(Reason.THREAD_MISMATCH),
        str(Reason.UNCOVERED_INTERRUPT),
        str(Reason.PAYLOAD_SCHEMA_MISMATCH),
        str(Reason.DUPLICATE_ENTRY),
        str(Reason.UNRECOGNISED_ENTRY),
    }


def test_policy_defaults_to_lenient():
    assert Policy().strict is False
    state = state_of(*interrupted(interrupt("int-1")))
    decision, _ = judge(state, run_input([entry("int-1"), entry("x")]), NOW_MS)
    assert decision.verdict is Verdict.FORWARD


def test_a_state_with_unknown_status_and_no_forwards_behaves_like_none():
    blank = ThreadState(THREAD)
    raw = run_input([entry("int-1")])
    assert decide(blank, raw).to_json() == decide(None, raw).to_json()
    assert codes(decide(blank, raw).warnings) == [str(Warn.THREAD_UNKNOWN)]


# --- values the fast JSON encoder refuses ----------------------------------------------------


def deeply_nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "payload",
    [deeply_nested(300), deeply_nested(1000), 2**70, {"n": -(2**80)}],
    ids=["300 deep", "1000 deep", "big int", "big negative int"],
)
def test_payloads_orjson_cannot_encode_are_judged_and_remembered(payload):
    state = state_of(*interrupted(interrupt("int-1")))
    raw = run_input([entry("int-1", payload=payload)])
    decision, remembered = judge(state, raw, NOW_MS, thread_id=THREAD)
    assert decision.verdict is Verdict.FORWARD
    assert decide(remembered, raw).verdict is Verdict.DUPLICATE
    other = run_input([entry("int-1", payload=[payload])], run_id="run-3")
    assert decide(remembered, other).verdict is Verdict.REJECT  # already_resumed, not a crash


# --- union members and paths after stripping -----------------------------------------------------------


def test_an_unrecognised_content_part_is_stripped():
    raw = run_input()
    raw["messages"][0]["content"] = [{"type": "text", "text": "hi"}, {"type": "hologram"}]
    decision = decide(state_of(run_started(), run_finished()), raw)
    assert decision.verdict is Verdict.FORWARD
    assert [(w.code, w.path) for w in decision.warnings] == [
        (str(Warn.UNKNOWN_MEMBER_STRIPPED), "/messages/0/content/1")
    ]


def test_unknown_member_paths_point_into_the_raw_input_after_a_union_strip():
    raw = run_input()
    raw["messages"] = [
        {"id": "a", "role": "hologram"},
        {"id": "b", "role": "user", "content": "x", "mood": "calm"},
    ]
    decision = decide(state_of(run_started(), run_finished()), raw)
    assert decision.verdict is Verdict.FORWARD
    assert sorted(w.path for w in decision.warnings) == ["/messages/0", "/messages/1/mood"]


def test_thousands_of_stripped_members_are_warned_about_in_bounded_number():
    from gateway.core.requests.judge import MAX_STRIP_WARNINGS

    raw = run_input()
    raw["messages"] = [
        {"id": f"u{i}", "role": "user", "content": "x", "extra": i} for i in range(500)
    ]
    raw["messages"] += [{"id": f"r{i}", "role": "robot", "content": "x"} for i in range(500)]
    decision = decide(None, raw)
    assert decision.verdict is Verdict.FORWARD
    stripped = only(decision.warnings, Warn.UNKNOWN_MEMBER_STRIPPED)
    assert len(stripped) == MAX_STRIP_WARNINGS + 1
    assert stripped[-1].detail.startswith("950 more")
    assert all("extra" not in m and m["role"] == "user" for m in decision.input["messages"])
    assert len(decision.input["messages"]) == 500


# --- hostile values: every finding's text stays short, nothing raises -----------------------

HUGE = "x" * 100_000
DEEP: object = "x"
for _ in range(1_000):
    DEEP = [DEEP]
SHORT_DETAIL = 1_000  # a few previews and clipped pointers/messages at most
WITH_SCHEMA = {"type": "object", "additionalProperties": {"type": "integer"}}


def open_with(*interrupts):
    return state_of(*interrupted(*interrupts))


HOSTILE_REQUESTS = {
    # request-side values formatted into a detail
    "thread_mismatch": (two_open(), run_input(thread_id=HUGE), LENIENT, THREAD),
    "thread_unknown": (None, run_input(thread_id=HUGE), LENIENT, HUGE),
    "thread_unknown_strict": (None, run_input(thread_id=HUGE), STRICT, HUGE),
    "unrecognised_entry": (two_open(), run_input([entry(HUGE, "cancelled")]), LENIENT, THREAD),
    "unrecognised_strict": (two_open(), run_input([entry(HUGE, "cancelled")]), STRICT, THREAD),
    "duplicate_entry": (
        two_open(),
        run_input([entry(HUGE, "cancelled"), entry(HUGE, "cancelled")]),
        LENIENT,
        THREAD,
    ),
    "unknown_member": (two_open(), run_input([], **{HUGE: 1}), LENIENT, THREAD),
    "unknown_role": (
        two_open(),
        run_input([], messages=[{"id": "m", "role": HUGE, "content": "x"}]),
        LENIENT,
        THREAD,
    ),
    "payload_mismatch": (
        open_with(interrupt("int-1", responseSchema=WITH_SCHEMA)),
        run_input([entry("int-1", payload={HUGE: HUGE})]),
        LENIENT,
        THREAD,
    ),
    "payload_mismatch_detailed": (  # small enough for the schema's messages to be computed
        open_with(interrupt("int-1", responseSchema=WITH_SCHEMA)),
        run_input([entry("int-1", payload={"k" * 1_400: "v"})]),
        LENIENT,
        THREAD,
    ),
    # the same fields nested 1,000 deep: malformed, said briefly
    "deep_run_id": (two_open(), run_input(run_id=DEEP), LENIENT, THREAD),
    "deep_interrupt_id": (two_open(), run_input([entry(DEEP)]), LENIENT, THREAD),
    "deep_thread_id": (two_open(), run_input(thread_id=DEEP), LENIENT, THREAD),
}
EXPECTED = {
    "thread_mismatch": Reason.THREAD_MISMATCH,
    "thread_unknown": Warn.THREAD_UNKNOWN,
    "thread_unknown_strict": Reason.THREAD_UNKNOWN,
    "unrecognised_entry": Warn.UNRECOGNISED_ENTRY,
    "unrecognised_strict": Reason.UNRECOGNISED_ENTRY,
    "duplicate_entry": Reason.DUPLICATE_ENTRY,
    "unknown_member": Warn.UNKNOWN_MEMBER_STRIPPED,
    "unknown_role": Warn.UNKNOWN_MEMBER_STRIPPED,
    "payload_mismatch": Reason.PAYLOAD_SCHEMA_MISMATCH,
    "payload_mismatch_detailed": Reason.PAYLOAD_SCHEMA_MISMATCH,
    "deep_run_id": Reason.MALFORMED_INPUT,
    "deep_interrupt_id": Reason.MALFORMED_INPUT,
    "deep_thread_id": Reason.MALFORMED_INPUT,
}


@pytest.mark.parametrize("case", list(HOSTILE_REQUESTS))
def test_a_hostile_value_leaves_every_detail_short(case):
    state, raw, policy, thread_id = HOSTILE_REQUESTS[case]
    decision = decide(state, raw, policy, thread_id=thread_id)
    findings = [*decision.reasons, *decision.warnings]
    assert str(EXPECTED[case]) in codes(findings)
    for finding in findings:
        assert 0 < len(finding.detail) <= SHORT_DETAIL, (finding.code, finding.detail[:200])
