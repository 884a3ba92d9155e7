"""The fleet's two layouts as the gateway reads them (pure, no broker): whose topics carry
each agent, what names it on its records, which run-requests partitions the load reads."""

from __future__ import annotations

from bench.gatewayrun import _env_value
from bench.scenarios.fleet import GROUP, PARTITIONS, Fleet, event_records
from bench.workload import DecisionWorkload
from gateway.settings import Settings

AGENTS = ["a0000", "a0001", "a0002"]


def test_the_group_layout_puts_every_agent_and_the_next_one_on_the_groups_topics() -> None:
    fleet = Fleet("ns", "127.0.0.1:1", AGENTS, group_partitions=8)
    settings = Settings(**fleet.settings())
    # the gateway's own reading: each agent, and one added later, belongs to the group
    for agent in [*AGENTS, "a0003", "a10000"]:
        assert settings.group_of(agent) == GROUP
        assert fleet.topic(agent, "requests") == "ns.fleet.requests"
        assert fleet.headers(agent) == [("agui-agent", agent.encode())]
    assert settings.groups[GROUP].partitions == 8
    assert (fleet.layout, fleet.partitions, fleet.pairs) == ("group", 8, 8)
    assert {tp.topic for tp in fleet.run_requests()} == {"ns.fleet.run-requests"}
    assert sorted(tp.partition for tp in fleet.run_requests()) == list(range(8))


def test_the_agent_layout_keeps_each_agent_on_its_own_topics_with_no_header() -> None:
    fleet = Fleet("ns", "127.0.0.1:1", AGENTS)
    settings = Settings(**fleet.settings())
    assert settings.groups == {}
    for agent in AGENTS:
        assert settings.group_of(agent) is None
        assert fleet.topic(agent, "events") == f"ns.{agent}.events"
        assert fleet.headers(agent) == []
    assert (fleet.layout, fleet.partitions, fleet.pairs) == ("agent", PARTITIONS, 12)
    assert len(fleet.run_requests()) == 3 * PARTITIONS


def test_a_groups_events_carry_their_agent_and_keep_the_thread_as_key() -> None:
    fleet = Fleet("ns", "127.0.0.1:1", AGENTS, group_partitions=8)
    workloads = {a: DecisionWorkload(3, 8, n) for n, a in enumerate(AGENTS)}
    records = event_records(fleet, workloads)
    assert records and {topic for topic, *_ in records} == {"ns.fleet.events"}
    for agent, workload in workloads.items():
        mine = [(p, k, v) for _, p, k, v, h in records if h == [("agui-agent", agent.encode())]]
        assert mine == workload.events()


def test_the_groups_setting_reaches_the_gateway_through_its_environment(monkeypatch) -> None:
    fleet = Fleet("ns", "127.0.0.1:1", AGENTS, group_partitions=8)
    for key, value in fleet.settings().items():
        monkeypatch.setenv(f"AGUI_GATEWAY_{key.upper()}", _env_value(value))
    read = Settings()
    assert read.groups == Settings(**fleet.settings()).groups
    assert read.group_of("a0042") == GROUP and read.groups[GROUP].partitions == 8
