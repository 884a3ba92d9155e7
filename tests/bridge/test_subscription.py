"""Which run-requests topics the bridge subscribes to."""

from __future__ import annotations

import re

from gateway.bridge.service import subscription
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
