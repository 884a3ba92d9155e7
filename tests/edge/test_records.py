"""What the edge answers with a reply's record: the record as the gateway wrote it."""

from __future__ import annotations

from gateway.client import parse_reply
from gateway.client.replies import RejectReply
from gateway.edge.app import _record
from tests.client.test_replies import newer_gateways_rejection


def test_a_newer_gateways_codes_reach_the_http_caller_unchanged() -> None:
    record = newer_gateways_rejection()
    reply = parse_reply(record)
    assert isinstance(reply, RejectReply)
    answered = _record(reply)
    assert [r["code"] for r in answered["reasons"]] == ["uncovered_interrupt", "quota_exceeded"]
    assert [w["code"] for w in answered["warnings"]] == ["protocol_violation", "clock_skew"]
    assert answered == record
