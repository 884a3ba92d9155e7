"""Tool names for the approver policy: the active run remembers its tool calls' names
(TOOL_CALL_START), bounded, and its interrupting RUN_FINISHED gives each interrupt naming
one its tool name; a rule by `tool` then governs it (gateway.core.events.toolcalls)."""

from __future__ import annotations

import time

from gateway.codec import changelog
from gateway.core import Caller, Identity, Policy, Reason, RunStatus, Verdict, apply_event, judge
from gateway.core.values.approvers import ApproverRule, rule_for
from gateway.core.values.thread import (
    MAX_ID_BYTES,
    MAX_TOOL_CALLS_PER_RUN,
    MAX_TOOL_NAME_BYTES,
)
from tests.core.factories import (
    NOW_MS,
    THREAD,
    codes,
    entry,
    interrupt,
    replay,
    run_error,
    run_finished,
    run_input,
    run_started,
    state_of,
)


def tool_start(call_id: str, name: str, **extra: object) -> dict[str, object]:
    return {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name, **extra}


def two_tools_interrupted():
    """A run that called `transfer` and `lookup`, each interrupting, and a third
    interrupt naming no tool call."""
    return state_of(
        run_started(),
        tool_start("call-1", "transfer"),
        {"type": "TOOL_CALL_ARGS", "toolCallId": "call-1", "delta": "{}"},
        tool_start("call-2", "lookup"),
        run_finished(
            interrupts=[
                interrupt("int-1", "tool_call", toolCallId="call-1"),
                interrupt("int-2", "tool_call", toolCallId="call-2"),
                interrupt("int-3", "tool_call"),
            ]
        ),
    )


# --- the core remembers the names -------------------------------------------------------------


def test_an_active_run_remembers_its_tool_calls_and_its_interrupts_get_their_names():
    active = state_of(run_started(), tool_start("call-1", "transfer"), tool_start("c2", "lookup"))
    assert active.status is RunStatus.ACTIVE
    assert active.tool_calls == (("call-1", "transfer"), ("c2", "lookup"))
    closed = two_tools_interrupted()
    assert [(i.id, i.tool_name) for i in closed.interrupts] == [
        ("int-1", "transfer"),
        ("int-2", "lookup"),
        ("int-3", None),
    ]
    assert closed.tool_calls == ()  # the run's map goes with the run


def test_a_tool_call_is_neither_a_warning_nor_a_change_nor_activity():
    state, outcomes = replay([run_started(), tool_start("call-1", "transfer")])
    assert state is not None and state.tool_calls == (("call-1", "transfer"),)
    assert outcomes[1].warnings == () and outcomes[1].change.value == "none"
    assert state.updated_ms == outcomes[0].state.updated_ms  # type: ignore[union-attr]


def test_the_map_is_dropped_by_every_close_and_not_carried_to_the_next_run():
    for end in (run_finished(), run_error(), run_finished(outcome={"type": "cancelled"})):
        state = state_of(run_started(), tool_start("call-1", "transfer"), end)
        assert state.tool_calls == ()
    # a later run with an interrupt naming the earlier run's call: no name
    state = state_of(
        run_started(),
        tool_start("call-1", "transfer"),
        run_finished(),
        run_started("run-2"),
        run_finished("run-2", interrupts=[interrupt("int-1", toolCallId="call-1")]),
    )
    assert state.interrupts[0].tool_name is None


def test_malformed_or_over_long_tool_calls_are_not_remembered():
    state = state_of(
        run_started(),
        {"type": "TOOL_CALL_START", "toolCallId": "no-name"},
        {"type": "TOOL_CALL_START", "toolCallId": 5, "toolCallName": "x"},
        tool_start("long-name", "n" * (MAX_TOOL_NAME_BYTES + 1)),
        tool_start("i" * (MAX_ID_BYTES + 1), "x"),
        tool_start("ok", "é" * (MAX_TOOL_NAME_BYTES // 2)),  # exactly the bound in UTF-8
    )
    assert state.tool_calls == (("ok", "é" * (MAX_TOOL_NAME_BYTES // 2)),)


def test_an_id_started_again_takes_its_latest_name():
    state = state_of(
        run_started(), tool_start("c", "first"), tool_start("d", "x"), tool_start("c", "second")
    )
    assert state.tool_calls == (("d", "x"), ("c", "second"))


def test_only_the_most_recent_calls_are_remembered_older_ones_have_no_name():
    for count in (
        1,
        MAX_TOOL_CALLS_PER_RUN // 2,
        MAX_TOOL_CALLS_PER_RUN,
        3 * MAX_TOOL_CALLS_PER_RUN,
    ):
        active = state_of(run_started(), *(tool_start(f"c{n}", "t") for n in range(count)))
        kept = [f"c{n}" for n in range(max(0, count - MAX_TOOL_CALLS_PER_RUN), count)]
        assert [call for call, _ in active.tool_calls] == kept
    calls = [tool_start(f"call-{n}", f"tool-{n}") for n in range(MAX_TOOL_CALLS_PER_RUN + 10)]
    state = state_of(
        run_started(),
        *calls,
        run_finished(
            interrupts=[
                interrupt("old", toolCallId="call-0"),
                interrupt("new", toolCallId=f"call-{MAX_TOOL_CALLS_PER_RUN + 9}"),
            ]
        ),
    )
    assert {i.id: i.tool_name for i in state.interrupts} == {
        "old": None,
        "new": f"tool-{MAX_TOOL_CALLS_PER_RUN + 9}",
    }


def test_a_stray_first_tool_call_opens_a_run_that_keeps_it():
    state, outcomes = replay(
        [
            tool_start("call-1", "transfer"),
            run_started(),
            run_finished(interrupts=[interrupt("int-1", toolCallId="call-1")]),
        ]
    )
    assert outcomes[0].warnings[0].rule == "first_event"
    assert state is not None and state.interrupts[0].tool_name == "transfer"


def test_a_tool_call_after_the_run_closed_is_flagged_and_not_remembered():
    closed = state_of(run_started(), run_finished())
    outcome = apply_event(closed, THREAD, tool_start("c", "x"), NOW_MS)
    assert [w.rule for w in outcome.warnings] == ["event_after_close"]
    assert outcome.state is not None and outcome.state.tool_calls == ()


def test_a_failed_continuation_reopens_the_interrupts_with_their_names():
    state = state_of(
        *two_tools_interrupted_events(),
        run_started("run-2"),
        tool_start("c9", "other"),
        run_error(),
    )
    assert [i.tool_name for i in state.interrupts] == ["transfer", "lookup", None]
    assert state.tool_calls == ()


def two_tools_interrupted_events():
    return [
        run_started(),
        tool_start("call-1", "transfer"),
        tool_start("call-2", "lookup"),
        run_finished(
            interrupts=[
                interrupt("int-1", "tool_call", toolCallId="call-1"),
                interrupt("int-2", "tool_call", toolCallId="call-2"),
                interrupt("int-3", "tool_call"),
            ]
        ),
    ]


def test_a_hundred_thousand_tool_calls_stay_bounded_in_memory_and_time():
    """A hostile run: 100,000 TOOL_CALL_STARTs with ids and names at their bounds. The
    state holds 64 calls whatever the count, and each event costs the same at the end
    as at the start (no growth with the count)."""
    state = apply_event(None, THREAD, run_started(), 1).state
    long_id = "i" * (MAX_ID_BYTES - 8)
    long_name = "n" * MAX_TOOL_NAME_BYTES
    laps = []
    for lap in range(10):
        began = time.process_time()
        for n in range(lap * 10_000, (lap + 1) * 10_000):
            state = apply_event(state, THREAD, tool_start(f"{long_id}{n:08d}", long_name), 2).state
        laps.append(time.process_time() - began)
    assert state is not None and len(state.tool_calls) == MAX_TOOL_CALLS_PER_RUN
    assert state.tool_calls[-1][0] == f"{long_id}{99_999:08d}"
    value = changelog.encode(state)
    assert len(value) < MAX_TOOL_CALLS_PER_RUN * (MAX_ID_BYTES + MAX_TOOL_NAME_BYTES + 8) + 100
    assert max(laps[-3:]) < 3 * max(laps[:3]) + 0.05, laps
    assert sum(laps) < 30, laps  # about 1-2 s here; generous for a loaded machine


# --- the policy by tool name ------------------------------------------------------------------

ALICE = Identity("alice", ("treasury",))
BOB = Identity("bob", ("support",))
TRANSFER = ApproverRule(agent="billing", tool="transfer", answer_groups=("treasury",))


def judged(rules: tuple[ApproverRule, ...], who: Identity | None, raw: dict | None = None):
    raw = raw or run_input(
        [entry("int-1", payload="x"), entry("int-2", payload="x"), entry("int-3", payload="x")]
    )
    decision, _ = judge(
        two_tools_interrupted(),
        raw,
        NOW_MS,
        Policy(approvers=rules),
        THREAD,
        caller=Caller(who, agent="billing"),
    )
    return decision


def test_a_rule_by_tool_name_governs_only_that_tool_s_interrupts():
    allowed = judged((TRANSFER,), ALICE)
    assert allowed.verdict is Verdict.FORWARD
    assert {a.interrupt_id: a.tool_name for a in allowed.answers} == {
        "int-1": "transfer",
        "int-2": "lookup",
        "int-3": None,
    }
    refused = judged((TRANSFER,), BOB)
    assert codes(refused.reasons) == [Reason.APPROVER_NOT_ALLOWED]
    [reason] = refused.reasons
    assert reason.interrupt_id == "int-1" and "tool 'transfer'" in reason.detail
    # the lookup and the tool-less interrupts are anyone's, even unattested
    unattested = judged((TRANSFER,), None)
    assert codes(unattested.reasons) == [Reason.APPROVER_UNVERIFIED]
    assert unattested.reasons[0].interrupt_id == "int-1"


def test_a_named_tool_never_matches_an_interrupt_with_no_tool_name():
    rule = ApproverRule(tool="transfer", answer_subjects=("alice",))
    assert rule.applies("billing", None, "tool_call", None) is None
    assert rule.applies("billing", None, "tool_call", "lookup") is None
    assert rule.applies("billing", None, "tool_call", "transfer") is not None
    assert ApproverRule().applies("billing", None, "tool_call", None) == 0


def test_specificity_is_agent_then_tool_then_reason():
    any_tool = ApproverRule(tool="transfer", answer_subjects=("t",))
    any_tool_reason = ApproverRule(tool="transfer", reason="payment", answer_subjects=("tr",))
    agent_reason = ApproverRule(agent="billing", reason="payment", answer_subjects=("ar",))
    agent_tool = ApproverRule(agent="billing", tool="transfer", answer_subjects=("at",))
    group_tool = ApproverRule(agent="finance", tool="transfer", answer_subjects=("gt",))
    rules = (any_tool, any_tool_reason, agent_reason, agent_tool, group_tool)
    # the agent's own rules first; among them a named tool over a named reason
    assert rule_for(rules, "billing", "finance", "payment", "transfer") is agent_tool
    assert rule_for(rules, "billing", "finance", "payment", "lookup") is agent_reason
    assert rule_for(rules, "billing", "finance", "payment", None) is agent_reason
    # a group's rule naming the tool over any agent's rule naming the tool and reason
    assert rule_for(rules, "ledger", "finance", "payment", "transfer") is group_tool
    # among any agent's rules: tool and reason over tool alone
    assert rule_for(rules, "solo", None, "payment", "transfer") is any_tool_reason
    assert rule_for(rules, "solo", None, "other", "transfer") is any_tool
    assert rule_for(rules, "solo", None, "other", None) is None
    # the judge follows it: Bob is named by the agent's reason rule, not its tool rule
    bob_pays = (ApproverRule(agent="billing", reason="tool_call", answer_subjects=("bob",)),)
    decision = judged((*bob_pays, TRANSFER), BOB)
    assert codes(decision.reasons) == [Reason.APPROVER_NOT_ALLOWED]
    assert decision.reasons[0].interrupt_id == "int-1"
    assert judged(bob_pays, BOB).verdict is Verdict.FORWARD


def test_settings_accept_a_tool_and_default_to_any():
    from gateway.settings import ApproverSetting

    assert ApproverSetting(agent="billing", tool="transfer").rule().tool == "transfer"
    assert ApproverSetting(agent="billing").rule().tool == "*"
