"""Rejections and warnings on one topic for all, or (a template) on each owner's own."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from gateway import cli
from gateway.kafka.assign.prepare import Preparer
from gateway.kafka.pairs.pair import PartitionPair
from gateway.kafka.runner import Gateway
from gateway.kafka.wire.acls import Acl, gateway_acls, group_acls, overlaps
from gateway.kafka.wire.replytopics import ReplyTopics
from gateway.kafka.wire.topics import TopicNames, agent_topic_layout, interrupts_configs
from gateway.observe.metrics import Metrics
from gateway.settings import Settings
from tests.kafka.test_pair import Feed, make_pair

P = "User:agui-gateway"
PER_OWNER = {
    "rejections_topic": "agui.{agent}.rejections",
    "warnings_topic": "agui.{agent}.warnings",
    "audit_topic": "agui.{agent}.audit",
    "groups": {"payments": {"agents": ["refunds", "payouts"]}},
}


def test_a_template_names_each_owners_topics_and_a_plain_name_one_for_all() -> None:
    names = TopicNames(Settings(**PER_OWNER))  # type: ignore[arg-type]
    assert names.for_agent("support").rejections == "agui.support.rejections"
    assert names.for_agent("support").warnings == "agui.support.warnings"
    assert names.for_agent("payments").rejections == "agui.payments.rejections"
    shared = TopicNames(Settings()).for_agent("support")
    assert (shared.rejections, shared.warnings) == ("agui.rejections", "agui.warnings")


@pytest.mark.parametrize("setting", ["rejections_topic", "warnings_topic", "audit_topic"])
def test_a_template_names_the_agent_at_most_once(setting: str) -> None:
    with pytest.raises(ValidationError, match="at most once"):
        Settings(**{setting: "agui.{agent}.{agent}.out"})  # type: ignore[arg-type]
    assert Settings(**{setting: "plain"}).per_owner("plain") is False  # type: ignore[arg-type]


def test_topics_create_makes_the_owners_outputs_with_the_shared_ones_layout() -> None:
    settings = Settings(**PER_OWNER)  # type: ignore[arg-type]
    layout = agent_topic_layout(settings, "payments", 6, 3)
    assert layout["agui.payments.rejections"] == (3, {})
    assert layout["agui.payments.warnings"] == (3, {})
    assert layout["agui.payments.audit"][0] == 3
    assert "agui.rejections" not in layout and "agui.audit" not in layout and len(layout) == 8
    assert layout["agui.interrupts"] == (3, interrupts_configs())
    assert agent_topic_layout(Settings(), "payments", 6, 3)["agui.rejections"] == (3, {})


def test_acls_grant_write_on_the_owners_outputs_only() -> None:
    settings = Settings(**PER_OWNER)  # type: ignore[arg-type]
    writes = {a.name for a in gateway_acls(settings, "support", P) if a.operation == "Write"}
    assert {"agui.support.rejections", "agui.support.warnings"} <= writes
    assert not {"agui.rejections", "agui.warnings", "agui.payments.rejections"} & writes
    group = group_acls(settings, "payments", P)
    assert Acl("topic", "agui.payments.rejections", "literal", "Write", P) in group
    assert Acl("topic", "agui.payments.warnings", "literal", "Write", P) in group
    prefixed = gateway_acls(settings, "sup*", P)
    assert Acl("topic", "agui.sup", "prefixed", "Write", P) in prefixed
    assert any("rejections" in note for note in overlaps(settings, "sup*"))


def test_no_reply_may_go_to_an_owners_rejections_or_warnings_topic() -> None:
    replies = ReplyTopics(Settings(**PER_OWNER), Metrics(CollectorRegistry()))  # type: ignore[arg-type]
    assert not replies.allowed_by_name("agui.payments.rejections")
    assert not replies.allowed_by_name("agui.support.warnings")
    assert replies.allowed_by_name("agui.rejections")  # not the gateway's with the template
    shared = ReplyTopics(Settings(), Metrics(CollectorRegistry()))
    assert not shared.allowed_by_name("agui.rejections")


def test_a_pair_rejects_and_warns_on_its_owners_topics() -> None:
    settings = Settings(**PER_OWNER)  # type: ignore[arg-type]
    base, _ = make_pair()
    pair = PartitionPair(TopicNames(settings).for_agent("bot"), 0, base.ctx)
    f = Feed()
    reply_to = (("agui-reply-to", b"nope"),)
    pair.take("requests", [f.rec("requests", b"{oops", 5, headers=reply_to)])
    pair.set_fence(0)
    pair.process(0, 0, 0)
    by_topic = {r.topic: orjson.loads(r.value) for r in pair.round.out}
    assert set(by_topic) == {"agui.bot.rejections", "agui.bot.warnings", "agui.bot.audit"}
    assert by_topic["agui.bot.rejections"]["reasons"][0]["code"] == "malformed_input"
    assert by_topic["agui.bot.warnings"]["code"] == "reply_topic_unknown"


def test_a_pairs_transactions_cover_its_owners_outputs_not_a_shared_one() -> None:
    settings = Settings(**PER_OWNER)  # type: ignore[arg-type]
    counts = {
        "agui.bot.run-requests": {0},
        "agui.bot.rejections": {0, 1},
        "agui.bot.warnings": {0},
        "agui.bot.audit": {0, 1, 2},
        "agui.rejections": {0},
        "agui.audit": {0},
    }
    consumer: Any = SimpleNamespace(
        _client=SimpleNamespace(cluster=SimpleNamespace(partitions_for_topic=counts.get))
    )
    preparer = Preparer(TopicNames(settings), None, consumer, None, None, None)  # type: ignore[arg-type]
    gateway = Gateway(settings, Metrics(CollectorRegistry()))
    slot = SimpleNamespace(pair=gateway.make_pair("bot", 0))
    assert set(preparer.written(slot)) == {  # type: ignore[arg-type]
        TopicPartition("agui.bot.gateway-changelog", 0),
        TopicPartition("agui.bot.run-requests", 0),
        TopicPartition("agui.bot.rejections", 0),
        TopicPartition("agui.bot.rejections", 1),
        TopicPartition("agui.bot.warnings", 0),
        TopicPartition("agui.bot.audit", 0),
        TopicPartition("agui.bot.audit", 1),
        TopicPartition("agui.bot.audit", 2),
    }


def test_the_acls_command_prints_write_on_each_owners_topics(capsys, monkeypatch) -> None:
    monkeypatch.setenv("AGUI_GATEWAY_REJECTIONS_TOPIC", "agui.{agent}.rejections")
    monkeypatch.setenv("AGUI_GATEWAY_WARNINGS_TOPIC", "agui.{agent}.warnings")
    monkeypatch.setenv("AGUI_GATEWAY_GROUPS", '{"payments": {"agents": ["refunds"]}}')
    for args, owner in (
        (["--agent-pattern", "support"], "support"),
        (["--group", "payments"], "payments"),
    ):
        assert cli.main(["acls", *args, "--principal", P]) == 0
        out = capsys.readouterr().out
        for kind in ("rejections", "warnings"):
            (line,) = [line for line in out.splitlines() if f"--topic agui.{owner}.{kind}" in line]
            assert "--operation Write" in line
        assert "--topic agui.rejections" not in out and "--topic agui.warnings" not in out
