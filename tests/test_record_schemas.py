"""schemas/{rejection,reply,warning,audit}.schema.json: valid, exact about the public codes, and
followed by what the gateway writes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jsonschema import Draft202012Validator

from gateway.codec import jsonio
from gateway.core.values.codes import Reason, Rule, Warn
from tests.kafka.test_pair import (
    BINARY_ID,
    TOPICS,
    Feed,
    answer,
    interrupted,
    make_pair,
    started,
)
from tests.record_schemas import KINDS, check, load

PAIR_TOPICS = {
    "agui.rejections": "rejection",
    "agui.warnings": "warning",
    "replies": "reply",
    "agui.audit": "audit",
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_schema_is_a_valid_draft_2020_12_schema(kind):
    schema = load(kind)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_the_schemas_enums_are_the_public_codes():
    rejection, warning = load("rejection"), load("warning")
    assert rejection["$defs"]["reason"]["properties"]["code"]["enum"] == [str(r) for r in Reason]
    assert rejection["$defs"]["warning"]["properties"]["code"]["enum"] == [str(w) for w in Warn]
    assert warning["properties"]["code"]["enum"] == [str(w) for w in Warn]
    audit = load("audit")
    assert audit["$defs"]["reason"]["properties"]["code"]["enum"] == [str(r) for r in Reason]
    assert audit["$defs"]["reason"]["properties"]["rule"]["enum"] == [str(r) for r in Rule]
    for rules in (
        rejection["$defs"]["reason"]["properties"]["rule"],
        rejection["$defs"]["warning"]["properties"]["rule"],
        warning["properties"]["rule"],
    ):
        assert rules["enum"] == [str(r) for r in Rule]


def test_every_record_of_a_pair_follows_its_schema():
    pair, _ = make_pair(wait_s=0.0, agent_topics=replace(TOPICS, audit="agui.audit"))
    f = Feed()
    reply = [("agui-reply-to", b"replies")]
    pair.take(
        "events",
        [
            f.rec("events", started(), 1),
            f.rec("events", interrupted(), 2),
            f.rec("events", b"{not json", 3),
            f.rec("events", {"type": "RUN_STARTED"}, 4, key=None),
        ],
    )
    pair.take(
        "requests",
        [
            f.rec("requests", answer(), 5, headers=[*reply, ("agui-correlation-id", b"c-1")]),
            f.rec("requests", answer(), 6, headers=[*reply, ("agui-correlation-id", BINARY_ID)]),
            f.rec("requests", answer("r9", "zz"), 7, headers=reply),
            f.rec("requests", b"\xff\xfe", 8, headers=reply),
            f.rec("requests", answer("r8"), 9, key=None, headers=reply),
            f.rec("requests", {**answer("r7"), "threadId": "t9"}, 10, key="t9", headers=reply),
        ],
    )
    pair.set_fence(4)
    pair.process(4, 0, 0)
    pair.sweep(10**15)
    seen = {PAIR_TOPICS[r.topic] for r in pair.round.out if r.topic in PAIR_TOPICS}
    assert seen == set(KINDS)
    verdicts = set()
    for record in pair.round.out:
        if record.topic in PAIR_TOPICS:
            body = jsonio.loads(record.value)
            check(PAIR_TOPICS[record.topic], body)
            verdicts.add(body.get("verdict"))
    assert {"forward", "reject", "duplicate"} <= verdicts


def test_a_record_breaking_its_schema_is_caught():
    body = {
        "verdict": "forward",
        "agent": "bot",
        "threadId": "t1",
        "runId": "r2",
        "warnings": [],
        "at": "2026-01-01T00:00:00.000+00:00",
    }
    with pytest.raises(AssertionError):
        check("reply", body)
    rejection = {
        **body,
        "verdict": "reject",
        "correlationId": "c-1",
        "reasons": [{"code": "run_active", "detail": "the run is active"}],
        "input": None,
        "inputText": "x",
        "source": {"topic": "agui.bot.requests", "partition": 0, "offset": 3},
    }
    check("rejection", rejection)
    check("reply", rejection)
    del rejection["correlationId"]
    with pytest.raises(AssertionError, match="'correlationId' is a required property"):
        check("rejection", rejection)
    check("reply", {**body, "correlationId": None})
    with pytest.raises(AssertionError):
        check("reply", {**body, "correlationId": None, "verdict": "maybe"})
    with pytest.raises(AssertionError):
        check(
            "warning",
            {
                "code": "no_such_code",
                "detail": "",
                "agent": "a",
                "threadId": None,
                "runId": None,
                "at": "x",
            },
        )


def test_every_record_of_a_groups_pair_follows_its_schema():
    from tests.kafka.test_group_pair import GROUP, REPLY, GroupFeed, make_group_pair

    pair, _ = make_group_pair(topics=replace(GROUP, audit="agui.audit"))
    f = GroupFeed()
    pair.take(
        "events",
        [
            f.rec("events", started(), 1, "alpha"),
            f.rec("events", interrupted(), 2, "alpha"),
            f.rec("events", started(), 3, None),  # agent_missing: a warning naming no agent
            f.rec("events", b"{not json", 4, "beta"),
        ],
    )
    pair.take(
        "requests",
        [
            f.rec("requests", answer(), 5, "alpha", headers=[REPLY]),
            f.rec("requests", answer(), 6, "alpha", headers=[REPLY]),
            f.rec("requests", answer("r9"), 7, "beta", headers=[REPLY]),
            f.rec("requests", answer("r8"), 8, b"\xff", headers=[REPLY]),
            f.rec("requests", answer("r7"), 9, "gamma", headers=[REPLY]),
        ],
    )
    pair.set_fence(4)
    pair.process(4, 0, 0)
    seen = {PAIR_TOPICS[r.topic] for r in pair.round.out if r.topic in PAIR_TOPICS}
    assert seen == set(KINDS)
    agents = set()
    for record in pair.round.out:
        if record.topic in PAIR_TOPICS:
            body = jsonio.loads(record.value)
            check(PAIR_TOPICS[record.topic], body)
            assert body["group"] == "team"
            agents.add(body["agent"])
    assert agents == {"alpha", "beta", None}
    # a group record's agent is a string or null, and its group a string
    with pytest.raises(AssertionError):
        check("warning", {**body, "group": 3})
