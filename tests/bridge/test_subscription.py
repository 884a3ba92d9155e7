"""Which run-requests topics the bridge subscribes to, and which agent runs a request."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from gateway.bridge.ledger import RunRequest
from gateway.bridge.metrics import BridgeMetrics
from gateway.bridge.partition import AgentEndpoint, Refusal
from gateway.bridge.service import Bridge, served_groups, subscription
from gateway.settings import Settings


def test_listed_agents_only() -> None:
    s = Settings(bridge_agents={"pay.ments": {"url": "http://a/"}, "b": {"url": "http://b/"}})
    pattern = re.compile(subscription(s))
    assert pattern.match("agui.pay.ments.run-requests")
    assert pattern.match("agui.b.run-requests")
    assert not pattern.match("agui.payXments.run-requests")  # names are literal
    assert not pattern.match("agui.b.events")
    assert not pattern.match("agui.bb.run-requests")


def test_agents_by_pattern() -> None:
    s = Settings(bridge_agent_pattern="lg-[a-z]+", bridge_default={"url": "http://x/{agent}"})
    pattern = re.compile(subscription(s))
    assert pattern.match("agui.lg-approvals.run-requests")
    assert not pattern.match("agui.other.run-requests")
    assert not pattern.match("agui.lg-approvals.requests")


def test_a_group_is_read_on_its_own_topic_not_its_agents() -> None:
    s = Settings(
        groups={
            "team": {"agents": ["alpha", "beta"]},
            "others": {"agents": ["gamma"]},
            "wide": {"agent_pattern": "w-.*"},
        },
        bridge_agents={"alpha": {"url": "http://a/"}, "solo": {"url": "http://s/"}},
    )
    assert served_groups(s) == ["team"]  # no agent of "others" or "wide" is served
    pattern = re.compile(subscription(s))
    assert pattern.match("agui.team.run-requests")
    assert pattern.match("agui.solo.run-requests")
    assert not pattern.match("agui.alpha.run-requests")  # alpha's requests are on team's
    assert not pattern.match("agui.others.run-requests")
    assert not pattern.match("agui.wide.run-requests")


def test_a_group_by_pattern_is_served_by_the_default_endpoint() -> None:
    s = Settings(
        groups={"wide": {"agent_pattern": "w-.*"}, "listed": {"agents": ["x"]}},
        bridge_agent_pattern="w-.*",
        bridge_default={"url": "http://x/{agent}"},
    )
    assert served_groups(s) == ["wide"]
    assert re.compile(subscription(s)).match("agui.wide.run-requests")


async def test_each_request_is_run_by_the_agent_it_names_or_refused() -> None:
    s = Settings(
        groups={"team": {"agents": ["alpha", "beta", "gamma"]}},
        bridge_agents={
            "alpha": {"url": "http://a/"},
            "beta": {"url": "http://b/"},
            "solo": {"url": "http://s/"},
        },
    )
    bridge = Bridge(s, BridgeMetrics(CollectorRegistry()))
    team, solo = bridge._resolver("team", grouped=True), bridge._resolver("solo", grouped=False)

    def asked(agent: str | None) -> RunRequest:
        return RunRequest(0, b"t", b"{}", None, agent)

    try:
        for agent, url in (("alpha", "http://a/"), ("beta", "http://b/")):
            endpoint = team(asked(agent))
            assert isinstance(endpoint, AgentEndpoint)
            assert (endpoint.agent, endpoint.url) == (agent, url)
        assert bridge.endpoints["alpha"].client is not bridge.endpoints["beta"].client
        assert team(asked(None)) == Refusal(
            "agent_missing",
            "a run request on group 'team''s topic names no agent in its agui-agent header",
        )
        outsider = team(asked("mallory"))  # not of the group: its RUN_ERROR names no one
        assert isinstance(outsider, Refusal) and outsider.code == "agent_not_allowed"
        assert outsider.agent is None
        for illegal in ("not a name!", "a" * 250, "caf\ufffd"):  # the last: not UTF-8
            refusal = team(asked(illegal))
            assert isinstance(refusal, Refusal)
            assert (refusal.code, refusal.agent) == ("agent_name_illegal", None)
            assert len(refusal.message) < 400
        unserved = team(asked("gamma"))  # of the group, no endpoint here
        assert isinstance(unserved, Refusal) and (unserved.code, unserved.agent) == (
            "agent_not_served",
            "gamma",
        )
        # an agent's own topic: no header, or its own name, is that agent; another is refused
        for named in (None, "solo"):
            endpoint = solo(asked(named))
            assert isinstance(endpoint, AgentEndpoint) and endpoint.agent == "solo"
        other = solo(asked("alpha"))
        assert isinstance(other, Refusal) and (other.code, other.agent) == (
            "agent_not_allowed",
            "solo",
        )
    finally:
        for endpoint in bridge.endpoints.values():
            await endpoint.client.aclose()


async def test_an_agent_of_another_group_is_not_run_on_this_groups_topic() -> None:
    """`a-1` is listed by group `first`, and matched by `second`'s pattern too: it
    belongs to `first`, so a request naming it on `second`'s topic is refused, as the
    gateway refuses it."""
    s = Settings(
        groups={"first": {"agents": ["a-1"]}, "second": {"agent_pattern": "a-.*"}},
        bridge_agent_pattern="a-.*",
        bridge_default={"url": "http://x/{agent}"},
    )
    bridge = Bridge(s, BridgeMetrics(CollectorRegistry()))
    try:
        second = bridge._resolver("second", grouped=True)
        refusal = second(RunRequest(0, b"t", b"{}", None, "a-1"))
        assert isinstance(refusal, Refusal) and refusal.code == "agent_not_allowed"
        endpoint = second(RunRequest(0, b"t", b"{}", None, "a-2"))
        assert isinstance(endpoint, AgentEndpoint) and endpoint.url == "http://x/a-2"
        # the agents bridge_default serves share one HTTP client, each with its own slots
        other = second(RunRequest(0, b"t", b"{}", None, "a-3"))
        assert isinstance(other, AgentEndpoint) and other.url == "http://x/a-3"
        assert other.client is endpoint.client and other.slots is not endpoint.slots
    finally:
        for endpoint in bridge.endpoints.values():
            await endpoint.client.aclose()
