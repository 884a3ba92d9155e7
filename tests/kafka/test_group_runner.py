"""A group's pair in the running gateway (fake Kafka clients of test_runner): one round
decides many agents' requests, and commits them in one transaction."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.kafka.pairs.agents import GroupTopics
from gateway.settings import Settings
from tests.kafka.test_runner import (
    ANSWER,
    INTERRUPTED,
    STARTED,
    assign,
    gw,
    producer,
    rec,
    run_round,
    tps,
    transactions,
)

__all__ = ["gw"]  # the fixture, used by name


async def test_one_round_of_a_group_decides_many_agents_in_one_transaction(gw: Any) -> None:
    gw.settings = Settings(
        revoke_timeout_s=0.05, audit_enabled=False, groups={"team": {"agent_pattern": "w-.*"}}
    )
    ev, rq = tps("team")
    await assign(gw, ev, rq)
    slot = gw.assignment.slots[("team", 0)]
    assert isinstance(slot.pair.layout, GroupTopics)
    agents = [f"w-{i}" for i in range(20)]
    events, requests = [], []
    for i, agent in enumerate(agents):  # every agent's thread is "t1"
        named = [("agui-agent", agent.encode())]
        events += [rec(ev, 2 * i, 1, STARTED, named), rec(ev, 2 * i + 1, 2, INTERRUPTED, named)]
        requests.append(rec(rq, i, 5, ANSWER, named))
    gw.offsets.ends = {ev: len(events)}
    gw.consumer.positions[ev] = len(events)
    await run_round(gw, {ev: events, rq: requests})
    assert transactions(gw, "committed") == 1  # twenty agents' decisions, one transaction
    sent = producer(gw, ("team", 0)).sent
    forwards = [value for topic, value in sent if topic == "agui.team.run-requests"]
    assert len(forwards) == 20 and all(orjson.loads(v)["threadId"] == "t1" for v in forwards)
    assert [t for t, _ in sent if t == "agui.team.gateway-changelog"] == [
        "agui.team.gateway-changelog"
    ] * 20  # one thread each: never one thread for all
    assert not [t for t, _ in sent if t == "agui.rejections"]
    assert set(gw.assignment.slots) == {("team", 0)}  # one pair however many agents
