"""The audit trail reader's own decisions, without a broker: which topics it reads, and
what it does when Kafka refuses it Read on one (the secure broker's ACLs are what
refuse it for real; here a stand-in for the consumer's three calls it makes)."""

from __future__ import annotations

import logging

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError

from gateway.inbox.trail import TrailReader
from gateway.inbox.view import InboxView
from gateway.settings import Settings

PER_AGENT = Settings(
    audit_topic="agui.{agent}.audit", groups={"team": {"agents": ["alpha", "beta"]}}
)


class Positions:
    """The consumer calls `_refused` makes: position, assign, seek."""

    def __init__(self, positions: dict[TopicPartition, int]) -> None:
        self.positions = dict(positions)
        self.assigned: list[TopicPartition] = []
        self.seeks: dict[TopicPartition, int] = {}

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = list(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks[tp] = offset


def test_the_topics_read_are_the_one_for_all_or_each_owners() -> None:
    shared = TrailReader(Settings(audit_topic="x.audit"), InboxView(1))
    assert shared._wanted({"x.audit", "y.audit", "agui.bot.audit"}) == ["x.audit"]
    assert shared.topic_of("bot") == "x.audit"
    owners = TrailReader(PER_AGENT, InboxView(1))
    assert owners._wanted({"agui.bot.audit", "agui.team.audit", "agui.bot.events"}) == [
        "agui.bot.audit",
        "agui.team.audit",
    ]
    assert owners.topic_of("alpha") == "agui.team.audit"  # a group's agent: the group's
    assert owners.topic_of("bot") == "agui.bot.audit"


async def test_a_topic_refused_is_left_said_once_and_the_others_kept_where_they_were(
    caplog,
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.inbox")
    reader = TrailReader(PER_AGENT, InboxView(1))
    bot, team = TopicPartition("agui.bot.audit", 0), TopicPartition("agui.team.audit", 0)
    consumer = Positions({bot: 7, team: 3})
    refused = TopicAuthorizationFailedError("agui.team.audit")
    kept = await reader._refused(consumer, {bot, team}, refused)  # type: ignore[arg-type]
    assert kept == {bot} and consumer.assigned == [bot] and consumer.seeks == {bot: 7}
    assert caplog.text.count("refuses this principal Read on the audit topic") == 1
    await reader._refused(consumer, {bot, team}, refused)  # type: ignore[arg-type]
    assert caplog.text.count("refuses this principal Read on the audit topic") == 1
    with pytest.raises(TopicAuthorizationFailedError):  # not one it reads: not its to handle
        await reader._refused(consumer, {bot}, TopicAuthorizationFailedError("other"))  # type: ignore[arg-type]
