"""The thread state machine (gateway.core.events.lifecycle): NOTES.md, "Open interrupts",
and the lifecycle rules each `protocol_violation` warning names."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import orjson
import pytest

from gateway.core import Change, EventKind, Rule, RunStatus, ThreadState, Warn, apply_event
from gateway.core.events import interrupts, runs, step, subagents
from gateway.core.events import lifecycle as lifecycle_module
from gateway.core.values.thread import (
    MAX_ID_BYTES,
    MAX_IDS_PER_SUSPENSION,
    MAX_INTERRUPT_CONTENT_BYTES,
    MAX_INTERRUPTS_PER_RUN,
    MAX_OPEN_SUBAGENTS,
    MAX_SUSPENDED,
    from_dict,
    to_dict,
)
from tests.core.factories import (
    RUN_1,
    RUN_2,
    THREAD,
    interrupt,
    interrupted,
    replay,
    run_error,
    run_finished,
    run_started,
    state_of,
    subagent_error,
    subagent_finished,
    subagent_started,
    text_start,
    warnings_of,
)

VIOLATION = str(Warn.PROTOCOL_VIOLATION)


def violations(outcomes) -> list[str | None]:
    return [rule for code, rule in warnings_of(outcomes) if code == VIOLATION]


def assert_well_defined(state: ThreadState | None) -> None:
    """A state the rest of the service can use: consistent and serialisable."""
    assert state is not None
    assert isinstance(state.status, RunStatus)
    if state.interrupts:
        assert state.status in (RunStatus.INTERRUPTED, RunStatus.FAILED)
    if state.held_interrupts:  # held while a continuation runs
        assert state.status is RunStatus.ACTIVE and not state.interrupts
    if state.interrupts or state.held_interrupts:
        assert state.interrupts_run_id is not None
    if state.status is RunStatus.ACTIVE:
        assert state.closed_at_ms is None
    assert from_dict(to_dict(state)) == state


# --- ordinary runs --------------------------------------------------------------------------


def test_run_started_opens_an_active_run():
    outcome = apply_event(None, THREAD, run_started(), at_ms=5)
    assert outcome.change is Change.STARTED
    assert outcome.kind is EventKind.RUN_STARTED
    assert outcome.warnings == ()
    state = outcome.state
    assert state is not None
    assert (state.thread_id, state.status, state.run_id) == (THREAD, RunStatus.ACTIVE, RUN_1)
    assert state.updated_ms == 5
    assert not state.is_closed


def test_streaming_events_during_a_run_change_nothing():
    state = state_of(run_started())
    outcome = apply_event(state, THREAD, text_start(), at_ms=99)
    assert outcome.state is state
    assert outcome.change is Change.NONE
    assert outcome.warnings == ()
    assert outcome.kind is EventKind.STREAM


@pytest.mark.parametrize(
    ("outcome", "status", "name"),
    [
        (None, RunStatus.SUCCEEDED, "success"),
        ({"type": "success"}, RunStatus.SUCCEEDED, "success"),
        ({"type": "success", "pendingToolCallIds": ["call-1"]}, RunStatus.SUCCEEDED, "success"),
        ({"type": "cancelled"}, RunStatus.CANCELLED, "cancelled"),
    ],
)
def test_runs_that_close_without_interrupting_leave_nothing_open(outcome, status, name):
    finished = run_finished() if outcome is None else run_finished(outcome=outcome)
    state, outcomes = replay([run_started(), finished])
    assert outcomes[-1].change is Change.CLOSED
    assert outcomes[-1].warnings == ()
    assert state is not None
    assert (state.status, state.outcome, state.interrupts) == (status, name, ())
    assert not state.has_open_interrupts
    assert state.is_closed
    assert state.closed_at_ms is not None


def test_an_interrupting_run_keeps_every_field_of_every_interrupt():
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}}}
    first = interrupt(
        "int-1",
        "tool_call",
        message="Delete 3 files?",
        toolCallId="call-1",
        responseSchema=schema,
        expiresAt="2030-01-01T00:00:00Z",
        metadata={"ui": {"color": "red"}, "ag-ui": {"x": None}},
    )
    second = interrupt("int-2", "input_required", subagentRunId="sub-1")
    state, outcomes = replay(interrupted(first, second))
    assert outcomes[-1].change is Change.CLOSED
    assert outcomes[-1].warnings == ()
    assert state is not None
    assert state.status is RunStatus.INTERRUPTED
    assert state.outcome == "interrupt"
    assert state.run_id == RUN_1
    one, two = state.interrupts
    assert (one.id, one.reason, one.message, one.tool_call_id) == (
        "int-1",
        "tool_call",
        "Delete 3 files?",
        "call-1",
    )
    assert orjson.loads(one.response_schema) == schema  # its canonical bytes
    assert one.response_schema == orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    assert one.response_schema_unusable is None
    assert one.expires_at == "2030-01-01T00:00:00Z"
    assert one.metadata == {"ui": {"color": "red"}, "ag-ui": {"x": None}}
    assert one.subagent_run_id is None
    assert (two.id, two.reason, two.subagent_run_id) == ("int-2", "input_required", "sub-1")
    assert_well_defined(state)


def test_apply_event_mutates_neither_the_state_nor_the_event():
    before = state_of(run_started())
    snapshot = to_dict(before)
    event = run_finished(interrupts=[interrupt(metadata={"k": [1, 2]})])
    pristine = copy.deepcopy(event)
    after = apply_event(before, THREAD, event, at_ms=1).state
    assert to_dict(before) == snapshot
    assert event == pristine
    assert after is not before


# --- NOTES.md 1: which interrupts are open ---------------------------------------------------


def test_only_the_latest_runs_interrupts_are_open():
    state = state_of(
        *interrupted(interrupt("old-1")),
        run_started(RUN_2),
        run_finished(RUN_2, interrupts=[interrupt("new-1"), interrupt("new-2")]),
    )
    assert [i.id for i in state.interrupts] == ["new-1", "new-2"]
    assert state.run_id == RUN_2


def test_a_continuation_holds_the_interrupts_it_continues_until_it_closes():
    state = state_of(*interrupted(interrupt("int-1")), run_started(RUN_2))
    assert state.status is RunStatus.ACTIVE
    assert state.run_id == RUN_2
    assert state.interrupts == ()  # held, not open
    assert [i.id for i in state.held_interrupts] == ["int-1"]
    assert not state.has_open_interrupts
    assert state.interrupts_run_id == RUN_1
    assert_well_defined(state)


@pytest.mark.parametrize(
    "finished",
    [
        run_finished(RUN_2),
        run_finished(RUN_2, outcome={"type": "success"}),
        run_finished(RUN_2, outcome={"type": "cancelled"}),
    ],
    ids=["absent", "success", "cancelled"],
)
def test_a_continuation_that_closes_replaces_the_interrupts_it_continued(finished):
    closed = state_of(*interrupted(interrupt("int-1")), run_started(RUN_2), finished)
    assert closed.status in (RunStatus.SUCCEEDED, RunStatus.CANCELLED)
    assert closed.interrupts == ()
    assert closed.interrupts_run_id is None
    assert_well_defined(closed)


def test_a_continuation_that_interrupts_again_replaces_them_with_its_own():
    closed = state_of(
        *interrupted(interrupt("int-1")),
        run_started(RUN_2),
        run_finished(RUN_2, interrupts=[interrupt("int-2")]),
    )
    assert [i.id for i in closed.interrupts] == ["int-2"]
    assert (closed.interrupts_run_id, closed.interrupts_closed_at_ms) == (
        RUN_2,
        closed.closed_at_ms,
    )


@pytest.mark.parametrize(
    "failure",
    [
        [run_error()],
        [text_start(), run_error("mid-stream")],
        [run_finished(RUN_2, outcome={"type": "interrupt", "interrupts": []})],
        [run_finished(RUN_2, outcome={"type": 5})],
    ],
    ids=["run_error", "run_error_after_deltas", "empty_interrupt_outcome", "malformed"],
)
def test_a_continuation_that_fails_before_closing_leaves_the_continued_interrupts_open(failure):
    """NOTES.md reading 1: the failed continuation answered nothing."""
    state, outcomes = replay(
        [*interrupted(interrupt("int-1"), interrupt("int-2")), run_started(RUN_2), *failure]
    )
    assert state is not None
    assert outcomes[-1].change is Change.FAILED
    assert (state.status, state.run_id, state.failed_late) == (RunStatus.FAILED, RUN_2, False)
    assert [i.id for i in state.interrupts] == ["int-1", "int-2"]
    assert state.has_open_interrupts
    assert state.interrupts_run_id == RUN_1
    assert state.interrupts_closed_at_ms is not None
    assert_well_defined(state)


def test_a_retry_that_fails_again_still_leaves_them_open():
    state = state_of(
        *interrupted(interrupt("int-1")),
        run_started(RUN_2),
        run_error(),
        run_started("run-3"),
        run_error(),
        run_error("an attempt that never started"),
    )
    assert [i.id for i in state.interrupts] == ["int-1"]
    assert (state.status, state.interrupts_run_id) == (RunStatus.FAILED, RUN_1)


def test_a_late_run_error_after_a_continuation_closed_keeps_its_own_rule():
    state, outcomes = replay(
        [
            *interrupted(interrupt("int-1")),
            run_started(RUN_2),
            run_finished(RUN_2),
            run_error(),
        ]
    )
    assert state is not None
    assert outcomes[-1].change is Change.FAILED_LATE
    assert (state.status, state.failed_late, state.interrupts) == (RunStatus.FAILED, True, ())


def test_a_run_that_failed_before_closing_leaves_nothing_open():
    state, outcomes = replay([run_started(), text_start(), run_error()])
    assert state is not None
    assert outcomes[-1].change is Change.FAILED
    assert (state.status, state.interrupts, state.failed_late) == (RunStatus.FAILED, (), False)
    assert warnings_of(outcomes) == []


def test_a_stream_may_open_with_run_error():
    state, outcomes = replay([run_error()])
    assert state is not None
    assert state.status is RunStatus.FAILED
    assert violations(outcomes) == []


def test_late_run_error_fails_the_run_but_its_interrupts_stay_open():
    state, outcomes = replay([*interrupted(interrupt("int-1"), interrupt("int-2")), run_error()])
    assert state is not None
    last = outcomes[-1]
    assert last.change is Change.FAILED_LATE
    assert [w.code for w in last.warnings] == [str(Warn.LATE_RUN_ERROR)]
    assert "2 delivered interrupt(s) stay open" in last.warnings[0].detail
    assert violations(outcomes) == []  # the spec admits one late RUN_ERROR
    assert state.status is RunStatus.FAILED
    assert state.failed_late is True
    assert [i.id for i in state.interrupts] == ["int-1", "int-2"]
    assert_well_defined(state)


def test_late_run_error_after_success_marks_the_run_failed():
    state, outcomes = replay([run_started(), run_finished(), run_error()])
    assert state is not None
    assert (state.status, state.failed_late, state.interrupts) == (RunStatus.FAILED, True, ())
    assert warnings_of(outcomes) == [(str(Warn.LATE_RUN_ERROR), None)]


def test_a_further_run_error_after_a_late_one_drops_no_interrupt():
    state = state_of(*interrupted(interrupt("int-1")), run_error(), run_error("again"))
    assert state.status is RunStatus.FAILED
    assert [i.id for i in state.interrupts] == ["int-1"]


def test_a_new_run_after_a_late_run_error_clears_the_failure():
    state = state_of(*interrupted(interrupt("int-1")), run_error(), run_started(RUN_2))
    assert (state.status, state.failed_late) == (RunStatus.ACTIVE, False)
    assert [i.id for i in state.held_interrupts] == ["int-1"]  # held by the continuation


# --- NOTES.md "Runs on a stream": unknown outcome, malformed RUN_FINISHED --------------------


@pytest.mark.parametrize("outcome_type", ["suspended-v2", "", "SUCCESS"])
def test_an_unknown_outcome_reads_as_success_with_a_warning(outcome_type):
    outcome = {"type": outcome_type, "interrupts": [interrupt()]}
    state, outcomes = replay([run_started(), run_finished(outcome=outcome)])
    assert state is not None
    assert (state.status, state.outcome, state.interrupts) == (RunStatus.SUCCEEDED, "success", ())
    assert outcomes[-1].change is Change.CLOSED
    [warning] = outcomes[-1].warnings
    assert warning.code == str(Warn.UNKNOWN_MEMBER_STRIPPED)
    assert warning.path == "/outcome"
    assert "reads as success" in warning.detail


@pytest.mark.parametrize(
    ("finished", "path"),
    [
        (run_finished(interrupts=[{"id": "int-1"}]), "/outcome/interrupts/0/reason"),
        (run_finished(interrupts=[interrupt(responseSchema=True)]), None),
        (run_finished(interrupts=[interrupt(expiresAt=1234)]), None),
        (run_finished(runId=7), "/runId"),
        (run_finished(outcome="success"), "/outcome"),
        ({"type": "RUN_FINISHED", "runId": RUN_1}, "/threadId"),
    ],
)
def test_a_malformed_run_finished_fails_the_run(finished, path):
    state, outcomes = replay([run_started(), finished])
    assert state is not None
    assert state.status is RunStatus.FAILED
    assert state.interrupts == ()
    assert state.closed_at_ms is not None
    assert outcomes[-1].change is Change.FAILED
    assert violations(outcomes) == [str(Rule.MALFORMED_EVENT)]
    [warning] = outcomes[-1].warnings
    assert warning.path is not None
    if path is not None:
        assert warning.path == path
    assert_well_defined(state)


def test_a_malformed_run_error_still_fails_the_run():
    state, outcomes = replay([run_started(), {"type": "RUN_ERROR", "message": 5}])
    assert state is not None
    assert state.status is RunStatus.FAILED
    assert violations(outcomes) == [str(Rule.MALFORMED_EVENT)]


def test_a_malformed_run_started_still_starts_a_run():
    state, outcomes = replay([run_started(runId=3)])
    assert state is not None
    assert (state.status, state.run_id) == (RunStatus.ACTIVE, None)
    assert violations(outcomes) == [str(Rule.MALFORMED_EVENT)]


# --- protocol violations: one scenario per rule ----------------------------------------------

SCENARIOS: dict[str, tuple[list[object], RunStatus, int]] = {
    # rule: (events, status afterwards, index of the event that is flagged)
    Rule.FIRST_EVENT: ([text_start(), run_finished()], RunStatus.SUCCEEDED, 0),
    Rule.NESTED_RUN_STARTED: (
        [run_started(), run_started(RUN_2), run_finished()],
        RunStatus.SUCCEEDED,
        1,
    ),
    Rule.EVENT_AFTER_CLOSE: ([run_started(), run_finished(), text_start()], RunStatus.SUCCEEDED, 2),
    Rule.RUN_ID_MISMATCH: ([run_started(), run_finished(RUN_2)], RunStatus.SUCCEEDED, 1),
    Rule.THREAD_ID_MISMATCH: (
        [run_started(thread_id="other"), run_finished()],
        RunStatus.SUCCEEDED,
        0,
    ),
    Rule.EMPTY_INTERRUPT_OUTCOME: (
        [run_started(), run_finished(interrupts=[])],
        RunStatus.FAILED,
        1,
    ),
    Rule.DUPLICATE_INTERRUPT_ID: (
        [run_started(), run_finished(interrupts=[interrupt("a"), interrupt("a", "other")])],
        RunStatus.INTERRUPTED,
        1,
    ),
    Rule.MALFORMED_EVENT: ([run_started(), ["not", "an", "object"]], RunStatus.ACTIVE, 1),
    Rule.SUBAGENT_NOT_STARTED: ([run_started(), subagent_finished("sub-9")], RunStatus.ACTIVE, 1),
    Rule.SUBAGENT_ALREADY_STARTED: (
        [run_started(), subagent_started("sub-1"), subagent_started("sub-1")],
        RunStatus.ACTIVE,
        2,
    ),
    # bounds on what a thread accumulates (gateway.core.values.thread)
    Rule.ID_TOO_LONG: (
        [run_started(), run_finished(interrupts=[interrupt("i" * (MAX_ID_BYTES + 1))])],
        RunStatus.FAILED,
        1,
    ),
    Rule.TOO_MANY_INTERRUPTS: (
        [
            run_started(),
            run_finished(
                interrupts=[interrupt(f"i{n}") for n in range(MAX_INTERRUPTS_PER_RUN + 1)]
            ),
        ],
        RunStatus.FAILED,
        1,
    ),
    Rule.INTERRUPT_CONTENT_TOO_LARGE: (
        [
            run_started(),
            run_finished(interrupts=[interrupt(metadata={"x": "m" * MAX_INTERRUPT_CONTENT_BYTES})]),
        ],
        RunStatus.INTERRUPTED,
        1,
    ),
    Rule.TOO_MANY_SUBAGENTS: (
        [run_started(), *(subagent_started(f"s{n}") for n in range(MAX_OPEN_SUBAGENTS + 1))],
        RunStatus.ACTIVE,
        MAX_OPEN_SUBAGENTS + 1,
    ),
    Rule.TOO_MANY_SUSPENDED: (
        [
            run_started(),
            *(
                event
                for n in range(MAX_SUSPENDED + 1)
                for event in (
                    subagent_started(f"s{n}"),
                    subagent_finished(f"s{n}", {"type": "suspended", "interruptIds": []}),
                )
            ),
        ],
        RunStatus.ACTIVE,
        2 * (MAX_SUSPENDED + 1),
    ),
    Rule.SUSPENSION_TOO_LARGE: (
        [
            run_started(),
            subagent_started("s"),
            subagent_finished(
                "s",
                {
                    "type": "suspended",
                    "interruptIds": [f"i{n}" for n in range(MAX_IDS_PER_SUSPENSION + 1)],
                },
            ),
        ],
        RunStatus.ACTIVE,
        2,
    ),
}


@pytest.mark.parametrize("rule", list(SCENARIOS), ids=str)
def test_each_lifecycle_rule_is_flagged_and_the_state_stays_well_defined(rule):
    events, status, flagged = SCENARIOS[rule]
    state, outcomes = replay(events)
    for index, outcome in enumerate(outcomes):
        rules = [w.rule for w in outcome.warnings if w.code == VIOLATION]
        assert rules == ([str(rule)] if index == flagged else []), (index, rules)
    flagged_warning = next(w for w in outcomes[flagged].warnings if w.code == VIOLATION)
    assert flagged_warning.detail
    assert state is not None
    assert state.status is status
    assert_well_defined(state)


def test_every_rule_the_lifecycle_raises_has_a_scenario():
    modules = (lifecycle_module, runs, interrupts, subagents, step)
    source = "".join(Path(m.__file__).read_text() for m in modules)  # type: ignore[arg-type]
    used = {Rule[name] for name in re.findall(r"Rule\.([A-Z_]+)", source)}
    assert used, "no Rule referenced in the lifecycle's modules?"
    assert used <= set(SCENARIOS)


def test_first_event_stream_event_opens_a_run_of_unknown_id():
    state, outcomes = replay([text_start()])
    assert state is not None
    assert (state.status, state.run_id) == (RunStatus.ACTIVE, None)
    assert outcomes[0].change is Change.STARTED
    assert violations(outcomes) == [str(Rule.FIRST_EVENT)]


def test_first_event_run_finished_records_its_interrupts():
    state, outcomes = replay([run_finished(interrupts=[interrupt("int-1")])])
    assert state is not None
    assert violations(outcomes) == [str(Rule.FIRST_EVENT)]
    assert state.status is RunStatus.INTERRUPTED
    assert [i.id for i in state.interrupts] == ["int-1"]


def test_first_event_subagent_started_opens_the_run_and_the_invocation():
    state, outcomes = replay([subagent_started("sub-1")])
    assert state is not None
    assert violations(outcomes) == [str(Rule.FIRST_EVENT)]
    assert state.status is RunStatus.ACTIVE
    assert state.open_subagents == ("sub-1",)


def test_nested_run_started_is_ignored():
    state = state_of(run_started(), run_started(RUN_2))
    assert (state.status, state.run_id) == (RunStatus.ACTIVE, RUN_1)


def test_run_id_mismatch_closes_the_active_run():
    state = state_of(run_started(), run_finished(RUN_2, interrupts=[interrupt()]))
    assert state.run_id == RUN_1
    assert state.status is RunStatus.INTERRUPTED


@pytest.mark.parametrize(
    "late",
    [
        text_start(),
        run_finished(),
        run_finished(interrupts=[interrupt("sneaky")]),
        subagent_started("sub-1"),
        subagent_finished("sub-1"),
        subagent_error("sub-1"),
    ],
    ids=lambda e: e["type"],
)
def test_events_after_close_are_ignored(late):
    closed = state_of(*interrupted(interrupt("int-1")))
    outcome = apply_event(closed, THREAD, late, at_ms=1)
    assert [(w.code, w.rule) for w in outcome.warnings] == [
        (VIOLATION, str(Rule.EVENT_AFTER_CLOSE))
    ]
    assert outcome.change is Change.NONE
    assert outcome.state == closed


def test_duplicate_interrupt_ids_keep_the_first():
    state, outcomes = replay(
        [
            run_started(),
            run_finished(interrupts=[interrupt("a", "first"), interrupt("b"), interrupt("a")]),
        ]
    )
    assert state is not None
    assert [(i.id, i.reason) for i in state.interrupts] == [("a", "first"), ("b", "tool_call")]
    [warning] = outcomes[-1].warnings
    assert warning.interrupt_id == "a"
    assert warning.path == "/outcome/interrupts/2/id"


@pytest.mark.parametrize("interrupts", [[], None])
def test_an_interrupt_outcome_with_nothing_to_answer_fails_the_run(interrupts):
    outcome = {"type": "interrupt"}
    if interrupts is not None:
        outcome["interrupts"] = interrupts
    state, outcomes = replay([run_started(), run_finished(outcome=outcome)])
    assert state is not None
    assert state.status is RunStatus.FAILED
    assert outcomes[-1].change is Change.FAILED
    assert violations(outcomes) == [str(Rule.EMPTY_INTERRUPT_OUTCOME)]
    assert outcomes[-1].warnings[0].path == "/outcome/interrupts"


def test_thread_id_mismatch_is_flagged_but_the_event_is_applied():
    state, outcomes = replay([run_started(), run_finished(thread_id="elsewhere")])
    assert state is not None
    assert state.status is RunStatus.SUCCEEDED
    assert state.thread_id == THREAD
    [warning] = outcomes[-1].warnings
    assert (warning.rule, warning.path) == (str(Rule.THREAD_ID_MISMATCH), "/threadId")


# --- events that are not lifecycle events ----------------------------------------------------


@pytest.mark.parametrize("event", [None, 3, "RUN_STARTED", [run_started()], True])
def test_a_non_object_event_is_a_malformed_event(event):
    state = state_of(run_started())
    outcome = apply_event(state, THREAD, event, at_ms=1)
    assert outcome.state is state
    assert outcome.change is Change.NONE
    assert [(w.code, w.rule) for w in outcome.warnings] == [(VIOLATION, str(Rule.MALFORMED_EVENT))]


@pytest.mark.parametrize("event", [{}, {"type": 5}, {"type": None}, {"type": ["RUN_STARTED"]}])
def test_an_untyped_event_is_a_malformed_event(event):
    outcome = apply_event(None, THREAD, event, at_ms=1)
    assert outcome.state is None
    assert outcome.kind is EventKind.UNTYPED
    [warning] = outcome.warnings
    assert (warning.code, warning.rule, warning.path) == (
        VIOLATION,
        str(Rule.MALFORMED_EVENT),
        "/type",
    )


def test_an_unknown_event_type_is_dropped_with_a_warning_naming_it():
    state = state_of(*interrupted(interrupt("int-1")))
    outcome = apply_event(state, THREAD, {"type": "HOLOGRAM_PROJECTED", "x": 1}, at_ms=1)
    assert outcome.state is state
    assert outcome.kind is EventKind.UNKNOWN
    [warning] = outcome.warnings
    assert warning.code == str(Warn.UNKNOWN_EVENT_TYPE)
    assert warning.path == "/type"
    assert "HOLOGRAM_PROJECTED" in warning.detail


def test_events_that_teach_nothing_about_an_unknown_thread_leave_it_unknown():
    for event in ({"type": "HOLOGRAM"}, {"type": 1}, 42):
        assert apply_event(None, THREAD, event, at_ms=1).state is None


# --- subagents -------------------------------------------------------------------------------


def test_subagent_invocations_are_tracked_while_the_run_is_active():
    state = state_of(run_started(), subagent_started("sub-1"), subagent_started("sub-2"))
    assert state.open_subagents == ("sub-1", "sub-2")
    state = state_of(
        run_started(), subagent_started("sub-1"), subagent_started("sub-2"), subagent_error("sub-1")
    )
    assert state.open_subagents == ("sub-2",)


def test_a_suspended_subagent_is_tracked_in_state_suspended():
    suspended = {"type": "suspended", "interruptIds": ["int-sub"]}
    state, outcomes = replay(
        [
            run_started(),
            subagent_started("sub-1"),
            subagent_finished("sub-1", suspended),
            run_finished(interrupts=[interrupt("int-sub", subagentRunId="sub-1")]),
        ]
    )
    assert state is not None
    assert outcomes[2].change is Change.SUBAGENT
    assert state.open_subagents == ()
    assert [(s.subagent_run_id, s.interrupt_ids) for s in state.suspended] == [
        ("sub-1", ("int-sub",))
    ]
    assert [(i.id, i.subagent_run_id) for i in state.interrupts] == [("int-sub", "sub-1")]
    assert warnings_of(outcomes) == []
    assert_well_defined(state)


def test_an_unknown_subagent_outcome_is_stripped_and_the_invocation_closes():
    state, outcomes = replay(
        [
            run_started(),
            subagent_started("sub-1"),
            subagent_finished("sub-1", {"type": "handed_off", "interruptIds": ["x"]}),
        ]
    )
    assert state is not None
    assert (state.open_subagents, state.suspended) == ((), ())
    [warning] = outcomes[-1].warnings
    assert (warning.code, warning.path) == (str(Warn.UNKNOWN_MEMBER_STRIPPED), "/outcome")


@pytest.mark.parametrize("outcome_type", [5, None])
def test_a_subagent_outcome_type_that_is_not_a_string_is_malformed(outcome_type):
    state, outcomes = replay(
        [
            run_started(),
            subagent_started("sub-1"),
            subagent_finished("sub-1", {"type": outcome_type}),
        ]
    )
    assert state is not None and state.open_subagents == ("sub-1",)
    assert violations(outcomes) == [str(Rule.MALFORMED_EVENT)]


def test_a_suspended_subagent_without_interrupt_ids_is_tracked_with_none():
    state = state_of(
        run_started(), subagent_started("sub-1"), subagent_finished("sub-1", {"type": "suspended"})
    )
    assert [(s.subagent_run_id, s.interrupt_ids) for s in state.suspended] == [("sub-1", ())]


def test_a_suspended_invocation_is_continued_in_a_later_run():
    suspended = {"type": "suspended", "interruptIds": ["int-sub"]}
    events = [
        run_started(),
        subagent_started("sub-1"),
        subagent_finished("sub-1", suspended),
        run_finished(interrupts=[interrupt("int-sub", subagentRunId="sub-1")]),
        run_started(RUN_2),
    ]
    state = state_of(*events)
    assert [s.subagent_run_id for s in state.suspended] == ["sub-1"]  # survives the new run
    state, outcomes = replay([subagent_finished("sub-1")], state=state)
    assert state is not None
    assert state.suspended == ()
    assert violations(outcomes) == []  # finishing a suspended invocation is no violation


@pytest.mark.parametrize("outcome", [[], "suspended", {"type": "suspended", "interruptIds": ["x"]}])
def test_an_outcome_on_subagent_error_is_not_a_suspension(outcome):
    error = {**subagent_error("sub-1"), "outcome": outcome}
    state, outcomes = replay([run_started(), subagent_started("sub-1"), error])
    assert state is not None
    assert state.open_subagents == ()
    assert state.suspended == ()
    assert violations(outcomes) == []


def test_run_error_ends_every_open_invocation():
    state = state_of(run_started(), subagent_started("sub-1"), run_error())
    assert state.open_subagents == ()
    assert state.status is RunStatus.FAILED


def test_every_status_has_a_step_for_every_event_kind():
    stateful = [k for k in EventKind if k not in (EventKind.UNKNOWN, EventKind.UNTYPED)]
    for status in RunStatus:
        assert set(lifecycle_module.TRANSITIONS[status]) == set(stateful), status


@pytest.mark.parametrize("outcome_type", [5, None, [], {"nested": 1}])
def test_an_outcome_type_that_is_not_a_string_is_malformed_and_fails_the_run(outcome_type):
    outcome = {"type": outcome_type, "interrupts": [interrupt()]}
    state, outcomes = replay([run_started(), run_finished(outcome=outcome)])
    assert state is not None
    assert (state.status, state.interrupts) == (RunStatus.FAILED, ())
    assert violations(outcomes) == [str(Rule.MALFORMED_EVENT)]


def test_an_outcome_without_a_type_is_malformed_and_fails_the_run():
    outcome = {"interrupts": [interrupt()]}
    state, outcomes = replay([run_started(), run_finished(outcome=outcome)])
    assert state is not None and state.status is RunStatus.FAILED
    assert violations(outcomes) == [str(Rule.MALFORMED_EVENT)]


@pytest.mark.parametrize("kind", ["success", "cancelled"])
def test_a_closed_outcome_carrying_interrupts_is_malformed_and_fails_the_run(kind):
    from gateway.core import apply_event

    state = apply_event(None, "t", {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}, 1).state
    out = apply_event(
        state,
        "t",
        {
            "type": "RUN_FINISHED",
            "threadId": "t",
            "runId": "r",
            "outcome": {"type": kind, "interrupts": [{"id": "a", "reason": "tool_call"}]},
        },
        2,
    )
    assert out.state.status == "failed" and out.state.interrupts == ()
    assert [(w.code, w.rule, w.path) for w in out.warnings] == [
        ("protocol_violation", "malformed_event", "/outcome/interrupts")
    ]


def test_unknown_members_of_lifecycle_events_are_warned_about_by_path():
    state, outcomes = replay(
        [
            run_started(custom=1, timestamp=5, rawEvent={"anything": 1}),
            run_finished(interrupts=[interrupt("int-1", priority="high")], extra_member=True),
        ]
    )
    assert state is not None and [i.id for i in state.interrupts] == ["int-1"]
    found = [(w.code, w.path) for o in outcomes for w in o.warnings]
    assert found == [
        (str(Warn.UNKNOWN_MEMBER_STRIPPED), "/custom"),
        (str(Warn.UNKNOWN_MEMBER_STRIPPED), "/extra_member"),
        (str(Warn.UNKNOWN_MEMBER_STRIPPED), "/outcome/interrupts/0/priority"),
    ]
    assert "ignored" in outcomes[0].warnings[0].detail


def test_known_members_and_open_objects_raise_no_unknown_member_warning():
    metadata = {"anything": {"deeper": 1}}
    state, outcomes = replay(
        [
            run_started(parentRunId="p", timestamp=1),
            run_finished(
                interrupts=[interrupt("int-1", metadata=metadata, responseSchema={"x": 1})]
            ),
        ]
    )
    assert state is not None
    assert [w for o in outcomes for w in o.warnings] == []


def test_run_started_after_a_stray_first_event_names_the_run_once_flagged():
    stray = {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}
    state, outcomes = replay([stray, run_started(), run_finished(interrupts=[interrupt()])])
    assert state is not None
    assert (state.status, state.run_id) == (RunStatus.INTERRUPTED, RUN_1)
    assert violations(outcomes) == [str(Rule.FIRST_EVENT)]
    assert "TEXT_MESSAGE_START" in outcomes[0].warnings[0].detail


# --- G: no finding's text may raise, nothing reaches stderr ----------------------------------


def deep(depth: int, kind: type = list, leaf: object = "x") -> object:
    value = leaf
    for _ in range(depth):
        value = [value] if kind is list else {"type": value}
    return value


def test_a_nested_run_started_with_a_deeply_nested_run_id_is_flagged_not_raised():
    """Issue reproduction: formatting runId into the warning raised RecursionError."""
    state, outcomes = replay([run_started(), run_started(deep(1_000))])
    assert state is not None and state.run_id == RUN_1
    [warning] = outcomes[-1].warnings
    assert warning.rule == str(Rule.NESTED_RUN_STARTED)
    assert len(warning.detail) < 400 and "[[[[" in warning.detail


@pytest.mark.parametrize("kind", [list, dict])
@pytest.mark.parametrize(
    "event",
    [
        lambda tag: run_finished(outcome={"type": tag}),
        lambda tag: run_finished(outcome={"type": tag, "interrupts": [interrupt()]}),
        lambda tag: subagent_finished("sub-1", {"type": tag}),
    ],
    ids=["run_finished", "run_finished_with_interrupts", "subagent_finished"],
)
def test_an_outcome_type_nested_1000_deep_is_malformed_and_nothing_reaches_stderr(
    event, kind, capfd
):
    """Issue reproduction: pydantic-core printed `Exception ignored ... RecursionError`."""
    capfd.readouterr()
    state, outcomes = replay([run_started(), subagent_started("sub-1"), event(deep(1_000, kind))])
    assert capfd.readouterr() == ("", "")
    assert violations(outcomes) == [str(Rule.MALFORMED_EVENT)]
    assert outcomes[-1].warnings[0].path == "/outcome/type"
    assert len(outcomes[-1].warnings[0].detail) < 400
    assert_well_defined(state)


@pytest.mark.parametrize(
    "member",
    ["threadId", "runId", "message", "code", "subagentRunId", "name", "outcome", "extra"],
)
@pytest.mark.parametrize(
    "event_type",
    ["RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "SUBAGENT_STARTED", "SUBAGENT_FINISHED"],
)
def test_a_member_nested_1000_deep_in_any_lifecycle_event_raises_nothing(event_type, member, capfd):
    base = {
        "RUN_STARTED": run_started(RUN_2),
        "RUN_FINISHED": run_finished(),
        "RUN_ERROR": run_error(),
        "SUBAGENT_STARTED": subagent_started("sub-2"),
        "SUBAGENT_FINISHED": subagent_finished("sub-1"),
    }[event_type]
    capfd.readouterr()
    for kind in (list, dict):
        event = {**base, member: deep(1_000, kind)}
        state, outcomes = replay([run_started(), subagent_started("sub-1"), event])
        assert_well_defined(state)
        assert all(len(w.detail) < 1_000 for o in outcomes for w in o.warnings)
    assert capfd.readouterr() == ("", "")
