"""The reply models read the records the gateway writes (shapes as in docs/reference/records.md)."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from gateway.client import (
    DuplicateReply,
    ForwardReply,
    RejectReply,
    RequestRejected,
    parse_reply,
)
from gateway.core.values.codes import Reason, Rule, Verdict, Warn

ENVELOPE = {"agent": "support", "threadId": "t-1", "runId": "run-2", "correlationId": "c-9"}
AT = "2026-11-29T22:15:37.112+00:00"


def test_forward_with_warnings() -> None:
    reply = parse_reply(
        orjson.dumps(
            {
                "verdict": "forward",
                **ENVELOPE,
                "warnings": [
                    {"code": "unrecognised_entry", "detail": "d", "interruptId": "x"},
                    {"code": "protocol_violation", "detail": "d", "rule": "first_event"},
                ],
                "at": AT,
            }
        )
    )
    assert isinstance(reply, ForwardReply) and reply.verdict is Verdict.FORWARD
    assert [w.code for w in reply.warnings] == [Warn.UNRECOGNISED_ENTRY, Warn.PROTOCOL_VIOLATION]
    assert reply.warnings[0].interrupt_id == "x"
    assert reply.warnings[1].rule == Rule.FIRST_EVENT
    assert reply.correlation_id == "c-9"


def test_rejection_record_with_its_input_and_source() -> None:
    record = {
        "verdict": "reject",
        **ENVELOPE,
        "reasons": [{"code": "uncovered_interrupt", "detail": "d", "interruptId": "ask"}],
        "warnings": [],
        "input": {"threadId": "t-1", "runId": "run-2", "messages": []},
        "at": AT,
        "source": {"topic": "agui.support.requests", "partition": 2, "offset": 41},
        "reasonsOmitted": 3,
        "addedLater": {"kept": True},
    }
    reply = parse_reply(record)
    assert isinstance(reply, RejectReply)
    assert reply.codes() == [Reason.UNCOVERED_INTERRUPT]
    assert reply.reasons_omitted == 3
    assert reply.input["runId"] == "run-2"
    assert reply.source == record["source"]
    dumped = reply.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert dumped == record  # nothing lost, nothing added


def test_rejection_of_undecodable_input_carries_the_text() -> None:
    reply = parse_reply(
        {
            "verdict": "reject",
            "agent": "support",
            "threadId": None,
            "runId": None,
            "correlationId": None,
            "reasons": [{"code": "malformed_input", "detail": "not JSON"}],
            "warnings": [],
            "input": None,
            "inputText": "{oops",
            "at": AT,
            "source": {"topic": "t", "partition": 0, "offset": 1},
        }
    )
    assert isinstance(reply, RejectReply)
    assert (reply.thread_id, reply.input, reply.input_text) == (None, None, "{oops")


def test_duplicate() -> None:
    reply = parse_reply({"verdict": "duplicate", **ENVELOPE, "at": AT})
    assert isinstance(reply, DuplicateReply) and reply.run_id == "run-2"


def newer_gateways_rejection() -> dict:
    """A rejection from a newer gateway: a reason, a warning and a rule this client lacks."""
    return {
        "verdict": "reject",
        **ENVELOPE,
        "reasons": [
            {"code": "uncovered_interrupt", "detail": "d", "interruptId": "ask"},
            {"code": "quota_exceeded", "detail": "a reason added later"},
        ],
        "warnings": [
            {"code": "protocol_violation", "detail": "d", "rule": "first_event"},
            {"code": "clock_skew", "detail": "a warning added later", "rule": "late_rule"},
        ],
        "input": {"threadId": "t-1", "runId": "run-2", "messages": []},
        "at": AT,
    }


@pytest.mark.parametrize("as_bytes", [False, True])
def test_codes_a_newer_gateway_added_are_kept_as_strings(as_bytes: bool) -> None:
    record = newer_gateways_rejection()
    reply = parse_reply(orjson.dumps(record) if as_bytes else record)
    assert isinstance(reply, RejectReply)
    known, unknown = reply.codes()
    assert known is Reason.UNCOVERED_INTERRUPT  # a known code is still the enum member
    assert (type(unknown), unknown) == (str, "quota_exceeded")
    assert reply.reasons[1].detail == "a reason added later"
    codes = [(w.code, w.rule) for w in reply.warnings]
    assert codes == [(Warn.PROTOCOL_VIOLATION, Rule.FIRST_EVENT), ("clock_skew", "late_rule")]
    assert type(reply.warnings[0].code) is Warn and type(reply.warnings[0].rule) is Rule
    assert type(reply.warnings[1].code) is str and type(reply.warnings[1].rule) is str
    # written back as received: nothing lost
    assert reply.model_dump(mode="json", by_alias=True, exclude_unset=True) == record
    assert "quota_exceeded" in str(RequestRejected(reply))

    forward = parse_reply(
        {"verdict": "forward", **ENVELOPE, "warnings": record["warnings"][1:], "at": AT}
    )
    assert isinstance(forward, ForwardReply) and forward.warnings[0].code == "clock_skew"


@pytest.mark.parametrize(
    "record",
    [
        {"verdict": "maybe", **ENVELOPE, "at": AT},
        {"verdict": "reject", **ENVELOPE, "at": AT, "reasons": [{"code": 7}]},
        {"verdict": "reject", **ENVELOPE, "at": AT, "reasons": [{"detail": "no code"}]},
        {"verdict": "forward", "at": AT},
    ],
)
def test_what_is_not_a_reply_is_an_error(record: dict) -> None:
    with pytest.raises(ValidationError):
        parse_reply(record)


def test_a_groups_rejection_may_name_no_agent() -> None:
    """On a group's topics a request naming no usable agent is rejected with `agent`
    null and the group named; the client reads it, never as an unreadable reply."""
    reply = parse_reply(
        {
            "verdict": "reject",
            **ENVELOPE,
            "agent": None,
            "group": "team",
            "reasons": [{"code": "agent_missing", "detail": "d"}],
            "warnings": [],
            "input": None,
            "at": AT,
        }
    )
    assert isinstance(reply, RejectReply)
    assert (reply.agent, reply.group) == (None, "team")
    assert reply.codes() == [Reason.AGENT_MISSING]
    forward = parse_reply({"verdict": "forward", **ENVELOPE, "group": "team", "at": AT})
    assert (forward.agent, forward.group) == ("support", "team")
