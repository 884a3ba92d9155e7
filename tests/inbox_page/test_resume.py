"""From the submitted form to the thread's next RunAgentInput: coverage, expiry, schema."""

from __future__ import annotations

from ag_ui.core import RunAgentInput
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.reading.shape import read_input
from gateway.inbox.page import resume
from tests.inbox_page.memory import item

NOW = 1_764_000_000_000
AMOUNT = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "maximum": 100}},
    "required": ["amount"],
}


def two_open() -> list[dict]:
    return [
        item("billing", "t-1", "approve", schema={"type": "boolean"}, opened_ms=NOW - 5000),
        item("billing", "t-1", "refund", schema=AMOUNT, opened_ms=NOW - 5000),
    ]


def test_every_open_interrupt_answered_gives_one_entry_each_in_the_views_order():
    fields = {
        "0.id": "refund",
        "0.status": "resolved",
        "0:/amount": "40",
        "1.id": "approve",
        "1.status": "resolved",
        "1:": "approve",
    }
    plan = resume.plan(two_open(), fields, NOW)
    assert plan.issues == ()
    assert plan.entries == (
        {"interruptId": "approve", "status": "resolved", "payload": True},
        {"interruptId": "refund", "status": "resolved", "payload": {"amount": 40}},
    )


def test_abandoning_needs_no_payload_and_ignores_the_inputs():
    fields = {
        "0.id": "approve",
        "0.status": "cancelled",
        "0:": "garbage",
        "1.id": "refund",
        "1.status": "cancelled",
    }
    plan = resume.plan(two_open(), fields, NOW)
    assert plan.issues == ()
    assert [e["status"] for e in plan.entries] == ["cancelled", "cancelled"]
    assert all("payload" not in e for e in plan.entries)


def test_a_form_that_leaves_an_open_interrupt_out_is_not_readable():
    plan = resume.plan(two_open(), {"0.id": "approve", "0.status": "resolved", "0:": "deny"}, NOW)
    assert not plan.readable
    assert [(i.interrupt, i.message) for i in plan.issues] == [
        ("refund", "open but not in the form: reload the thread")
    ]


def test_a_form_naming_an_interrupt_no_longer_open_is_not_readable():
    fields = {"0.id": "approve", "0.status": "cancelled", "1.id": "refund", "1.status": "cancelled"}
    fields |= {"2.id": "gone", "2.status": "cancelled"}
    plan = resume.plan(two_open(), fields, NOW)
    assert not plan.readable
    assert [i.interrupt for i in plan.issues] == ["gone"]


def test_a_part_neither_answered_nor_abandoned_is_not_readable():
    plan = resume.plan(two_open()[:1], {"0.id": "approve", "0:": "approve"}, NOW)
    assert [i.message for i in plan.issues] == ["answer it or abandon it"]


def test_an_expired_interrupt_can_only_be_abandoned():
    expired = [item("billing", "t-1", "late", opened_ms=NOW - 9000, expires_ms=NOW)]
    plan = resume.plan(expired, {"0.id": "late", "0.status": "resolved", "0:": "approve"}, NOW)
    assert not plan.readable
    assert plan.issues[0].message == "expired: it can only be abandoned"
    plan = resume.plan(expired, {"0.id": "late", "0.status": "cancelled"}, NOW)
    assert plan.entries == ({"interruptId": "late", "status": "cancelled"},)
    # one millisecond before it expires it can still be answered
    plan = resume.plan(expired, {"0.id": "late", "0.status": "resolved", "0:": "approve"}, NOW - 1)
    assert plan.issues == () and plan.entries[0]["payload"] is True


def test_a_payload_breaking_the_schema_is_an_issue_by_the_gateways_own_check():
    fields = {"0.id": "refund", "0.status": "resolved", "0:/amount": "500"}
    fields |= {"1.id": "approve", "1.status": "resolved", "1:": "approve"}
    plan = resume.plan(two_open(), fields, NOW)
    assert plan.readable  # it can be sent (the gateway will reject it)
    assert [(i.interrupt, i.path, i.schema) for i in plan.issues] == [("refund", "/amount", True)]
    assert len(plan.entries) == 2


def test_unreadable_fields_are_issues_that_block_sending():
    fields = {"0.id": "refund", "0.status": "resolved", "0:/amount": "forty"}
    fields |= {"1.id": "approve", "1.status": "resolved", "1:": "approve"}
    plan = resume.plan(two_open(), fields, NOW)
    assert not plan.readable
    assert [(i.path, i.message) for i in plan.issues] == [("/amount", "not an integer")]


def test_an_empty_json_editor_sends_no_payload_and_the_schema_sees_null():
    open_items = [item("a", "t", "x", schema={"type": "array"})]
    plan = resume.plan(open_items, {"0.id": "x", "0.status": "resolved", "0:": ""}, NOW)
    assert plan.entries == ({"interruptId": "x", "status": "resolved"},)
    assert [i.schema for i in plan.issues] == [True]


def test_an_unusable_schema_raises_no_issue():
    open_items = [item("a", "t", "x", schema={"type": "string", "pattern": "(?=x)"})]
    plan = resume.plan(open_items, {"0.id": "x", "0.status": "resolved", "0:": "12"}, NOW)
    assert plan.issues == ()


def test_the_run_input_is_a_valid_run_agent_input_answering_each_entry():
    entries = (
        {"interruptId": "approve", "status": "resolved", "payload": True},
        {"interruptId": "refund", "status": "cancelled"},
    )
    run_id = resume.new_run_id()
    wire = resume.run_input("t-1", run_id, entries)
    assert wire == {"threadId": "t-1", "runId": run_id, "messages": [], "resume": list(entries)}
    model = RunAgentInput.model_validate(wire)
    assert [(e.interrupt_id, e.status) for e in model.resume or []] == [
        ("approve", "resolved"),
        ("refund", "cancelled"),
    ]
    shape = read_input(wire)  # the gateway's own reading: valid, nothing stripped
    assert shape.model is not None and shape.malformed == [] and shape.unknown == []
    assert shape.model.ids() == ["approve", "refund"]
    assert resume.new_run_id() != run_id


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["resolved", "cancelled"]), st.sampled_from(["approve", "deny"])),
        min_size=1,
        max_size=12,
    ),
    st.randoms(use_true_random=False),
)
def test_a_whole_form_in_any_order_covers_every_open_interrupt_once(answers, rnd):
    open_items = [item("a", "t", f"i{n}", opened_ms=NOW) for n in range(len(answers))]
    order = list(range(len(answers)))
    rnd.shuffle(order)  # the form's parts in any order
    fields: dict[str, str] = {}
    for slot, n in enumerate(order):
        status, decision = answers[n]
        fields |= {f"{slot}.id": f"i{n}", f"{slot}.status": status, f"{slot}:": decision}
    plan = resume.plan(open_items, fields, NOW)
    assert plan.issues == ()
    assert [e["interruptId"] for e in plan.entries] == [f"i{n}" for n in range(len(answers))]
    for entry, (status, decision) in zip(plan.entries, answers, strict=True):
        assert entry["status"] == status
        assert entry.get("payload") == ((decision == "approve") if status == "resolved" else None)
    # drop any one part: the form is refused, naming the interrupt left out
    gone = rnd.randrange(len(answers))
    slot = order.index(gone)
    partial = {k: v for k, v in fields.items() if not k.startswith((f"{slot}.", f"{slot}:"))}
    assert len(resume.parts(partial)) == len(answers) - 1  # a gap in the numbers is no end
    refused = resume.plan(open_items, partial, NOW)
    assert [(i.interrupt, i.message) for i in refused.issues] == [
        (f"i{gone}", "open but not in the form: reload the thread")
    ]


def test_a_string_breaking_its_pattern_or_length_is_a_schema_issue():
    schema = {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$", "maxLength": 8}
    open_items = [item("a", "t", "code", schema=schema)]
    good = resume.plan(open_items, {"0.id": "code", "0.status": "resolved", "0:": "ABC-12"}, NOW)
    assert good.issues == () and good.entries[0]["payload"] == "ABC-12"
    bad = resume.plan(open_items, {"0.id": "code", "0.status": "resolved", "0:": "abc-123456"}, NOW)
    assert [(i.path, i.schema) for i in bad.issues] == [("", True)]
    assert "does not match" in bad.issues[0].message and "longer than 8" in bad.issues[0].message
