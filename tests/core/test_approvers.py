"""The approver policy in the judge: who may answer or abandon which interrupts
(gateway.core.values.approvers), and the codes approver_not_allowed and
approver_unverified, one per offending interrupt, with the request's other problems."""

from __future__ import annotations

import pytest

from gateway.core import Caller, Identity, Policy, Reason, ThreadState, Verdict, Warn, judge
from gateway.core.values.approvers import Allowed, ApproverRule, rule_for
from tests.core.factories import (
    NOW_MS,
    THREAD,
    codes,
    entry,
    interrupt,
    interrupted,
    run_input,
    state_of,
)

ALICE = Identity("alice", ("payments-approvers",), issuer="https://idp.example")
BOB = Identity("bob", ("support",), issuer="https://idp.example")
PAYMENTS = ApproverRule(agent="billing", reason="payment", answer_groups=("payments-approvers",))


def two_open() -> ThreadState:
    return state_of(
        *interrupted(interrupt("int-1", "payment"), interrupt("int-2", "input_required"))
    )


def both_answered() -> dict:
    return run_input([entry("int-1", payload={"ok": True}), entry("int-2", payload="x")])


def judged(policy: Policy, caller: Caller, raw: dict | None = None):
    decision, _ = judge(two_open(), raw or both_answered(), NOW_MS, policy, THREAD, caller=caller)
    return decision


def test_without_rules_anyone_answers_as_before():
    for caller in (Caller(), Caller(agent="billing"), Caller(BOB, agent="billing")):
        assert judged(Policy(), caller).verdict is Verdict.FORWARD


def test_an_allowed_group_member_is_forwarded_and_the_decision_names_them():
    decision = judged(Policy(approvers=(PAYMENTS,)), Caller(ALICE, agent="billing"))
    assert decision.verdict is Verdict.FORWARD
    assert decision.identity == ALICE


def test_a_verified_identity_the_rule_does_not_name_is_not_allowed():
    decision = judged(Policy(approvers=(PAYMENTS,)), Caller(BOB, agent="billing"))
    assert decision.verdict is Verdict.REJECT
    assert codes(decision.reasons) == [Reason.APPROVER_NOT_ALLOWED]
    [reason] = decision.reasons
    # only the payment interrupt has a rule: input_required is anyone's
    assert (reason.interrupt_id, reason.path) == ("int-1", "/resume/0")
    assert "'bob'" in reason.detail and "payments-approvers" in reason.detail
    assert decision.identity == BOB  # a rejection names who was rejected too


def test_an_unattested_answer_is_unverified_and_says_why():
    policy = Policy(approvers=(PAYMENTS,))
    decision = judged(policy, Caller(agent="billing"))
    assert codes(decision.reasons) == [Reason.APPROVER_UNVERIFIED]
    assert "carries no identity" in decision.reasons[0].detail
    assert decision.identity is None
    forged = judged(policy, Caller(unverified="its signature does not verify", agent="billing"))
    assert codes(forged.reasons) == [Reason.APPROVER_UNVERIFIED]
    assert "its signature does not verify" in forged.reasons[0].detail


def test_identity_headers_not_believed_are_a_warning_whatever_the_verdict():
    """A forged or tampered identity is judged as unattested, and the sender is told so
    (`identity_unverified`) even where no rule wants a verified identity."""
    forged = Caller(unverified="signed with key 'k9', not trusted", agent="billing")
    for policy, verdict in (
        (Policy(), Verdict.FORWARD),
        (Policy(approvers=(PAYMENTS,)), Verdict.REJECT),
    ):
        decision = judged(policy, forged)
        assert decision.verdict is verdict
        assert codes(decision.warnings) == [Warn.IDENTITY_UNVERIFIED]
        assert "'k9', not trusted" in decision.warnings[0].detail
        assert decision.identity is None
    for caller in (Caller(agent="billing"), Caller(ALICE, agent="billing")):
        assert codes(judged(Policy(), caller).warnings) == []


def test_one_reason_per_offending_interrupt_with_the_other_problems():
    everyone = ApproverRule(agent="billing", answer_subjects=("carol",))
    raw = run_input([entry("int-1", payload={"ok": True}), entry("int-2"), entry("int-2")])
    decision = judged(Policy(approvers=(everyone,)), Caller(BOB, agent="billing"), raw)
    assert sorted(codes(decision.reasons)) == sorted(
        [Reason.DUPLICATE_ENTRY, Reason.APPROVER_NOT_ALLOWED, Reason.APPROVER_NOT_ALLOWED]
    )
    offending = [r.interrupt_id for r in decision.reasons if r.code == "approver_not_allowed"]
    assert offending == ["int-1", "int-2"]


def test_abandoning_has_its_own_list_else_the_answerers():
    rule = ApproverRule(
        agent="billing", reason="payment", answer_subjects=("alice",), abandon_subjects=("*",)
    )
    raw = run_input([entry("int-1", "cancelled"), entry("int-2", payload="x")])
    assert judged(Policy(approvers=(rule,)), Caller(BOB, agent="billing"), raw).verdict is (
        Verdict.FORWARD
    )
    # "*" is any verified identity, never an unattested one
    unattested = judged(Policy(approvers=(rule,)), Caller(agent="billing"), raw)
    assert codes(unattested.reasons) == [Reason.APPROVER_UNVERIFIED]
    # without abandon lists, who may answer may abandon, and no one else
    strict = ApproverRule(agent="billing", reason="payment", answer_subjects=("alice",))
    assert codes(
        judged(Policy(approvers=(strict,)), Caller(BOB, agent="billing"), raw).reasons
    ) == [Reason.APPROVER_NOT_ALLOWED]
    assert judged(Policy(approvers=(strict,)), Caller(ALICE, agent="billing"), raw).verdict is (
        Verdict.FORWARD
    )


def test_a_rule_naming_nobody_wants_a_verified_identity_unless_unattested_is_accepted():
    verified = ApproverRule(agent="billing")
    assert judged(Policy(approvers=(verified,)), Caller(BOB, agent="billing")).verdict is (
        Verdict.FORWARD
    )
    assert codes(judged(Policy(approvers=(verified,)), Caller(agent="billing")).reasons) == [
        Reason.APPROVER_UNVERIFIED,
        Reason.APPROVER_UNVERIFIED,
    ]
    anyone = ApproverRule(agent="billing", unattested=True)
    assert judged(Policy(approvers=(anyone,)), Caller(agent="billing")).verdict is Verdict.FORWARD


def test_rules_of_other_agents_do_not_apply():
    assert judged(Policy(approvers=(PAYMENTS,)), Caller(agent="support")).verdict is (
        Verdict.FORWARD
    )


def test_the_most_specific_rule_wins_agent_over_group_over_any_then_reason():
    anyone = ApproverRule(reason="payment", answer_subjects=("root",))
    group = ApproverRule(agent="finance", reason="payment", answer_subjects=("gina",))
    group_any = ApproverRule(agent="finance", answer_subjects=("gary",))
    own = ApproverRule(agent="billing", answer_subjects=("olga",))
    rules = (anyone, group, group_any, own)
    assert rule_for(rules, "billing", "finance", "payment") is own
    assert rule_for(rules, "ledger", "finance", "payment") is group
    assert rule_for(rules, "ledger", "finance", "other") is group_any
    assert rule_for(rules, "solo", None, "payment") is anyone
    assert rule_for(rules, "solo", None, "other") is None
    # equals: the first in order
    twin = ApproverRule(agent="billing", answer_subjects=("twin",))
    assert rule_for((own, twin), "billing", None, "x") is own


@pytest.mark.parametrize(
    ("identity", "status", "expected"),
    [
        (Identity("alice"), "resolved", Allowed.YES),
        (Identity("x", ("ops",)), "resolved", Allowed.YES),
        (Identity("x", ("dev",)), "resolved", Allowed.NOT_ALLOWED),
        (None, "resolved", Allowed.UNVERIFIED),
        (Identity("x", ("dev",)), "cancelled", Allowed.YES),
        (Identity("x", ("sales",)), "cancelled", Allowed.NOT_ALLOWED),
    ],
)
def test_allows_by_subject_group_and_status(identity, status, expected):
    rule = ApproverRule(
        answer_subjects=("alice",), answer_groups=("ops",), abandon_groups=("dev", "ops")
    )
    assert rule.allows(identity, status) is expected


def test_a_group_s_rule_applies_to_its_agents():
    rule = ApproverRule(agent="finance", reason="payment", answer_subjects=("alice",))
    caller = Caller(BOB, agent="billing", group="finance")
    assert codes(judged(Policy(approvers=(rule,)), caller).reasons) == [Reason.APPROVER_NOT_ALLOWED]
