"""Codes, findings and classification: the public vocabulary of the core."""

from __future__ import annotations

import pytest
from ag_ui.core import EventType

from gateway.core import EventKind, Finding, Reason, Rule, Verdict, Warn, classify
from gateway.core.events.classify import is_stateful
from gateway.core.values.findings import pointer


def test_the_codes_are_the_documented_strings():
    assert {str(v) for v in Verdict} == {"forward", "reject", "duplicate"}
    assert {
        "malformed_input",
        "thread_mismatch",
        "run_active",
        "uncovered_interrupt",
        "expired_interrupt",
        "duplicate_entry",
        "payload_schema_mismatch",
        "unrecognised_entry",
        "thread_unknown",
        "already_resumed",
        "internal_error",
        "input_too_large",
        "events_lagging",
        "agent_missing",
        "agent_name_illegal",
        "agent_not_allowed",
        "approver_not_allowed",
        "approver_unverified",
    } == {str(r) for r in Reason}
    assert {
        "unrecognised_entry",
        "thread_unknown",
        "expiry_unreadable",
        "unknown_member_stripped",
        "response_schema_unusable",
        "protocol_violation",
        "unknown_event_type",
        "late_run_error",
        "agent_missing",
        "agent_name_illegal",
        "agent_not_allowed",
    } <= {str(w) for w in Warn}
    assert {
        "first_event",
        "nested_run_started",
        "event_after_close",
    } <= {str(r) for r in Rule}


def test_a_finding_in_json_names_only_what_it_has():
    assert Finding("c", "d").to_json() == {"code": "c", "detail": "d"}
    full = Finding("c", "d", interrupt_id="i", path="/p", rule="r").to_json()
    assert full == {"code": "c", "interruptId": "i", "path": "/p", "rule": "r", "detail": "d"}
    assert Finding("c", "d", path="").to_json() == {"code": "c", "path": "", "detail": "d"}


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ((), ""),
        (("a",), "/a"),
        (("resume", 0, "payload"), "/resume/0/payload"),
        (("a/b", "c~d"), "/a~1b/c~0d"),
        (("",), "/"),
    ],
)
def test_pointer_escapes_per_rfc_6901(parts, expected):
    assert pointer(*parts) == expected


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("RUN_STARTED", EventKind.RUN_STARTED),
        ("RUN_FINISHED", EventKind.RUN_FINISHED),
        ("RUN_ERROR", EventKind.RUN_ERROR),
        ("SUBAGENT_STARTED", EventKind.SUBAGENT_STARTED),
        ("SUBAGENT_FINISHED", EventKind.SUBAGENT_FINISHED),
        ("SUBAGENT_ERROR", EventKind.SUBAGENT_ERROR),
        ("TEXT_MESSAGE_CONTENT", EventKind.STREAM),
        ("run_started", EventKind.UNKNOWN),
        ("SOMETHING_NEW", EventKind.UNKNOWN),
        (None, EventKind.UNTYPED),
        (3, EventKind.UNTYPED),
        (["RUN_STARTED"], EventKind.UNTYPED),
    ],
)
def test_classify(value, kind):
    assert classify(value) is kind


def test_every_protocol_event_type_is_known():
    for event_type in EventType:
        kind = classify(event_type.value)
        assert kind not in (EventKind.UNKNOWN, EventKind.UNTYPED)
        stateful = event_type.value.startswith(("RUN_", "SUBAGENT_"))
        # TOOL_CALL_START names a tool call for the approver policy's `tool`
        assert is_stateful(kind) == (stateful or event_type.value == "TOOL_CALL_START")
