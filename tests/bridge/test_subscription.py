"""Which run-requests topics the bridge subscribes to."""

from __future__ import annotations

import re

from gateway.bridge.service import served_groups, subscription
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
