"""The demo's group mode (`--group-agents`), without Kafka: who continues a forwarded
request, whom an answer names, and what the console says about the group."""

from __future__ import annotations

import asyncio

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.commands.demo import _with_group
from gateway.demo.agents import Agents, Conversation
from gateway.demo.clients import Clients
from gateway.demo.console import Header, demo_section, gateway_section
from gateway.demo.stats import DemoStats
from gateway.kafka.wire.topics import TopicNames
from gateway.settings import AgentGroup, Settings

MEMBERS = ["team-1", "team-2"]


def group_agents(stats: DemoStats) -> Agents:
    settings = Settings()
    topics = TopicNames(settings).for_agent("team")
    return Agents(settings, topics, stats, 1.0, "g", seed=1, members=MEMBERS, agent="team")


def request(run: str) -> bytes:
    return orjson.dumps({"threadId": "same", "runId": run})


async def test_a_forwarded_request_is_continued_by_the_agent_it_names() -> None:
    stats = DemoStats()
    agents = group_agents(stats)
    for member in MEMBERS:  # the same thread id for both agents
        agents.conversations[(member, "same")] = Conversation(depth=1)
    agents._continue(b"same", request("r-2"), [("agui-agent", b"team-2")])
    assert agents.conversations[("team-2", "same")].busy
    assert not agents.conversations[("team-1", "same")].busy
    agents._continue(b"same", request("r-x"), [])  # a group's request naming no agent
    assert stats.errors == {"run request naming no agent": 1}
    assert not agents.conversations[("team-1", "same")].busy
    for task in list(agents.tasks):
        task.cancel()
    await asyncio.gather(*agents.tasks, return_exceptions=True)


async def test_an_interrupt_is_answered_naming_the_agent_whose_run_it_was() -> None:
    stats = DemoStats()
    settings = Settings()
    clients = Clients(
        settings, TopicNames(settings).for_agent("team"), "r", stats, "g", seed=1, grouped=True
    )
    answered: list[str | None] = []

    async def answer(run: object, agent: str | None, seen_at: float) -> None:
        answered.append(agent)

    clients._answer = answer  # type: ignore[method-assign]
    finished = orjson.dumps(
        {
            "type": "RUN_FINISHED",
            "threadId": "same",
            "runId": "r-1",
            "outcome": {"type": "interrupt", "interrupts": [{"id": "i", "reason": "x"}]},
        }
    )
    clients._interrupted(b"same", finished, [("agui-agent", b"team-1")])
    clients._interrupted(b"same", finished, [("agui-agent", b"team-2")])  # same ids, other agent
    clients._interrupted(b"same", finished, [("agui-agent", b"team-2")])  # seen: not again
    clients._interrupted(b"same", finished, [])
    await asyncio.gather(*clients.tasks)
    assert answered == ["team-1", "team-2"]
    assert stats.errors == {"interrupt naming no agent": 1}


def test_the_console_names_the_group_and_sums_the_gateways_figures_over_it() -> None:
    header = Header("team", 3, 5, 20, "http://x/metrics", "/tmp/log", tuple(MEMBERS))
    section = demo_section(header, 1.0)
    assert section.title == "agui-gateway demo, group 'team' (2 agents)"
    assert section.rows[0].value == "team-1 team-2"
    registry = CollectorRegistry()
    requests = Counter("agui_gateway_requests", "", ["agent", "verdict"], registry=registry)
    requests.labels("team-1", "forward").inc(3)
    requests.labels("team-2", "forward").inc(4)
    requests.labels("other", "forward").inc(100)
    opened = Gauge("agui_gateway_interrupts_open", "", ["agent"], registry=registry)
    opened.labels("team-1").set(2)
    opened.labels("team").set(1)
    rows = {row.label: row.value for row in gateway_section(header.names, registry).rows}
    assert rows["requests forwarded"] == "7"
    assert rows["open interrupts"] == "3"


def test_the_demos_group_is_added_to_the_settings_unless_its_names_are_taken() -> None:
    grouped, problem = _with_group(Settings(), "team", MEMBERS)
    assert problem is None and grouped.group_of("team-2") == "team"
    taken = Settings(groups={"first": AgentGroup(agents=["team-1"])})
    _, problem = _with_group(taken, "team", MEMBERS)
    assert problem == "'team-1' is already an agent of group 'first'"
