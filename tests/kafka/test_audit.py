"""The audit record of each decided request, in the decision's round, without Kafka:
what it holds (never a payload), its bounds, identities, and its place in the round."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import orjson
import pytest

from gateway.codec import jsonio
from gateway.codec.records import MAX_RECORD_BYTES, NOT_DECODED, InRecord
from gateway.core import Decision, Reason, Verdict
from gateway.core.values.decision import Answer
from gateway.core.values.findings import Finding
from gateway.core.values.identity import Identity
from gateway.kafka.pairs import audit
from tests.kafka.test_pair import TOPICS, Feed, answer, interrupted, make_pair, started
from tests.record_schemas import check

AUDITED = replace(TOPICS, audit="agui.audit")
SECRET = "card 4111-1111-1111-1111 approved by Ada"


def audited_pair(**kwargs):
    return make_pair(agent_topics=AUDITED, **kwargs)


def audit_records(pair) -> list:
    return [r for r in pair.round.out if r.topic == "agui.audit"]


def bodies(pair) -> list[dict]:
    return [jsonio.loads(r.value) for r in audit_records(pair)]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def interrupted_thread(pair, f: Feed, *ids: str) -> None:
    pair.take(
        "events", [f.rec("events", started(), 1), f.rec("events", interrupted("r1", *ids), 2)]
    )


def test_a_forward_and_its_audit_record_are_in_one_round_and_the_payload_only_hashed():
    pair, _ = audited_pair()
    f = Feed()
    interrupted_thread(pair, f, "a", "b")
    request = {
        "threadId": "t1",
        "runId": "r2",
        "messages": [],
        "resume": [
            {"interruptId": "a", "status": "resolved", "payload": {"note": SECRET, "ok": True}},
            {"interruptId": "b", "status": "cancelled"},
        ],
    }
    headers = [("agui-correlation-id", b"c-7")]
    pair.take("requests", [f.rec("requests", request, 30, headers=headers)])
    pair.set_fence(2)
    pair.process(2, 0.0, wall_ms=1_800_000_000_123)
    assert [r.topic for r in pair.round.out] == ["agui.bot.run-requests", "agui.audit"]
    (record,) = audit_records(pair)
    assert record.key == b"bot/t1"
    assert record.headers == headers
    assert SECRET.encode() not in record.value  # the payload is not carried in any form
    body = jsonio.loads(record.value)
    check("audit", body)
    assert body["verdict"] == "forward"
    assert body["attestation"] == "unattested" and body["identity"] is None
    assert (body["agent"], body["threadId"], body["runId"]) == ("bot", "t1", "r2")
    assert "group" not in body
    # RFC 8785: members sorted, no whitespace (written out here by hand)
    canonical = '{"note":"' + SECRET + '","ok":true}'
    assert body["interrupts"] == [
        {
            "interruptId": "a",
            "status": "resolved",
            "reason": "tool_call",
            "forwarded": True,
            "payloadSha256": sha(canonical),
        },
        {
            "interruptId": "b",
            "status": "cancelled",
            "reason": "tool_call",
            "forwarded": True,
            "payloadSha256": None,
        },
    ]
    assert body["reasons"] == []
    assert body["correlationId"] == "c-7"
    assert body["source"] == {"topic": "agui.bot.requests", "partition": 0, "offset": 0}
    assert body["requestedAtMs"] == 30 and body["requestedAt"] == "1970-01-01T00:00:00.030+00:00"
    assert body["judgedAt"] == "1970-01-01T00:00:00.030+00:00"  # LogAppendTime: the record's
    assert body["decidedAtMs"] == 1_800_000_000_123
    assert body["decidedAt"] == "2027-01-15T08:00:00.123+00:00"


def test_one_payload_hashes_alike_however_its_members_are_ordered_or_spaced():
    first = audit.payload_hash({"payload": {"b": [1, 2.5, "é"], "a": None}})
    again = audit.payload_hash(jsonio.loads(b'{"payload" : { "a":null , "b":[1,2.5,"\\u00e9"]}}'))
    assert first == again == {"payloadSha256": sha('{"a":null,"b":[1,2.5,"é"]}')}
    assert audit.payload_hash({"payload": None}) == {"payloadSha256": sha("null")}
    assert audit.payload_hash({}) == {"payloadSha256": None}
    assert first != audit.payload_hash({"payload": {"b": [1, 2.5, "e"], "a": None}})


def test_a_payload_without_a_canonical_form_is_said_so_and_never_carried():
    found = audit.payload_hash({"payload": {"amount": 2**60}})
    assert found["payloadSha256"] is None
    assert "integer beyond" in found["payloadNotHashed"]
    assert str(2**60) not in orjson.dumps(found).decode()


def test_a_rejection_is_audited_with_its_reasons_and_the_interrupts_it_tried():
    pair, _ = audited_pair()
    f = Feed()
    interrupted_thread(pair, f, "a", "b")
    request = {
        **answer("r2", "a"),
        "resume": [{"interruptId": "a", "status": "resolved", "payload": SECRET}],
    }
    pair.take("requests", [f.rec("requests", request, 30)])
    pair.set_fence(2)
    pair.process(2, 0.0, 99)
    assert [r.topic for r in pair.round.out] == ["agui.rejections", "agui.audit"]
    (body,) = bodies(pair)
    check("audit", body)
    assert body["verdict"] == "reject"
    assert [(r["code"], r.get("interruptId")) for r in body["reasons"]] == [
        ("uncovered_interrupt", "b")
    ]
    assert body["interrupts"] == [
        {
            "interruptId": "a",
            "status": "resolved",
            "reason": "tool_call",
            "forwarded": False,
            "payloadSha256": sha(f'"{SECRET}"'),
        }
    ]
    assert SECRET.encode() not in audit_records(pair)[0].value
    assert body["correlationId"] is None


def test_a_duplicate_and_a_malformed_request_are_audited_too():
    pair, _ = audited_pair()
    f = Feed()
    interrupted_thread(pair, f, "a")
    pair.take(
        "requests",
        [
            f.rec("requests", answer("r2"), 30),
            f.rec("requests", answer("r2"), 31),  # the same again: a duplicate
            f.rec("requests", b"{not json", 32),
        ],
    )
    pair.set_fence(2)
    pair.process(2, 0.0, 0)
    found = bodies(pair)
    for body in found:
        check("audit", body)
    assert [b["verdict"] for b in found] == ["forward", "duplicate", "reject"]
    assert [b["source"]["offset"] for b in found] == [0, 1, 2]
    assert found[2]["reasons"][0]["code"] == "malformed_input"
    assert found[2]["interrupts"] == []  # nothing read, nothing named


def test_a_request_the_gateway_failed_on_leaves_one_audit_record_its_internal_error(
    monkeypatch,
):
    import gateway.kafka.pairs.decide as decide_module

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    pair, _ = audited_pair(wait_s=0.0)
    f = Feed()
    monkeypatch.setattr(decide_module, "judge", boom)
    pair.take("requests", [f.rec("requests", answer(), 3)])
    pair.set_fence(0)
    pair.process(0, 0.0, 0)
    assert [r.topic for r in pair.round.out] == ["agui.rejections", "agui.audit"]
    (body,) = bodies(pair)
    check("audit", body)
    assert body["verdict"] == "reject"
    assert [r["code"] for r in body["reasons"]] == ["internal_error"]


def test_a_defect_after_the_audit_record_was_built_takes_it_back_with_the_forward(monkeypatch):
    """A record whose handling fails half way keeps none of what it added: one audit
    record (its internal_error), not the forward's as well."""
    pair, _ = audited_pair()
    f = Feed()
    interrupted_thread(pair, f, "a")
    pair.set_fence(2)
    pair.process(2, 0.0, 0)  # the events applied

    def failing_put(*args, **kwargs):
        raise RuntimeError("state")

    monkeypatch.setattr(pair, "put", failing_put)  # the forward's state fails, last
    pair.take("requests", [f.rec("requests", answer(), 30)])
    pair.set_fence(2)
    pair.process(2, 0.0, 0)
    assert [r.topic for r in pair.round.out] == ["agui.rejections", "agui.audit"]
    assert [b["reasons"][0]["code"] for b in bodies(pair)] == ["internal_error"]


def test_an_aborted_round_forgets_its_audit_record_and_the_replay_writes_it_once():
    pair, _ = audited_pair()
    f = Feed()
    interrupted_thread(pair, f, "a")
    request = f.rec("requests", answer(), 30)
    pair.take("requests", [request])
    pair.set_fence(2)
    pair.process(2, 0.0, 0)
    assert [r.topic for r in pair.seal().records()].count("agui.audit") == 1
    pair.aborted()  # the transaction aborted: nothing of it is visible, nothing kept
    assert audit_records(pair) == [] and pair.sealed is None
    f.offsets = {"events": 0, "requests": 0}  # read again from the last commit
    interrupted_thread(pair, f, "a")
    pair.take("requests", [f.rec("requests", answer(), 30)])
    pair.set_fence(2)
    pair.process(2, 0.0, 0)
    sealed = pair.seal()
    assert [r.topic for r in sealed.records()].count("agui.audit") == 1
    pair.committed_round(sealed, 0.0)
    assert audit_records(pair) == []  # the next round starts empty


def test_with_the_trail_off_no_audit_record_is_written():
    pair, _ = make_pair()  # TOPICS: audit None
    f = Feed()
    interrupted_thread(pair, f, "a")
    pair.take("requests", [f.rec("requests", answer(), 30), f.rec("requests", b"x", 31)])
    pair.set_fence(2)
    pair.process(2, 0.0, 0)
    assert [r.topic for r in pair.round.out] == ["agui.bot.run-requests", "agui.rejections"]


def record(value: bytes = b"{}", headers=()) -> InRecord:
    return InRecord("agui.bot.requests", 2, 41, 1_000, 1, b"t1", value, tuple(headers))


def test_a_verified_identity_is_recorded_as_verified():
    who = Identity("ada@example.com", ("payments-approvers", "staff"), "https://idp", "edge-2026")
    decision = Decision(Verdict.FORWARD, thread_id="t1", run_id="r2", identity=who)
    body = audit.body(record(), decision, "bot", None, "t1", 1_000, 2_000)
    check("audit", body)
    assert body["attestation"] == "verified"
    assert body["identity"] == {
        "subject": "ada@example.com",
        "groups": ["payments-approvers", "staff"],
        "issuer": "https://idp",
        "signer": "edge-2026",
    }
    unattested = audit.body(record(), replace(decision, identity=None), "bot", None, "t1", 0, 0)
    check("audit", unattested)
    assert (unattested["attestation"], unattested["identity"]) == ("unattested", None)


def test_the_shell_records_the_identity_a_decision_carries():
    """Through the pair's effects, as the judge's decision will carry it."""
    pair, _ = audited_pair()
    who = Identity("bob", ("ops",), "idp", "")
    decision = Decision(
        Verdict.FORWARD,
        thread_id="t1",
        run_id="r2",
        answers=(Answer("a", "tool_call", "resolved", 1),),
        identity=who,
    )
    raw = answer("r2", "a")
    pair.effects.decision(pair.round, record(), decision, "t1", 1_000, b"{}", raw, wall_ms=5)
    (body,) = bodies(pair)
    check("audit", body)
    assert body["identity"]["subject"] == "bob" and body["attestation"] == "verified"
    assert body["interrupts"][0]["forwarded"] is True
    assert body["decidedAtMs"] == 5


def test_a_record_stays_bounded_whatever_the_request_and_identity_hold():
    control = "\x01" * 5_000  # six bytes each once escaped
    who = Identity(control, tuple(control + str(i) for i in range(500)), control, control)
    resume = [
        {"interruptId": control + str(i), "status": control, "payload": {"n": 2**60}}
        for i in range(10_000)
    ]
    reasons = tuple(
        Finding(str(Reason.UNCOVERED_INTERRUPT), control, interrupt_id=control, path=control)
        for _ in range(5_000)
    )
    decision = Decision(Verdict.REJECT, reasons=reasons, thread_id="t1", identity=who)
    correlation = [("agui-correlation-id", b"c" * 200_000)]
    body = audit.body(
        record(headers=correlation), decision, "bot", None, "t1", 0, 0, {"resume": resume}
    )
    assert len(body["interrupts"]) == audit.MAX_INTERRUPTS
    assert body["interruptsOmitted"] == 10_000 - audit.MAX_INTERRUPTS
    assert body["reasonsOmitted"] == 5_000 - audit.MAX_REASONS
    assert body["identity"]["groupsOmitted"] == 500 - audit.MAX_GROUPS
    assert len(body["correlationId"]) < 1_100
    check("audit", body)
    value = audit.encode(body)
    assert len(value) <= MAX_RECORD_BYTES
    assert len(orjson.dumps(body)) > MAX_RECORD_BYTES  # the fallback was needed
    slim = jsonio.loads(value)
    check("audit", slim)
    assert slim["interrupts"] == [] and slim["interruptsOmitted"] == 10_000
    assert slim["identity"]["groupsOmitted"] == 500


@pytest.mark.parametrize(
    "raw",
    [NOT_DECODED, [1], {"resume": "x"}, {"resume": [1, None, {"interruptId": 5}]}],
    ids=["unread", "array", "resume-not-a-list", "odd-entries"],
)
def test_any_request_shape_gives_a_valid_record(raw):
    decision = Decision(Verdict.REJECT, reasons=(Finding("malformed_input", "x"),))
    body = audit.body(record(), decision, None, "team", None, 0, 0, raw)
    check("audit", body)
    assert body["group"] == "team" and body["agent"] is None


def test_keys_find_a_thread_by_agent_and_thread():
    assert audit.key("alpha", "team", "t/1") == b"alpha/t/1"
    assert audit.key(None, "team", "t1") == b"team/t1"
    assert audit.key("bot", "bot", None) == b"bot/"


def test_a_forward_rejected_as_too_large_keeps_who_sent_it():
    from gateway.codec.records import too_large

    who = Identity("ada", ("approvers",))
    decision = Decision(Verdict.FORWARD, thread_id="t1", run_id="r2", identity=who)
    rejected = too_large(decision, MAX_RECORD_BYTES + 1)
    assert rejected.verdict is Verdict.REJECT and rejected.identity == who
    body = audit.body(record(), rejected, "bot", None, "t1", 0, 0)
    assert body["identity"]["subject"] == "ada"
    assert [r["code"] for r in body["reasons"]] == ["input_too_large"]


def test_an_interrupt_about_an_announced_tool_call_is_audited_with_its_tool_name():
    pair, _ = audited_pair()
    f = Feed()
    finished = interrupted("r1", "a", "b")
    finished["outcome"]["interrupts"][0]["toolCallId"] = "call-1"
    tool_start = {"type": "TOOL_CALL_START", "toolCallId": "call-1", "toolCallName": "transfer"}
    pair.take(
        "events",
        [
            f.rec("events", started(), 1),
            f.rec("events", tool_start, 2),
            f.rec("events", finished, 3),
        ],
    )
    pair.take("requests", [f.rec("requests", answer("r2", "a", "b"), 30)])
    pair.set_fence(3)
    pair.process(3, 0.0, wall_ms=1_800_000_000_123)
    (body,) = bodies(pair)
    check("audit", body)
    assert [(i["interruptId"], i.get("toolName")) for i in body["interrupts"]] == [
        ("a", "transfer"),
        ("b", None),
    ]
    assert "toolName" not in body["interrupts"][1]  # absent, as before, when not known
