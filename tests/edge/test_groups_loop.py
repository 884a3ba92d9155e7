"""A group's whole loop with the official `@ag-ui/client` (HttpAgent, as in
`test_agui_client.py`): two HttpAgents -> `agui-gateway edge` (`/agents/alpha`,
`/agents/beta`) -> group `team`'s requests topic -> `agui-gateway run` -> `team`'s
run-requests -> `agui-gateway bridge` -> two real pydantic-ai agents at different
URLs -> `team`'s events -> edge -> each HttpAgent.

Both conversations use one thread id and the same run ids at the same time: only
the `agui-agent` header tells them apart, in the gateway's judging, the bridge's
choice of URL and the edge's streams. Each agent runs its own two forwarded runs
and its approved tool exactly once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.bridge.agents import Served, approval_agent
from tests.bridge.support import BridgeProcess, bridge_settings
from tests.edge.support import EdgeProcess
from tests.edge.test_agui_client import USER, drive, installed_client
from tests.integration.support import GatewayProcess, Namespace

pytestmark = pytest.mark.integration

GROUP = "team"
AGENTS = ("alpha", "beta")
GROUPS = orjson.dumps({GROUP: {"agents": list(AGENTS)}}).decode()


@pytest.fixture
async def ns(kafka_bootstrap: str) -> Namespace:
    namespace = Namespace(kafka_bootstrap)
    await namespace.create_agent(GROUP, partitions=2)
    return namespace


def check(report: dict[str, Any]) -> None:
    """One HttpAgent's conversation: interrupt, guarded run, 422, approved resume."""
    first = report["first"]
    assert first["ok"], first
    assert first["types"][0] == "RUN_STARTED" and first["types"][-1] == "RUN_FINISHED"
    [interrupt] = report["pendingAfterFirst"]
    assert not report["uncovered"]["ok"] and report["uncovered"]["status"] is None
    bad = report["badPayload"]
    assert not bad["ok"] and bad["status"] == 422, bad
    assert {r["code"] for r in bad["payload"]["reasons"]} == {"payload_schema_mismatch"}
    assert bad["payload"]["reasons"][0]["interruptId"] == interrupt["id"]
    resumed = report["resumed"]
    assert resumed["ok"], resumed
    assert resumed["types"][0] == "RUN_STARTED" and resumed["types"][-1] == "RUN_FINISHED"
    assert report["pendingAfterResume"] == []
    assert report["lastMessage"] == {"role": "assistant", "content": "Done: sent 100 to alice"}


async def test_two_http_agents_of_one_group_on_one_thread_id_through_the_whole_loop(
    ns: Namespace, tmp_path: Path, create_topics
) -> None:
    modules = installed_client()
    await create_topics([f"{ns.prefix}.edge-replies"])  # before the gateway starts
    (alpha_app, alpha), (beta_app, beta) = approval_agent(), approval_agent()
    async with Served(alpha_app) as alpha_at, Served(beta_app) as beta_at:
        gateway = await GatewayProcess(ns, tmp_path, "gateway", groups=GROUPS).start()
        bridge = await BridgeProcess(
            ns,
            tmp_path,
            "bridge",
            **bridge_settings(
                ns, {"alpha": {"url": alpha_at.url}, "beta": {"url": beta_at.url}}, groups=GROUPS
            ),
        ).start()
        edge = await EdgeProcess(ns, tmp_path, groups=GROUPS).start()
        try:
            reports = await asyncio.gather(
                *(
                    drive(modules, f"{edge.url}/agents/{agent}", "thread-shared", USER)
                    for agent in AGENTS
                )
            )
        finally:
            await edge.stop()
            await bridge.stop()
            await gateway.stop()
    for agent, report in zip(AGENTS, reports, strict=True):
        try:
            check(report)
        except AssertionError as exc:
            raise AssertionError(f"{agent}: {exc}\n{report}") from exc
    # each agent got its own forwarded runs only (not the guarded run-2, not the
    # rejected run-3), and its approved tool ran exactly once
    for counters in (alpha, beta):
        assert counters.run_ids == ["run-1", "run-4"]
        assert counters.tool_calls == 1
