"""`agui-gateway demo --group-agents 3` end to end on the real broker: three simulated
agents of one group on the group's topics, through the in-process gateway."""

from __future__ import annotations

import re

import pytest

from gateway.demo.console import FINAL_MARKER
from tests.demo.test_demo import demo_output, field, pairs
from tests.integration.support import Namespace, collect, header

pytestmark = pytest.mark.integration


@pytest.mark.timeout(150)
async def test_the_demo_runs_a_group_of_agents_on_one_set_of_topics(
    kafka_bootstrap: str, unique_name
) -> None:
    ns = Namespace(kafka_bootstrap)
    group = unique_name("grp")[:20]
    members = [f"{group}-{n}" for n in (1, 2, 3)]
    argv = ["demo", "--agent", group, "--group-agents", "3", "--duration", "20", "--rate", "6"]
    out = await demo_output(ns, argv, timeout=120)
    assert out.count(FINAL_MARKER) == 1, out
    summary = out.split(FINAL_MARKER, 1)[1]
    assert f"agui-gateway demo, group '{group}' (3 agents)" in summary
    assert field(summary, "agents on the group's topics").startswith(" ".join(members))
    by_agent = {
        name: int(n)
        for name, n in re.findall(r"(\S+)=(\d+)", field(summary, "conversations by agent"))
    }
    assert set(by_agent) == set(members) and all(n > 0 for n in by_agent.values()), summary
    forwarded = int(field(summary, "requests forwarded"))
    assert forwarded > 0, summary
    # the forwards were continued by the agents they named (none named no agent: no
    # simulator notes); the last ones may arrive after the agents stopped
    consumed = int(field(summary, "run requests consumed").split()[0])
    assert 0 < consumed <= forwarded, summary
    assert field(summary, "unexpected verdicts") == "0", summary
    assert "simulator notes" not in summary, summary
    assert pairs(field(summary, "runs closed by outcome"))["interrupt"] > 0, summary

    # the gateway forwarded on the group's run-requests topic, each naming its agent
    run_requests = await collect(
        ns.bootstrap, ns.run_requests(group), count=forwarded, timeout=20, settle=2.0
    )
    assert len(run_requests) == forwarded
    named = {header(r, "agui-agent") for r in run_requests}
    assert named <= set(members) and len(named) > 1, named
    assert not re.search(rf"{re.escape(ns.prefix)}\.{re.escape(members[0])}\.", out)
